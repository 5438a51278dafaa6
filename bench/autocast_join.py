"""A join network under ``torch.autocast`` (bfloat16, CPU): the join's predicted peak against the
allocator's, beside the same model cut as one chain. The record behind the limitation in
``torch_exec/join.py`` (auto_checkpoint keeps a chain while autocast is on).

    python bench/autocast_join.py

Model: ``examples/models.py``'s ``make("two_tower")`` (batch 4). The join capture is forced under
autocast by replacing ``AutoCheckpointed._join_setting`` (which otherwise keeps the chain). Budgets:
each capture's least budget and halfway to its plain-autograd peak; one measured step each
(``measure_memory(1)``), forward inside ``torch.autocast("cpu", dtype=torch.bfloat16)``, backward
outside. For the join at its least budget, the program entry where the step peaks (a meter mark after
each entry of the interpreted program), over REPEATS captures. Writes bench/results/autocast_join_cpu.json and .md.
"""
from __future__ import annotations

import datetime
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import models  # noqa: E402
import torch_exec as te  # noqa: E402
import torch_exec.join as tj  # noqa: E402
from _common import cpu_description  # noqa: E402
from torch_exec.auto import AutoCheckpointed  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import MemoryMeter  # noqa: E402


REPEATS = 4


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def capture(join: bool):
    model, args, _, _ = models.make("two_tower")
    wrapped = te.auto_checkpoint(model, "100%", join=join, backend="cpu")
    with autocast():
        wrapped.prepare(*args)
    ex = wrapped.executor
    plain = ex.plain_peak_bytes_for(ex._last) if join else plain_peak_bytes(ex._last)
    return model, args, wrapped, plain


def step(model, wrapped, args):
    for p in model.parameters():
        p.grad = None
    wrapped.measure_memory(1)
    with autocast():
        loss = wrapped(*args)
    loss.float().backward()
    return wrapped.memory_report()[-1]


def peak_entry(model, wrapped, args) -> dict:
    """The interpreted program entry at which the join step peaks, with the bytes held before it."""
    marks = []
    original = tj.interpret

    def traced(program, runtime):
        for item in program:
            original([item], runtime)
            marks.append((item, meter.mark()))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    tj.interpret = traced
    try:
        with MemoryMeter("cpu") as meter:
            start = meter.mark()
            with autocast():
                loss = wrapped(*args)
            loss.float().backward()
    finally:
        tj.interpret = original
    best, previous = None, start
    for (code, stage, arg, branch), mark in marks:
        held = meter.between(start, previous).delta
        peak = held + meter.between(previous, mark).peak
        if best is None or peak > best["peak"]:
            best = {"code": code, "stage": stage, "arg": arg, "branch": branch, "held_before": int(held),
                    "peak": int(peak)}
        previous = mark
    return best


def main() -> int:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    setting = AutoCheckpointed._join_setting
    AutoCheckpointed._join_setting = lambda self: True if self.join else setting(self)  # see the docstring
    rows, traces = [], []
    for join in (True, False):
        model, args, wrapped, plain = capture(join)
        least = wrapped.executor.min_budget_bytes
        for name, budget in (("least", least), ("halfway", (least + plain) // 2)):
            wrapped.replan(budget)
            record = step(model, wrapped, args)
            rows.append({"capture": "join" if join else "chain", "budget": name, "budget_bytes": int(budget),
                         "predicted_peak": int(wrapped.plan.predicted_peak_bytes),
                         "measured_beyond_grads": int(record.beyond_param_grads),
                         "within_budget": bool(record.within_budget)})
            print(rows[-1], flush=True)
    # The plans follow CPU-timed profiles: a few captures of the join, each at its least budget.
    for _ in range(REPEATS):
        model, args, wrapped, _ = capture(True)
        budget = wrapped.executor.min_budget_bytes
        wrapped.replan(budget)
        trace = peak_entry(model, wrapped, args) | {"budget_bytes": int(budget)}
        trace["within_budget"] = trace["peak"] <= budget
        traces.append(trace)
        print(trace, flush=True)
    meta = {"device": f"CPU: {cpu_description()}", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": "python bench/autocast_join.py", "torch": torch.__version__}
    out = ROOT / "bench" / "results" / "autocast_join_cpu"
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows, "join_least_peak_entries": traces},
                                                   indent=1) + "\n")
    lines = ["# A join under torch.autocast (bfloat16, CPU): predicted against measured", "",
             f"- device: {meta['device']}", f"- date: {meta['date']}", f"- command: `{meta['command']}`",
             f"- torch {meta['torch']}; model `examples/models.py` two_tower, batch 4; the join forced under autocast",
             "", "| capture | budget | budget B | predicted B | measured B (beyond parameter gradients) | within |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['capture']} | {r['budget']} | {r['budget_bytes']} | {r['predicted_peak']} | "
              f"{r['measured_beyond_grads']} | {'yes' if r['within_budget'] else 'NO'} |" for r in rows]
    lines += ["", "The steps above start with no parameter gradient (`zero_grad(set_to_none=True)`, PyTorch's "
                  "default): the gradients the step allocates are taken out. With every gradient allocated as zeros "
                  f"before the step (the profiler's convention: each incoming gradient is then a transient copy), "
                  f"{REPEATS} captures of the join, each at its least budget, peaked at (program entry: code, stage, "
                  "arg, branch; bytes held before it):", "",
              "| budget B | peak B | within | entry | held before B |", "| ---: | ---: | --- | --- | ---: |"]
    lines += [f"| {t['budget_bytes']} | {t['peak']} | {'yes' if t['within_budget'] else 'NO'} | "
              f"{(t['code'], t['stage'], t['arg'], t['branch'])} | {t['held_before']} |" for t in traces]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
