"""A recomputation runs in the mode its forward ran in (Note [Recomputing in the forward's mode] in
torch_exec/executor.py): a step whose modules change training mode between its forward and its backward gets
plain autograd's gradients, bit for bit, with and without offloading, through a CheckpointedSequential and
auto_checkpoint's blocks (bench/repros/rv10_offload_mode_switch_before_backward.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")


def make():
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(inplace=True), nn.Dropout(0.2)]
    return nn.Sequential(*layers, nn.Linear(32, 4))


def loss_of(y):
    return (y * torch.linspace(-1, 1, y.numel()).view_as(y)).square().sum()


def eval_backward(net, model, x, xv):  # the backward after model.eval()
    torch.manual_seed(1)
    loss = loss_of(net(x))
    model.eval()
    loss.backward()
    model.train()


def eval_forward_train_backward(net, model, x, xv):  # an eval-mode forward back-propagated in train mode
    model.eval()
    torch.manual_seed(1)
    loss = loss_of(net(xv))
    model.train()
    loss.backward()


def two_modes_one_backward(net, model, x, xv):  # a train-mode and an eval-mode call, one backward
    torch.manual_seed(1)
    first = loss_of(net(x))
    model.eval()
    second = loss_of(net(xv))
    model.train()
    (first + second).backward()


X, XV = torch.randn(32, 32, generator=torch.Generator().manual_seed(5)), torch.randn(32, 32)


@pytest.mark.parametrize("case", [eval_backward, eval_forward_train_backward, two_modes_one_backward])
@pytest.mark.parametrize("route", ["sequential", "offload", "auto_blocks"])
def test_a_mode_change_before_the_backward_keeps_the_forwards_mode(case, route):
    ref, model = make(), make()
    if route == "auto_blocks":
        net = te.auto_checkpoint(model, budget="70%", capture="blocks", backend="cpu")
    else:
        net = te.CheckpointedSequential(model, budget="70%", offload="inf" if route == "offload" else None,
                                        backend="cpu")
    for run, m in ((ref, ref), (net, model)):  # one ordinary training step first
        torch.manual_seed(0)
        loss_of(run(X)).backward()
        m.zero_grad()
    for run, m in ((ref, ref), (net, model)):
        case(run, m, X, XV)
    assert model.training and all(m.training for m in model.modules())
    plan = net._last.plan if route != "auto_blocks" else None
    assert plan is None or any(r for r in net._last.recomputed), "the plan must recompute a stage"
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)
    for b, c in zip(model.buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=0, atol=0)
