"""Note [Outputs without a gradient] (torch_exec/executor.py): a model returning (loss, logits) whose caller
back-propagates the loss only. The engine no longer materialises a zero gradient of the logits, the plan
after the first backward reserves the gradients of the outputs that got one, and a later gradient for an
output the plan counted without one is warned about and counted. Note [The caller holds a_N]: a caller
that drops the logits before the end of the backward gets a plan that no longer reserves them, and one that
holds them again is warned about and counted. Peaks are the CPU allocator's."""
from __future__ import annotations

import copy
import json
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402
from torch_exec.report import MemoryBudgetWarning  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

BATCH, WIDTH, VOCAB = 64, 256, 500
LOGITS = BATCH * VOCAB * 4  # float32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return torch.tanh(self.lin(x)) + x


class LossAndLogits(nn.Module):
    """The head and the loss in one stage, returning both (as transformers' models do)."""

    def __init__(self, targets):
        super().__init__()
        self.head = nn.Linear(WIDTH, VOCAB)
        self.targets = targets

    def forward(self, x):
        logits = self.head(x)
        return nn.functional.cross_entropy(logits, self.targets), logits


def model():
    torch.manual_seed(0)
    targets = torch.randint(0, VOCAB, (BATCH,))
    return nn.Sequential(*[Block() for _ in range(8)], LossAndLogits(targets))


def wrapped_between(fraction: float):
    """A wrapper whose budget is ``fraction`` of the way from its least budget to plain autograd's peak."""
    net = model()
    probe = te.CheckpointedSequential(net, budget="1GiB", backend="cpu")
    x = torch.randn(BATCH, WIDTH)
    probe.prepare(x)
    lo, hi = probe.min_budget_bytes, plain_peak_bytes(probe._last)
    budget = int(lo + fraction * (hi - lo))
    wrapped = te.CheckpointedSequential(net, budget=budget, backend="cpu")
    wrapped.prepare(x, profile=probe._last.profile)
    for p in wrapped.parameters():
        p.grad = torch.zeros_like(p)
    return wrapped, x, budget


def loss_only(wrapped, x):
    out = wrapped(x)
    out[0].backward()
    del out  # held through the backward, as the usual loop does


@pytest.mark.parametrize("fraction", [0.0, 0.4])
def test_the_logits_get_no_zero_gradient_and_the_next_plan_drops_it(fraction):
    wrapped, x, budget = wrapped_between(fraction)
    first = wrapped.plan
    reserved = wrapped._last.exec_chain.reserved_bytes
    _, reading = measure_peak(loss_only, wrapped, x)
    assert reading.peak <= budget
    # the first plan reserves the logits' gradient; none is made (before: a zero gradient, measured at
    # the prediction, 1.000 x)
    assert reading.peak <= first.predicted_peak_bytes - 0.9 * LOGITS, (reading.peak, first.predicted_peak_bytes)
    _, reading = measure_peak(loss_only, wrapped, x)
    entry = wrapped._last
    assert entry.out_grads == frozenset({0}) and entry.exec_chain.reserved_bytes == reserved - LOGITS
    assert any("Note [Outputs without a gradient]" in n for n in wrapped.plan.notes)
    assert wrapped.plan is not first and wrapped.plan.predicted_time_ms <= first.predicted_time_ms
    assert reading.peak <= budget
    assert reading.peak >= 0.95 * wrapped.plan.predicted_peak_bytes, (reading.peak, wrapped.plan.predicted_peak_bytes)


def test_the_least_budget_falls_by_the_logits_gradient():
    wrapped, x, _ = wrapped_between(0.0)
    before = wrapped.min_budget_bytes
    loss_only(wrapped, x)
    loss_only(wrapped, x)
    assert wrapped.min_budget_bytes <= before - LOGITS


def test_gradients_equal_plain_autograds_and_a_later_logits_gradient_is_counted():
    """loss-only steps, then a step whose loss also reads the returned logits: that step warns (the plan
    counted no gradient for them) and the next plan reserves it again; gradients are plain autograd's in
    every step."""
    wrapped, x, budget = wrapped_between(0.1)  # tight: a plan that recomputes after the re-plan too (a
    reference = nn.Sequential(*copy.deepcopy(list(wrapped.stages)))  # store-all plan runs as plain autograd)
    full = wrapped._last.exec_chain.reserved_bytes

    def compare(both: bool):
        for p in list(wrapped.parameters()) + list(reference.parameters()):
            p.grad = None
        outs = []
        for net in (wrapped, reference):
            loss, logits = net(x)
            (loss + logits.square().mean() if both else loss).backward()
            outs.append(loss.detach())
        torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
        for (key, p), q in zip(wrapped.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7, msg=key)

    compare(both=False)
    compare(both=False)
    assert wrapped._last.exec_chain.reserved_bytes == full - LOGITS and not wrapped._last.plain
    with pytest.warns(MemoryBudgetWarning, match=r"output\(s\) \[1\] .* up to 128000 B"):
        compare(both=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemoryBudgetWarning)
        compare(both=True)  # counted now: no warning, the reserve is whole again
        compare(both=False)  # and it stays whole
    assert wrapped._last.out_grads == frozenset({0, 1}) and wrapped._last.exec_chain.reserved_bytes == full


