"""The step meter on two loops a review found misread (torch_exec/report.py): several calls of the wrapper before
one backward (Note [Calls before one backward]) and a step that takes its parameter gradients with
``torch.autograd.grad`` (Note [Gradients set during the step])."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_exec as te
from torch_exec.report import MemoryBudgetWarning

D = 32


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.n = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), nn.LayerNorm(D)

    def forward(self, h):
        return h + self.b(torch.relu(self.a(self.n(h))))


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.head = nn.Linear(16, D), nn.Linear(D, 5)
        self.blocks = nn.ModuleList(_Block() for _ in range(6))

    def forward(self, x, y):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return F.cross_entropy(self.head(h), y)


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)


@pytest.mark.parametrize("route", ["auto", "sequential"])
def test_two_calls_before_one_backward_are_one_measured_step(route):
    (x1, y1), (x2, y2) = _data(0), _data(1)
    if route == "auto":
        w = te.auto_checkpoint(_Net(), "50%", backend="cpu", profile_passes=1)
        w.prepare(x1, y1)
        call = w
    else:
        net = _Net()
        w = te.CheckpointedSequential([net.inp, *net.blocks], budget="50%", backend="cpu", profile_passes=1)
        w.prepare(x1)

        def call(x, y):
            return F.cross_entropy(net.head(w(x)), y)
    w.measure_memory(1)
    call(x1, y1).backward()
    one = w.memory_report()[-1]
    assert one.calls == 1
    w.measure_memory(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (call(x1, y1) + call(x2, y2)).backward()
        records = w.memory_report()
    assert len(records) == 2, records  # before: the second call dropped the first one's measurement, silently
    both = records[-1]
    assert both.calls == 2
    assert both.beyond_param_grads > one.beyond_param_grads  # the first call's checkpoints held through the second
    said = [str(c.message) for c in caught if isinstance(c.message, MemoryBudgetWarning)]
    assert both.within_budget or any("2 calls of the model before one backward" in m for m in said), said
    assert "(2 calls before one backward)" in str(records)


def test_parameter_gradients_autograd_grad_returns_are_not_the_steps_bytes():
    x, y = _data(0)
    model = _Net()
    w = te.auto_checkpoint(model, "40%", backend="cpu", profile_passes=1)
    w.prepare(x, y)
    w.measure_memory(1)
    w(x, y).backward()
    by_backward = w.memory_report()[-1]
    params = list(model.parameters())
    for p in params:
        p.grad = None
    w.measure_memory(1)
    grads = torch.autograd.grad(w(x, y), params)
    by_grad = w.memory_report()[-1]
    assert all(p.grad is None for p in params) and len(grads) == len(params)
    # before: 516 380 B against a 191 388 B budget on a model like this one, the returned gradients counted
    assert by_grad.beyond_param_grads == by_backward.beyond_param_grads, (by_grad, by_backward)
    assert by_grad.param_grad_bytes_allocated == sum(g.numel() * g.element_size() for g in grads)
    assert by_grad.within_budget


@pytest.mark.parametrize("hook", ["clamp", "post_accumulate"])
def test_a_second_call_before_the_backward_is_refused_where_parameters_have_hooks(hook):
    # Note [Hooks across calls before one backward] in torch_exec/executor.py: each call's schedule runs its own
    # backward, so the hooks ran once per call (bench/repros/rv7_diff_two_calls_grad_hook.py)
    (x1, y1), (x2, y2) = _data(0), _data(1)
    model = _Net()
    w = te.auto_checkpoint(model, "40%", backend="cpu", profile_passes=1)
    w.prepare(x1, y1)
    assert not w.executor._last.plain
    first = w(x1, y1)
    (first + w(x2, y2)).backward()  # no hooks: two calls before one backward run
    for p in model.parameters():
        p.grad = None
    calls = []
    for p in model.parameters():
        if hook == "clamp":
            p.register_hook(lambda g: g.clamp(-1e-3, 1e-3))
        else:
            p.register_post_accumulate_grad_hook(lambda p: calls.append(p))
    w(x1, y1)  # a forward whose graph is dropped: its step is no longer in flight
    first = w(x1, y1)
    with pytest.raises(RuntimeError, match="called again before the backward of its previous call.*Back-propagate "
                                           "each call's loss before the next call"):
        w(x2, y2)
    assert all(p.grad is None for p in model.parameters())
    first.backward()  # the remedy: each call's backward before the next call
    w(x2, y2).backward()
    assert all(p.grad is not None for p in model.parameters())
