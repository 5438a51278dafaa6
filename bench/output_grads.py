"""Models that return their loss beside their logits, trained with ``outputs.loss.backward()``
(Note [Outputs without a gradient] in ``torch_exec/executor.py``), on the CPU.

For each model and budget (a fraction f of the way from the least budget to plain autograd's measured
peak), on one profile:

- **every**: the plan that reserves the gradient of every output (what the wrapper plans before its
  first backward), run as is: its measured step peak against its prediction. The engine no longer
  materialises a zero gradient for the logits, so the step stays a logits tensor below the prediction.
  (Before, it was made and back-propagated: measured = predicted, ``--before`` rows.)
- **learned**: the plan after the first backward, reserving the gradients of the outputs that got one:
  its predicted time and peak, its measured peak.
- the least budget of either chain (``gpusolve.dp.minpeak.min_feasible_bytes``).

Each step is ``out = model(...); loss_of(out).backward()`` with ``out`` held through the backward (the
usual loop), parameter gradients allocated; peaks are the CPU allocator's events above the bytes before
the step (``torch_exec.meter``).

    python bench/output_grads.py [--models tv_gpt2,transformer,gpt2] [--out bench/results/output_grads_cpu]
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import torch_exec as te  # noqa: E402
from _common import command_line, cpu_description  # noqa: E402
from auto_models import make  # noqa: E402
from gpusolve import solve  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402

FRACTIONS = (0.5, 0.25, 0.0)


def bench_model(name: str, backend: str) -> list[dict]:
    model, args, kwargs, loss_of = make(name)
    model.train()
    wrapped = te.auto_checkpoint(model, "1TiB", backend=backend)
    wrapped.prepare(*args, **kwargs)
    ex = wrapped.executor
    entry = ex._last
    lo, hi = ex.min_budget_bytes, plain_peak_bytes(entry)
    every_chain = entry.exec_chain  # before any backward: every output's gradient reserved
    for p in wrapped.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        out = wrapped(*args, **kwargs)
        loss_of(out).backward()
        del out  # only after the backward

    rows = []
    for f in FRACTIONS:
        budget = int(lo + f * (hi - lo))
        every = solve(every_chain, budget, backend=backend)
        ex.replan(budget=budget, schedule_fn=lambda _chain, s=every.schedule: s)  # the plan as it was
        step()  # learns which outputs get a gradient; the schedule stays the same
        _, every_reading = measure_peak(step)
        every_sim = ex.plan  # the same schedule simulated on the learned chain (a smaller reserve)
        ex.replan(budget=budget, schedule_fn=None)  # the learned plan
        learned = ex.plan
        step()
        _, learned_reading = measure_peak(step)
        learned_chain = ex._last.exec_chain
        rows.append(dict(model=name, stages=learned_chain.n, fraction=f, budget_bytes=budget,
                         plain_peak_bytes=hi, out_grad_nbytes=ex._last.out_grad_nbytes,
                         out_grads=sorted(ex._last.out_grads), reserve_every=int(ex._last.plain_chain.grad_bytes[-1]),
                         reserve_learned=ex._last.grad_reserve,
                         every_predicted_peak=every.predicted_peak_bytes, every_predicted_ms=every.predicted_time_ms,
                         every_measured_peak=every_reading.peak,
                         every_resimulated_peak=every_sim.predicted_peak_bytes,
                         learned_predicted_peak=learned.predicted_peak_bytes,
                         learned_predicted_ms=learned.predicted_time_ms, learned_measured_peak=learned_reading.peak,
                         store_all_ms=learned.store_all_time_ms,
                         least_every=min_feasible_bytes(every_chain), least_learned=min_feasible_bytes(learned_chain),
                         learned_fits=learned_reading.peak <= budget, every_fits=every_reading.peak <= budget))
        r = rows[-1]
        print(f"{name:12s} f {f:4.2f} budget {budget}: every pred {r['every_predicted_peak']} meas "
              f"{r['every_measured_peak']} ({r['every_predicted_ms']:.3f} ms); learned pred {r['learned_predicted_peak']} "
              f"meas {r['learned_measured_peak']} ({r['learned_predicted_ms']:.3f} ms)", flush=True)
    return rows


def write(rows: list[dict], out: Path, command: str, before: Path | None) -> None:
    record = {"device": cpu_description(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": command, "torch": torch.__version__, "threads": 1, "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["# Outputs without a gradient: models returning (loss, logits), `outputs.loss.backward()` (CPU)", "",
             f"Device: {record['device']}; torch {torch.__version__}, 1 thread; date {record['date']}.",
             f"Command: `{command}`. Budgets at a fraction f of the way from the least budget to plain autograd's",
             "measured peak. *every*: the plan reserving the gradient of every output (the wrapper's plan before",
             "its first backward), run as is; *learned*: the plan after the first backward (Note [Outputs without",
             "a gradient] in `torch_exec/executor.py`). Peaks: the CPU allocator's, one step with the output held",
             "through the backward. Overheads: predicted, against the store-all step of the same profile.", "",
             "| model | f | budget B | logits' gradient B | every: predicted / measured B | measured / predicted | "
             "learned: predicted / measured B | measured / predicted | overhead every → learned | least budget every → learned |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        base = r["store_all_ms"]
        lines.append(
            f"| {r['model']} | {r['fraction']:.2f} | {r['budget_bytes']} | {r['reserve_every'] - r['reserve_learned']} | "
            f"{r['every_predicted_peak']} / {r['every_measured_peak']} | "
            f"{r['every_measured_peak'] / r['every_predicted_peak']:.3f} | "
            f"{r['learned_predicted_peak']} / {r['learned_measured_peak']} | "
            f"{r['learned_measured_peak'] / r['learned_predicted_peak']:.3f} | "
            f"{100 * (r['every_predicted_ms'] / base - 1):+.1f} % → {100 * (r['learned_predicted_ms'] / base - 1):+.1f} % | "
            f"{r['least_every']} → {r['least_learned']} |")
    held = all(r["every_fits"] and r["learned_fits"] for r in rows)
    lines += ["", f"Every measured peak within its budget: {'yes' if held else 'NO'}."]
    if before is not None:
        old = json.loads(before.read_text())
        lines += ["", f"Before (`{old['command']}` on the previous executor, {old['date'][:10]}; its own profile): the",
                  "engine made a zero gradient for the logits, and measured / predicted was:", "",
                  "| model | f | budget B | predicted B | measured B | measured / predicted |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in old["rows"]:
            lines.append(f"| {r['model']} | {r['fraction']:.2f} | {r['budget_bytes']} | {r['predicted_peak_bytes']} | "
                         f"{r['measured_peak_bytes']} | {r['measured_peak_bytes'] / r['predicted_peak_bytes']:.3f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tv_gpt2,transformer,gpt2")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "output_grads_cpu"))
    parser.add_argument("--before", type=Path, help="bench/auto_models.py --hold-outputs JSON of the previous executor")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    rows = [row for name in args.models.split(",") for row in bench_model(name, args.backend)]
    write(rows, Path(args.out), command_line("output_grads.py", argv), args.before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
