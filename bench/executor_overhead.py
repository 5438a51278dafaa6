"""The executor's fixed cost per stage: 200 tiny stages, plain autograd against the wrapper.

    python bench/executor_overhead.py [--stages 200] [--repeats 200]

Each stage is ``tanh`` of a 16-element tensor, so a step is almost all overhead (tanh saves its
output, so no two stages are fused: a stage that saves nothing, such as ``x * 2``, would be joined
with the next, see ``Chain.from_profile``). Plans:
- ``plain``: the wrapper when plain autograd fits (it runs the stages itself: no overhead);
- ``store-all (Function)``: the store-all schedule forced through the interpreter (one tape run);
- ``checkpoint every 10``: ``checkpoint_sequential``-like segments (each stage run twice or more).
Overhead per stage run = (wrapper step - plain step x runs / N) / runs, where ``runs`` counts the
forward runs of stages in the schedule; the steps are timed interleaved (plain, wrapper, plain, ...)
and the medians compared. Writes ``bench/results/executor_overhead_<device>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve.schedule import OpKind, segments_policy, tape_chain  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description  # noqa: E402  (same folder)

TARGET_US = 10.0


class Tiny(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def _median_pair(a, b, x, repeats):
    ta, tb = [], []
    for _ in range(repeats):
        for fn, out in ((a, ta), (b, tb)):
            started = time.perf_counter()
            fn(x).sum().backward()
            out.append(time.perf_counter() - started)
    return statistics.median(ta), statistics.median(tb)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", te.CPUTimingWarning)
    torch.set_num_threads(1)
    n = args.stages
    model = nn.Sequential(*[Tiny() for _ in range(n)])
    x = torch.randn(16, requires_grad=True)
    plans = {
        "plain (wrapper runs plain autograd)": None,
        "store-all through the interpreter (one tape run)": lambda chain: tape_chain(0, chain.n),
        "checkpoint every 10 stages": lambda chain: segments_policy(list(range(10, chain.n, 10)), chain.n),
    }
    rows = []
    for label, schedule_fn in plans.items():
        wrapped = te.CheckpointedSequential(model, budget="1GiB", backend="cpu", profile_passes=1,
                                            schedule_fn=schedule_fn, measure_steps=0)
        wrapped(x).sum().backward()  # profile and plan
        runs = sum(op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE) for op in wrapped.plan.schedule)
        plain, step = _median_pair(model, wrapped, x, args.repeats)
        per_run = (step - plain * runs / n) / runs * 1e6
        rows.append({"plan": label, "stage_runs": runs, "plain_step_us": plain * 1e6, "wrapper_step_us": step * 1e6,
                     "overhead_per_stage_run_us": per_run, "overhead": step / plain - 1.0})
        print(f"{label:50s} plain {plain * 1e6:8.1f} us  wrapper {step * 1e6:8.1f} us  "
              f"{runs} runs  overhead {per_run:6.2f} us per stage run")
    out = ROOT / "bench" / "results" / "executor_overhead_cpu.json"
    meta = {"device": cpu_description(), "date": _dt.date.today().isoformat(), "command": "python " + " ".join(sys.argv), "torch": torch.__version__,
            "threads": 1, "stages": n, "repeats": args.repeats, "target_us_per_stage": TARGET_US}
    out.write_text(json.dumps({"meta": meta, "records": rows}, indent=1))
    lines = ["# Executor overhead per stage (CPU)", "",
             f"{meta['device']}, {meta['date']}, torch {meta['torch']}, 1 thread, {n} stages of `tanh` on 16 floats, medians of "
             f"{args.repeats} interleaved steps. Command: `{meta['command']}`. Target: <= {TARGET_US:g} us per stage.", "",
             "| plan | stage runs | plain step (us) | wrapper step (us) | overhead per stage run (us) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['plan']} | {r['stage_runs']} | {r['plain_step_us']:.1f} | {r['wrapper_step_us']:.1f} | "
              f"{r['overhead_per_stage_run_us']:.2f} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
