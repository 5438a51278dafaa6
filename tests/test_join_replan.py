"""A refused re-plan of a join leaves every signature as it was, its branches' recomputed flags included (a review,
2026-11-28: the flags of the refused plan stayed beside the old plan's program, so a recomputed dropout ran without
its recorded RNG state and the gradients were wrong; bench/repros/rv9_join_refused_replan_keeps_new_recompute_flags.py)."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from gpusolve import InfeasibleBudgetError  # noqa: E402
from torch_exec.join import CheckpointedJoin  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning",
                                        "ignore::UserWarning")


def towers():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(32, 64), *[m for _ in range(4) for m in (nn.Linear(64, 64), nn.Tanh(), nn.Dropout(0.3))])
    b = nn.Sequential(nn.Linear(32, 128), *[m for _ in range(3) for m in (nn.Linear(128, 128), nn.Tanh(),
                                                                          nn.Dropout(0.3))], nn.Linear(128, 64))
    return nn.ModuleList([a, b])


def head(u, v):
    return (u.mean(0) * v.mean(0)).sum()


def flags_and_program(entry):
    flagged = {(b, s) for b, br in enumerate(entry.branches) for s, v in enumerate(br.recomputed) if v}
    turn = next(i for i, op in enumerate(entry.plan.schedule) if op.kind.name == "TURN")
    again = {(op.branch, op.stage) for op in entry.plan.schedule[turn + 1:] if op.kind.name.startswith("FWD")}
    return flagged, again


def test_a_refused_replan_restores_the_branches_recomputed_flags():
    model = towers()
    reference = copy.deepcopy(model)
    join = CheckpointedJoin([list(model[0]), list(model[1])], head, budget="1GiB", profile_passes=1,
                            profile_warmup=0)
    torch.manual_seed(1)
    small, large = (torch.randn(16, 32), torch.randn(4, 32)), (torch.randn(4, 32), torch.randn(64, 32))
    join.prepare(*small)
    entry = join._last
    least_small = join.min_budget_bytes
    join.prepare(*large)
    least_large = join.min_budget_bytes
    assert least_small < least_large
    join.replan(least_large + (least_large - least_small) // 4)  # both planned, with recomputations
    before = flags_and_program(entry)
    assert before[0] == before[1] and entry.plan is not None
    with pytest.raises(InfeasibleBudgetError):
        join.replan(least_small)  # the small signature re-plans (more recomputation), the large one is refused
    assert flags_and_program(entry) == before
    torch.manual_seed(5)
    join(*small).backward()
    torch.manual_seed(5)
    head(reference[0](small[0]), reference[1](small[1])).backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-8)