def test_no_replan_when_every_output_gets_a_gradient():
    wrapped, x, _ = wrapped_between(0.3)
    first = wrapped.plan
    for _ in range(2):
        loss, logits = wrapped(x)
        (loss + logits.mean()).backward()
    assert wrapped.plan is first and wrapped._last.out_grads == frozenset({0, 1})


def drop_logits(wrapped, x):
    loss, logits = wrapped(x)
    del logits  # the caller keeps the loss only (transformers' Trainer, Lightning's training_step)
    loss.backward()


def test_a_dropped_output_is_not_reserved_from_the_next_step_on():
    wrapped, x, _ = wrapped_between(0.0)
    entry = wrapped._last
    reserved, least = entry.exec_chain.reserved_bytes, wrapped.min_budget_bytes
    first = wrapped.plan
    drop_logits(wrapped, x)
    assert entry.out_dropped == frozenset({1}) and entry.out_storage_nbytes == [4, LOGITS]  # (loss, logits)
    assert wrapped.plan is first  # learned in the backward, re-planned at the next step
    _, reading = measure_peak(drop_logits, wrapped, x)
    # neither the logits nor their gradient is reserved now: the least budget falls by both
    assert entry.exec_chain.reserved_bytes == reserved - 2 * LOGITS
    assert wrapped.min_budget_bytes <= least - 2 * LOGITS
    assert any("Note [The caller holds a_N]" in n for n in wrapped.plan.notes)
    assert wrapped.plan.predicted_time_ms < first.predicted_time_ms  # the room buys recomputations back
    assert reading.peak <= wrapped.plan.budget_bytes
    assert reading.peak >= 0.95 * wrapped.plan.predicted_peak_bytes, (reading.peak, wrapped.plan.predicted_peak_bytes)
    # at the new least budget too
    wrapped.replan(budget=wrapped.min_budget_bytes)
    drop_logits(wrapped, x)
    _, reading = measure_peak(drop_logits, wrapped, x)
    assert reading.peak <= wrapped.plan.budget_bytes, (reading.peak, wrapped.plan.budget_bytes)


def test_holding_the_output_again_is_warned_about_and_counted():
    wrapped, x, budget = wrapped_between(0.1)
    reference = nn.Sequential(*copy.deepcopy(list(wrapped.stages)))
    full = wrapped._last.exec_chain.reserved_bytes

    def compare(hold: bool):
        for p in list(wrapped.parameters()) + list(reference.parameters()):
            p.grad = None
        for net in (wrapped, reference):
            loss, logits = net(x)
            kept = logits.detach()[:1] if hold else None  # a view of the logits keeps their storage
            del logits
            loss.backward()
            del kept
        for (key, p), q in zip(wrapped.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7, msg=key)

    compare(hold=False)
    compare(hold=False)
    assert wrapped._last.exec_chain.reserved_bytes == full - 2 * LOGITS
    with pytest.warns(MemoryBudgetWarning, match=r"held storage\(s\) \[1\] .* up to 128000 B"):
        compare(hold=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemoryBudgetWarning)
        compare(hold=True)  # counted again: no warning
        compare(hold=False)  # and it stays counted
    entry = wrapped._last
    assert entry.out_dropped == frozenset() and entry.exec_chain.reserved_bytes == full - LOGITS  # the gradient only


def test_a_kept_graph_learns_no_drop():
    wrapped, x, _ = wrapped_between(0.3)
    loss, logits = wrapped(x)
    del logits
    loss.backward(retain_graph=True)  # the executor keeps a_N for the next backward: nothing is learned
    assert wrapped._last.out_dropped is None
    loss.backward()
    assert wrapped._last.out_dropped == frozenset({1})


@pytest.mark.parametrize("drop", [False, True])
def test_the_benchmark_runs(tmp_path, drop):
    """bench/output_grads.py end to end on the example transformer (the caller holding its outputs, or
    dropping them: --drop-outputs)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import output_grads
    assert output_grads.main(["--models", "transformer", "--out", str(tmp_path / "og")]
                             + ["--drop-outputs"] * drop) == 0
    rows = json.loads((tmp_path / "og.json").read_text())["rows"]
    assert len(rows) == 3 and all(r["learned_fits"] and r["every_fits"] for r in rows)
    assert all(r["least_learned"] < r["least_every"] for r in rows)
    assert all((r["output_reserve_learned"] < r["output_reserve_every"]) == drop for r in rows)
    assert "Every measured peak within its budget: yes." in (tmp_path / "og.md").read_text()
