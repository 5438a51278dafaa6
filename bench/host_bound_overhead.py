"""The executor's own cost where the host sets the pace: DenseNet-121's layout with tiny widths on the CPU.

    python bench/host_bound_overhead.py [--repeats 60] [--budgets 100%,50%,35%]
                                        [--out bench/results/host_bound_overhead_cpu]

On the H200, torchvision's DenseNet-121 (batch 64) is host-bound: queueing a 50 % plan's ops took the host 68.0 of a
76.7 ms step, and the step measured 7 % above its predicted time (README "On an H200"). On the CPU every op is host
time, so the same layout with tiny widths (``examples/models.py``'s ``TVDenseNet``: blocks 6, 12, 24, 16, growth 4,
batch 2 of 32x32; cut by ``torch_exec.split.split_model``) shows what the executor adds beside the stages' own
work, which the plan's predicted time (from the CPU profile of the same stages) leaves out. Per budget: plain
autograd's step and the wrapper's, interleaved, medians (and minima) of ``--repeats``; the wrapper's predicted time.
At the first budget below 100 % the wrapper also runs with two of its costs switched off, to weigh them (timing
only: these runs are not correct steps):

- ``no parameter tap``: the parameter tap's inputs (Note [Hooks of routed parameters] in torch_exec/executor.py)
  left out; in a plain ``backward()`` the engine then makes no call of every parameter's AccumulateGrad with None;
- ``no buffer copies``: recomputed stages run without their buffers swapped for copies (Note [Recomputing from the
  step's buffers]).

Writes ``--out`` ``.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import torch_exec as te  # noqa: E402
import torch_exec.executor as ex  # noqa: E402
from _common import number_list, record_header, write_cpu_record  # noqa: E402  (same folder)
from models import TVDenseNet  # noqa: E402
from torch_exec.split import split_model  # noqa: E402


@contextlib.contextmanager
def _no_parameter_tap():
    tap = ex._tap_params
    ex._tap_params = lambda *args: []
    try:
        yield
    finally:
        ex._tap_params = tap


@contextlib.contextmanager
def _no_buffer_copies(entry):
    kept = entry.has_buffers, entry.buffer_writes
    entry.has_buffers, entry.buffer_writes = [False] * len(kept[0]), [False] * len(kept[1])
    try:
        yield
    finally:
        entry.has_buffers, entry.buffer_writes = kept


def _interleaved(fns: dict, repeats: int) -> dict:
    """Median and minimum ms of each step function, run in turn ``repeats`` times (each warmed once per turn)."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, (step, context) in fns.items():
            with context():
                step()
                started = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - started)
    return {name: (statistics.median(t) * 1e3, min(t) * 1e3) for name, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--budgets", type=number_list(str), default=["100%", "70%", "50%", "35%"])
    parser.add_argument("--blocks", type=number_list(int), default=[6, 12, 24, 16])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "host_bound_overhead_cpu")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TVDenseNet(growth=4, blocks=tuple(args.blocks), init=8, bn_size=2, classes=10).train()
    x = torch.randn(2, 3, 32, 32)
    stages = split_model(model, targets=torch.randint(0, 10, (2,)))
    for p in stages.parameters():
        p.grad = torch.zeros_like(p)
    wrapped = te.CheckpointedSequential(stages, budget="100%", backend="cpu", measure_steps=0)
    wrapped.prepare(x)

    def plain():
        stages(x).backward()

    def step():
        wrapped(x).backward()
    rows, weighed = [], False
    for budget in args.budgets:
        wrapped.replan(budget)
        plan, entry = wrapped.plan, wrapped._last
        fns = {"plain autograd": (plain, contextlib.nullcontext), "wrapper": (step, contextlib.nullcontext)}
        if not entry.plain and not weighed:
            weighed = True
            fns["wrapper, no parameter tap"] = (step, _no_parameter_tap)
            fns["wrapper, no buffer copies"] = (step, lambda: _no_buffer_copies(entry))
        measured = _interleaved(fns, args.repeats)
        row = {"budget": budget, "runs_plain": bool(entry.plain), "predicted_ms": plan.predicted_time_ms,
               "predicted_store_all_ms": plan.store_all_time_ms,
               "stage_runs": sum(op.kind.name in ("FWD_NOGRAD", "FWD_TAPE") for op in plan.schedule),
               "measured": {name: {"median_ms": m, "min_ms": low} for name, (m, low) in measured.items()}}
        rows.append(row)
        print(f"{budget}: " + " | ".join(f"{name} {m:.2f} (min {low:.2f})" for name, (m, low) in measured.items())
              + f" | predicted {plan.predicted_time_ms:.2f}", flush=True)
    record = write_cpu_record(args.out, "host_bound_overhead.py", argv, rows, repeats=args.repeats,
                              model=f"TVDenseNet(growth=4, blocks={tuple(args.blocks)}, init=8, bn_size=2), batch 2 "
                                    f"of 3x32x32, split_model: {len(stages)} stages")
    lines = record_header(record, "The executor's own cost where the host sets the pace (CPU)",
                          f"{record['model']}; medians (minima) of {args.repeats} interleaved steps, ms.")
    lines += ["| budget | plain autograd | wrapper | predicted | wrapper / predicted | stage runs | no parameter tap | "
              "no buffer copies |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        m = r["measured"]
        cell = lambda name: (f"{m[name]['median_ms']:.2f} ({m[name]['min_ms']:.2f})" if name in m  # noqa: E731
                             else "-")
        lines.append(f"| {r['budget']}{' (plain)' if r['runs_plain'] else ''} | {cell('plain autograd')} | "
                     f"{cell('wrapper')} | {r['predicted_ms']:.2f} | "
                     f"{m['wrapper']['median_ms'] / r['predicted_ms']:.3f} | {r['stage_runs']} | "
                     f"{cell('wrapper, no parameter tap')} | {cell('wrapper, no buffer copies')} |")
    lines += ["", "The predicted time is the plan's, from this run's CPU profile of the same stages; the last two "
              "columns are timing-only runs with one of the executor's costs switched off (the module docstring)."]
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {Path(args.out).with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
