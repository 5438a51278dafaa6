"""`model.plan.to_dict()` (README: "`plan.to_dict()` is the JSON form") raises when the wrapper runs plain autograd
because it fits the budget, which is what the README's first examples do on a small model (a review of the README's
Python blocks, 2026-11-28).

Observed (six Linear+Tanh stages and a head, batch 64, CPU):
  CheckpointedSequential(stages, budget="60%").plan.to_dict()      -> a dict (backend "cpu")
  CheckpointedSequential(stages, budget="100%").plan.to_dict()     -> ValueError: this plan has no chain to compute
                                                                       its minimum feasible budget from
  auto_checkpoint(stages, "100%").plan.to_dict()                   -> the same ValueError
  (.plan.min_feasible_bytes raises the same; .plan.summary() reads "bucket 0 B (0 buckets), backend given,
  solved in 0.0 ms" for these plans.)
Cause: torch_exec/executor.py plan_from_schedule builds the plain-autograd Plan without chain= or known_min_bytes=,
and gpusolve/solve.py plan_dict reads plan.min_feasible_bytes, which raises without them.
Expected: to_dict() works on every plan the wrappers hand out (the chain passed, or the minimum known from the
profile). Exit 1 while it raises.
"""
import json
import sys

from _setup import te, torch
from torch import nn

torch.manual_seed(0)
stages = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(6)], nn.Linear(64, 10))
x = torch.randn(64, 64)
bad = 0
for label, make in (("CheckpointedSequential 60%", lambda: te.CheckpointedSequential(stages, budget="60%", backend="cpu")),
                    ("CheckpointedSequential 100%", lambda: te.CheckpointedSequential(stages, budget="100%", backend="cpu")),
                    ("auto_checkpoint 100%", lambda: te.auto_checkpoint(stages, "100%", backend="cpu"))):
    model = make()
    model(x).sum().backward()
    plan = model.plan
    try:
        json.dumps(plan.to_dict())
        print(f"{label}: plan.to_dict() ok (backend {plan.backend})")
    except Exception as err:  # noqa: BLE001
        bad += 1
        print(f"{label}: plan.to_dict() raised {type(err).__name__}: {err} (backend {plan.backend})")
print(f"BUG: {bad} plan(s) whose to_dict() raises" if bad else "ok")
sys.exit(1 if bad else 0)
