"""Stages whose boundaries no backward saves (Note [Tensors no backward saves] in gpusolve/chain.py; Note [Two
groupings of unsaved boundaries] in torch_exec/executor.py): blocks that begin with a dropout merged into one
stage, and nothing below plain autograd's peak fitted (a review, 2026-11-28:
bench/repros/rv7_train_seq_unsaved_boundaries.py). The wrapper now also plans the stages with those boundaries
kept, and runs whichever grouping's plan is faster."""
from __future__ import annotations

import copy
import warnings

import pytest
torch = pytest.importorskip("torch")  # the suite runs without torch: these tests skip
import torch.nn.functional as F
from torch import nn

import torch_exec as te
from gpusolve.baselines import store_all
from gpusolve.chain import Chain
from gpusolve.errors import FallbackWarning, InfeasibleBudgetError
from gpusolve.simulate import store_all_peak_bytes
from torch_exec.executor import entry_budget_bytes, merged_face
from torch_exec.meter import measure_peak
from torch_exec.report import MemoryBudgetWarning
from torch_exec.profiler import profile_dict

from _torch_helpers import measured_step

D = 64


class _DropoutFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.d, self.a, self.b = nn.Dropout(0.1), nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, h):
        h = self.d(h)  # saves only its mask: the block's input is saved by no backward
        return h + self.b(torch.relu(self.a(h)))


def _stages(seed=0):
    torch.manual_seed(seed)
    return [nn.Linear(16, D)] + [_DropoutFirst() for _ in range(6)] + [nn.Linear(D, 5)]


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)


def test_the_profile_merges_them_and_merge_unsaved_false_keeps_them():
    x, _ = _data()
    data = profile_dict(_stages(), x, passes=1)
    merged, kept = Chain.from_profile(data), Chain.from_profile(data, merge_unsaved=False)
    assert merged.provenance["merged_unsaved"] == 6 and merged.n == 2
    assert kept.provenance["merged_unsaved"] == 0 and kept.n == 8
    # kept, the boundaries are counted as held through a tape run where autograd frees them: never below the merge
    assert store_all_peak_bytes(kept) >= store_all_peak_bytes(merged)


@pytest.mark.parametrize("budget", ["70%", "50%"])
def test_budgets_below_plain_autograds_peak_run_with_the_boundaries_kept(budget):
    x, y = _data()
    ref, stages = _stages(), _stages()
    plain = te.CheckpointedSequential(ref, budget=None)
    w = te.CheckpointedSequential(stages, budget=budget, backend="cpu", profile_passes=1)
    plan = w.prepare(x)
    assert plan.feasible and w.chain.n == 8 and w.chain.provenance["merged_unsaved"] == 0
    assert w.min_budget_bytes < 0.5 * plan.budget_bytes / float(budget[:-1]) * 100  # merged: 100 %
    for step in range(2):  # the same dropout masks as plain autograd: same seed before each step
        for model in (plain, w):
            torch.manual_seed(10 + step)
            F.cross_entropy(model(x), y).backward()
    for p, q in zip(plain.parameters(), w.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)
    reading = measured_step(w, lambda: F.cross_entropy(w(x), y).backward())
    assert reading.peak <= plan.budget_bytes
    assert reading.peak <= plan.predicted_peak_bytes  # the kept boundaries are over-counted, never under


def test_replan_goes_back_to_the_merged_grouping_where_it_is_as_fast():
    x, _ = _data()
    w = te.CheckpointedSequential(_stages(), budget="50%", backend="cpu", profile_passes=1)
    w.prepare(x)
    assert w.chain.n == 8
    w.replan(budget="100%")
    assert w.chain is w._last.plain_chain and w._last.plain_chain.n == 2  # plain autograd, merged: exact
    w.replan(budget="50%")
    assert w.chain.n == 8


def test_a_failed_replan_keeps_both_groupings():
    x, _ = _data()
    w = te.CheckpointedSequential(_stages(), budget="50%", backend="cpu", profile_passes=1)
    w.prepare(x)
    least = w.min_budget_bytes
    with pytest.raises(InfeasibleBudgetError):
        w.replan(budget=least - 1)
    assert w.chain.n == 8 and w._last.regrouped.plain_chain.n == 2
    w.replan(budget="100%")
    assert w._last.plain_chain.n == 2


def test_below_either_least_the_error_names_the_lesser():
    x, _ = _data()
    w = te.CheckpointedSequential(_stages(), budget="100%", backend="cpu", profile_passes=1)
    w.prepare(x)
    least = w.min_budget_bytes
    w2 = te.CheckpointedSequential(_stages(), budget=least - 1, backend="cpu", profile_passes=1)
    with pytest.raises(InfeasibleBudgetError) as err:
        w2.prepare(x)
    assert err.value.min_bytes == least


def test_a_given_schedule_gets_the_profiles_own_grouping():
    x, _ = _data()
    seen = []

    def schedule_fn(chain):
        seen.append(chain.n)
        return store_all(chain)
    w = te.CheckpointedSequential(copy.deepcopy(_stages()), schedule_fn=schedule_fn, profile_passes=1)
    w.prepare(x)
    assert seen == [2]
    # also after a plan that ran the other grouping (a review: bench/repros/rv8_rg_schedule_fn_regrouped_chain.py)
    later = te.CheckpointedSequential(_stages(), budget="60%", backend="cpu", profile_passes=1)
    later.prepare(x)
    assert later.chain.n == 8
    later.replan(schedule_fn=schedule_fn)
    assert seen == [2, 2] and later.chain.n == 2
    assert later.min_budget_bytes == w.min_budget_bytes


