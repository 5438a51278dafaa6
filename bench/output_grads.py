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
the step (``torch_exec.meter``). With ``--drop-outputs`` the caller keeps the loss only
(``loss = loss_of(model(...)); loss.backward()``, as transformers' ``Trainer`` and Lightning's
``training_step`` do) and says so (``caller_keeps="loss"``): *learned* is then the plan that reserves
neither the rest of the output nor its gradient, from the first step (Note [The caller holds a_N]).

    python bench/output_grads.py [--models tv_gpt2,transformer,gpt2] [--out bench/results/output_grads_cpu]
    python bench/output_grads.py --drop-outputs --out bench/results/output_holds_cpu
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
from torch_exec.executor import caller_output_bytes, learned_chain, plain_peak_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402

FRACTIONS = (0.5, 0.25, 0.0)


def bench_model(name: str, backend: str, drop: bool = False) -> list[dict]:
    model, args, kwargs, loss_of = make(name)
    model.train()
    wrapped = te.auto_checkpoint(model, "1TiB", backend=backend, caller_keeps="loss" if drop else "output")
    wrapped.prepare(*args, **kwargs)
    ex = wrapped.executor
    entry = ex._last
    every_chain = learned_chain(entry, None, None)[0]  # every output and its gradient reserved
    lo, hi = min_feasible_bytes(every_chain), plain_peak_bytes(entry)
    for p in wrapped.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        out = wrapped(*args, **kwargs)
        loss = loss_of(out)
        if drop:
            del out  # the caller keeps the loss only
        loss.backward()

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
        chain_learned = ex._last.exec_chain
        rows.append(dict(model=name, stages=chain_learned.n, fraction=f, budget_bytes=budget,
                         plain_peak_bytes=hi, out_grad_nbytes=ex._last.out_grad_nbytes,
                         out_grads=sorted(ex._last.out_grads), reserve_every=int(ex._last.plain_chain.grad_bytes[-1]),
                         reserve_learned=ex._last.grad_reserve,
                         output_reserve_every=caller_output_bytes(ex._last.plain_chain, ex._last.profile),
                         output_reserve_learned=ex._last.out_reserve, out_dropped=sorted(ex._last.out_dropped or ()),
                         every_predicted_peak=every.predicted_peak_bytes, every_predicted_ms=every.predicted_time_ms,
                         every_measured_peak=every_reading.peak,
                         every_resimulated_peak=every_sim.predicted_peak_bytes,
                         learned_predicted_peak=learned.predicted_peak_bytes,
                         learned_predicted_ms=learned.predicted_time_ms, learned_measured_peak=learned_reading.peak,
                         store_all_ms=learned.store_all_time_ms,
                         least_every=min_feasible_bytes(every_chain), least_learned=min_feasible_bytes(chain_learned),
                         learned_fits=learned_reading.peak <= budget, every_fits=every_reading.peak <= budget))
        r = rows[-1]
        print(f"{name:12s} f {f:4.2f} budget {budget}: every pred {r['every_predicted_peak']} meas "
              f"{r['every_measured_peak']} ({r['every_predicted_ms']:.3f} ms); learned pred {r['learned_predicted_peak']} "
              f"meas {r['learned_measured_peak']} ({r['learned_predicted_ms']:.3f} ms)", flush=True)
    return rows


def write(rows: list[dict], out: Path, command: str, before: Path | None, drop: bool = False) -> None:
    record = {"device": cpu_description(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": command, "torch": torch.__version__, "threads": 1, "drop_outputs": drop, "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    if drop:
        title = "# A caller that keeps the loss only: models returning (loss, logits), `loss.backward()` (CPU)"
        words = ("*every*: the plan reserving every output and the gradient of every output (the default wrapper's",
                 "plan before its first backward), run as is; *learned*: the plan of `caller_keeps=\"loss\"`, which",
                 "reserves only the loss and its gradient from the first step (Note [The caller holds a_N] in",
                 "`torch_exec/executor.py`). Peaks: the CPU allocator's, one step whose caller drops the output",
                 "before the backward. Overheads: predicted, against the store-all step of the same profile.")
        learned = "unreserved B"
    else:
        title = "# Outputs without a gradient: models returning (loss, logits), `outputs.loss.backward()` (CPU)"
        words = ("*every*: the plan reserving the gradient of every output (the wrapper's plan before",
                 "its first backward), run as is; *learned*: the plan after the first backward (Note [Outputs without",
                 "a gradient] in `torch_exec/executor.py`). Peaks: the CPU allocator's, one step with the output held",
                 "through the backward. Overheads: predicted, against the store-all step of the same profile.")
        learned = "logits' gradient B"
    lines = [title, "",
             f"Device: {record['device']}; torch {torch.__version__}, 1 thread; date {record['date']}.",
             f"Command: `{command}`. Budgets at a fraction f of the way from the least budget to plain autograd's",
             "measured peak.", *words, "",
             f"| model | f | budget B | {learned} | every: predicted / measured B | measured / predicted | "
             "learned: predicted / measured B | measured / predicted | overhead every → learned | least budget every → learned |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        base = r["store_all_ms"]
        lines.append(
            f"| {r['model']} | {r['fraction']:.2f} | {r['budget_bytes']} | {unreserved(r, drop)} | "
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


def unreserved(row: dict, drop: bool) -> int:
    """Bytes the learned plan no longer reserves: the gradients of the outputs that got none (and with
    ``drop``, the outputs the caller dropped)."""
    grads = row["reserve_every"] - row["reserve_learned"]
    return grads + (row["output_reserve_every"] - row["output_reserve_learned"] if drop else 0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tv_gpt2,transformer,gpt2")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "output_grads_cpu"))
    parser.add_argument("--before", type=Path, help="bench/auto_models.py --hold-outputs JSON of the previous executor")
    parser.add_argument("--drop-outputs", action="store_true",
                        help="the caller keeps the loss only (drops the model's outputs before the backward)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    rows = [row for name in args.models.split(",") for row in bench_model(name, args.backend, args.drop_outputs)]
    write(rows, Path(args.out), command_line("output_grads.py", argv), args.before, args.drop_outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
