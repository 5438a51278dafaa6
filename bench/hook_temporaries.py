"""Where parameters' gradient hooks run, and what the plan counts of their temporaries (Note [Hooks of routed
parameters] in torch_exec/executor.py): a clamp hook on every parameter of a 4-layer MLP (the case of
tests/test_torch_exec.py::test_parameter_gradient_hooks_are_profiled), one step at the least budget with
``.grad`` already set (the hooks run in the stages' backwards) and one with ``.grad`` None (the parameters' first
backward: they run after the schedule's). Measured peak beyond the gradients / predicted peak.

    python bench/hook_temporaries.py [--out bench/results/hook_temporaries_cpu]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import record_header, write_cpu_record  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results/hook_temporaries_cpu")
    args = parser.parse_args(argv)
    import torch
    from torch import nn

    import torch_exec as te
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.ReLU())], nn.Linear(64, 10))
    for p in model.parameters():
        p.register_hook(lambda g: g.clamp(-0.01, 0.01) * 1.0)
    x = torch.randn(32, 64)
    wrapped = te.CheckpointedSequential(model, budget="1GiB", backend="cpu", profile_passes=1)
    wrapped.prepare(x)
    wrapped.replan(wrapped.min_budget_bytes)
    rows = []
    for where, prior in (("in the stages' backwards (.grad set)", 0.0), ("after the schedule's (.grad None)", None)):
        for p in model.parameters():
            p.grad = None if prior is None else torch.zeros_like(p)
        wrapped.measure_memory(1)
        wrapped(x).square().mean().backward()
        r = wrapped.memory_report()[-1]
        rows.append({"hooks run": where, "budget": r.budget, "predicted_peak": r.predicted_peak,
                     "measured_beyond_grads": r.beyond_param_grads,
                     "measured_over_predicted": round(r.beyond_param_grads / r.predicted_peak, 3)})
    record = write_cpu_record(args.out, "hook_temporaries.py", argv, rows)
    lines = record_header(record, "Gradient hooks' temporaries: where they run, what the plan counts",
                          "A clamp hook on every parameter of 4 x (Linear(64), ReLU) + Linear(64, 10), batch 32, "
                          "the least budget; one measured step each.")
    lines += ["| hooks run | budget (B) | predicted (B) | measured beyond gradients (B) | measured / predicted |",
              "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['hooks run']} | {r['budget']} | {r['predicted_peak']} | {r['measured_beyond_grads']} | "
              f"{r['measured_over_predicted']} |" for r in rows]
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