def test_a_step_in_flight_keeps_its_grouping_through_a_replan():
    x, y = _data()
    plain = te.CheckpointedSequential(_stages(), budget=None)
    w = te.CheckpointedSequential(_stages(), budget="50%", backend="cpu", profile_passes=1)
    w.prepare(x)
    torch.manual_seed(3)
    loss = F.cross_entropy(w(x), y)
    w.replan(budget="100%")  # the merged grouping's plan from here on
    loss.backward()
    torch.manual_seed(3)
    F.cross_entropy(plain(x), y).backward()
    for p, q in zip(plain.parameters(), w.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)
    assert w._last.plain_chain.n == 2


def test_a_smaller_batch_plans_within_its_own_percentage_where_one_grouping_fits_it():
    """The merged grouping below its least fell back to another signature's budget (405529 B) although the other
    grouping fitted the batch's own 118719 B (a review: bench/repros/rv8_rg_percent_ceiling_over_fitting_face.py)."""
    torch.manual_seed(0)
    w = te.CheckpointedSequential(_stages(), budget="75%", backend="cpu", profile_passes=1)
    w.prepare(torch.randn(64, 16))
    x16, y16 = torch.randn(16, 16), torch.randint(0, 5, (16,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # batch 16: the merged grouping's least is 107 %, the other's 71 %
        plan = w.prepare(x16)
    resolved = entry_budget_bytes("75%", w._last)
    assert plan.budget_bytes == resolved and w.chain.n == 8
    reading = measured_step(w, lambda: F.cross_entropy(w(x16), y16).backward())
    assert reading.peak <= resolved


def test_isolated_profiles_take_percentages_of_the_exact_store_all_peak():
    """profile_isolated=True does not measure plain autograd's step: the percentage is of the model's store-all
    peak, the merged grouping's (exact), not the other's over-count (a review: 675072 B against 576768 B;
    bench/repros/rv8_rg_isolated_percent_of_overcount.py)."""
    x, y = _data()
    w = te.CheckpointedSequential(_stages(), budget="70%", backend="cpu", profile_isolated=True)
    plan = w.prepare(x)
    merged = merged_face(w._last)
    assert plan.budget_bytes == (7 * store_all_peak_bytes(merged.plain_chain)) // 10
    reading = measured_step(w, lambda: F.cross_entropy(w(x), y).backward())
    assert reading.peak <= plan.budget_bytes


def test_a_grouping_whose_stages_share_a_parameter_the_merged_one_holds_in_one_is_not_chosen():
    """Kept apart, two dropout-first blocks with a tied weight are two stages reading it: with a gradient hook on it
    and gradients accumulating, such a step is refused, where the merged grouping's runs (a review:
    bench/repros/rv8_rg_tied_param_refused_regrouped.py)."""
    x, y = _data()
    torch.manual_seed(0)
    d1, d2 = _DropoutFirst(), _DropoutFirst()
    d2.a.weight = d1.a.weight
    blocks = [nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(4)]  # their first op saves its input
    w = te.CheckpointedSequential([nn.Linear(16, D), *blocks, d1, d2, nn.Linear(D, 5)], budget="84%", backend="cpu",
                                  profile_passes=1)
    w.prepare(x)
    assert not w._last.unsaved_kept and w._last.regrouped.shared_params
    d1.a.weight.register_hook(lambda g: g * 0.5)
    for _ in range(2):  # the second step accumulates into .grad
        F.cross_entropy(w(x), y).backward()


class _Head(nn.Module):
    def __init__(self, y):
        super().__init__()
        self.lin = nn.Linear(D, 256)
        self.register_buffer("y", y)

    def forward(self, h):
        logits = self.lin(h)
        return F.cross_entropy(logits, self.y), logits


def test_what_a_step_in_flight_learns_reaches_the_face_that_runs_next():
    """caller_keeps="loss" with the caller holding the logits: the backward of a step whose face a replan replaced
    learned it on that face only, and the next step went over its budget (451784 B against 424555 B; a review:
    bench/repros/rv8_rg_learned_holds_lost_in_flight.py)."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 16), torch.randint(0, 256, (64,))
    w = te.CheckpointedSequential(_stages()[:-1] + [_Head(y)], budget="60%", backend="cpu", caller_keeps="loss",
                                  profile_passes=1)
    w.prepare(x)
    loss, logits = w(x)  # held through the backward
    w.replan("100%")
    with pytest.warns(MemoryBudgetWarning, match="caller held"):
        loss.backward()
    del loss, logits
    w.replan("60%")
    kept = []

    def step():
        loss, logits = w(x)
        kept.append(logits)
        loss.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemoryBudgetWarning)
        _, reading = measure_peak(step)
    assert reading.peak <= w.plan.predicted_peak_bytes <= w.plan.budget_bytes
