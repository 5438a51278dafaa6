"""Note [A step keeps its plan] (torch_exec/executor.py): a plan changed between a step's forward and its backward,
by replan() or by the wrapper's own re-plan at a later forward, applies from the next forward on; the pending
step's backward runs the plan its forward ran. Before (a review, 2026-11-27): most parameters got no gradient,
silently, or the backward raised internal errors (KeyError, "a_5 is not held")."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import torch_exec as te  # noqa: E402


def _grads_equal(model, ref):
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert p.grad is not None
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("first,second", [("least", "100%"), ("least", "70%"), ("85%", "least")])
def test_replan_between_a_forward_and_its_backward(first, second):
    torch.manual_seed(0)
    seq = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(64, 64), nn.Tanh())], nn.Linear(64, 10))
    ref = copy.deepcopy(seq)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    F.cross_entropy(ref(x), y).backward()
    w = te.CheckpointedSequential(seq, budget="100%", backend="cpu", profile_passes=1, profile_warmup=0)
    w.prepare(x)
    budget = {"least": w.min_budget_bytes}
    w.replan(budget.get(first, first))
    out = w(x)
    w.replan(budget.get(second, second))
    F.cross_entropy(out, y).backward()
    _grads_equal(w, ref)


class _LossAndLogits(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.Linear(64, 512)

    def forward(self, h):
        logits = self.h(h)
        return logits.square().mean(), logits  # the caller back-propagates the loss only


@pytest.mark.parametrize("offload", [None, "1e6GB/s"])
def test_a_pending_step_keeps_its_plan_when_the_wrapper_replans(offload):
    # f1, f2, b1 (learns that only the loss gets a gradient: re-plan due), f3 (re-plans), b2
    def net():
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(8)], _LossAndLogits())
    ref, model = net(), net()
    torch.manual_seed(1)
    xs = [torch.randn(64, 64) for _ in range(3)]
    w = te.CheckpointedSequential(model, budget="1GiB", backend="cpu", offload=offload, profile_passes=1,
                                  profile_warmup=0)
    w.prepare(xs[0])
    w.replan(w.min_budget_bytes)
    before = list(w._last.program)
    o1, o2 = w(xs[0]), w(xs[1])
    o1[0].backward()
    model.zero_grad(set_to_none=True)
    o3 = w(xs[2])
    assert w._last.program != before  # the entry was re-planned with step 2 pending
    o2[0].backward()
    ref(xs[1])[0].backward()
    _grads_equal(model, ref)
    del o3


class _Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.bilinear = nn.Bilinear(64, 64, 1)

    def forward(self, a, b):
        return self.bilinear(a, b).square().mean()


def test_a_join_replanned_between_a_forward_and_its_backward():
    torch.manual_seed(0)
    towers = [nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(64, 64), nn.Tanh())]) for _ in range(2)]
    head = _Head()
    ref_towers, ref_head = copy.deepcopy(towers), copy.deepcopy(head)
    x1, x2 = torch.randn(64, 64), torch.randn(64, 64)
    ref_head(ref_towers[0](x1), ref_towers[1](x2)).backward()
    w = te.CheckpointedJoin(towers, head, budget="100%", backend="cpu")
    w.prepare(x1, x2)
    least = w.min_budget_bytes
    for first, second in ((least, "100%"), ("100%", least)):
        w.replan(first)
        w.zero_grad()
        out = w(x1, x2)
        w.replan(second)
        out.backward()
        for p, q in zip([*towers[0].parameters(), *towers[1].parameters(), *head.parameters()],
                        [*ref_towers[0].parameters(), *ref_towers[1].parameters(), *ref_head.parameters()], strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)
