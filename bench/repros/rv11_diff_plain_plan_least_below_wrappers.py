"""A wrapper running plain autograd (its budget fits it) now hands out a plan whose ``min_feasible_bytes`` (and
``to_dict()["min_feasible_bytes"]``) is the least of the PROFILED chain, below the wrapper's own least budget
(``model.min_budget_bytes``, that of the chain the executor runs: its reserved RNG states, buffers, floor): a
budget taken from it is refused (a review of 3a24b36, 2026-11-28).

3a24b36 passes ``chain=`` to plan_from_schedule so that such a plan's to_dict() works
(bench/repros/rv11_docs_plain_plan_to_dict.py); _PlannedModule._plan_grouping's plain-autograd branch builds it on
``entry.plain_chain`` (plain autograd's costs, nothing reserved), so min_feasible_bytes is
``min_feasible_bytes(plain_chain)``; a solved plan's (and the wrapper's) least is that of ``entry.exec_chain``.

Observed (six Linear, Dropout(0.1), Tanh stages and a head, batch 32, CPU; this script):
  CheckpointedSequential(..., "100%"): plan.min_feasible_bytes 41216, model.min_budget_bytes 77632,
  model.replan(41216) -> InfeasibleBudgetError "below the minimum feasible budget ... 77632 B";
  auto_checkpoint(same, "100%"): the same gap (figures printed below).
Cause: torch_exec/executor.py _PlannedModule._plan_grouping, ``plan_fits`` branch: plan_from_schedule(plain, ...)
leaves known_min_bytes unset, and Plan.min_feasible_bytes computes it from the plain chain.
Expected: every plan the wrapper hands out names the least budget the wrapper accepts (e.g. set
``plan.known_min_bytes`` there to the face's least as min_budget_bytes computes it:
max(least_budget_bytes(entry.exec_chain, link), entry.floor_bytes), min with plain_least_bytes(entry)). Exits 1
while a plain plan's least is below the wrapper's."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")


def stages():
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(64, 64), nn.Dropout(0.1), nn.Tanh())],
                         nn.Linear(64, 4))


x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
bad = 0
for label, make in (("CheckpointedSequential", lambda: te.CheckpointedSequential(stages(), budget="100%",
                                                                                  backend="cpu")),
                    ("auto_checkpoint", lambda: te.auto_checkpoint(stages(), "100%", backend="cpu"))):
    w = make()
    w(x).sum().backward()
    plan = w.plan
    least, said = w.min_budget_bytes, plan.min_feasible_bytes
    try:
        w.replan(said)
        outcome = f"accepted ({w.plan.backend})"
    except Exception as err:  # noqa: BLE001
        outcome = f"{type(err).__name__}: {str(err)[:110]}"
    print(f"{label}: plain plan ({plan.backend}) min_feasible_bytes {said}, to_dict {plan.to_dict()['min_feasible_bytes']}"
          f"; the wrapper's min_budget_bytes {least}; replan({said}) -> {outcome}")
    bad += said < least
print(f"BUG: {bad} plain plan(s) whose least budget is below the wrapper's" if bad else "ok")
sys.exit(1 if bad else 0)
