"""Weights parametrized by ``torch.nn.utils.parametrize`` (weight_norm) trained inside ``parametrize.cached()``, the
way PyTorch documents: the wrapper's steps, captures and backwards run with that cache off
(:func:`torch_exec._util.parametrize_cache_off`). Before, a stage run under no_grad cached a weight without a graph
(its ``original0``/``original1`` got no gradient), and a capture kept the first call's weights as constants for
every later step (bench/repros/rv9_train_parametrize_cached_*.py). Compared with plain autograd bit for bit."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch.nn.utils.parametrize as P  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.utils.parametrizations import weight_norm  # noqa: E402

import torch_exec as te  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning",
                                        "ignore::gpusolve.FallbackWarning", "ignore::UserWarning")

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = weight_norm(nn.Linear(D, 2 * D)), nn.Linear(2 * D, D)

    def forward(self, h):
        return h + self.b(torch.tanh(self.a(h)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.Sequential(*[Block() for _ in range(6)])
        self.head = nn.Linear(D, 4)

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.head(self.blocks(x)), y)


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, D, generator=g), torch.randint(0, 4, (16,), generator=g)


def wrapped_models():
    """(name, plain model, wrapper, the wrapper's model) for each route, each wrapper at its least budget."""
    out = []
    for route in ("sequential", "export", "blocks"):
        ref = Net()
        model = copy.deepcopy(ref)
        if route == "sequential":
            seq = te.CheckpointedSequential(model.blocks, budget="100%", backend="cpu")
            seq.prepare(batch(0)[0])
            seq.replan(seq.min_budget_bytes)
            model.blocks = seq
            wrapper = model
        else:
            wrapper = te.auto_checkpoint(model, "100%", backend="cpu", capture=route)
        out.append((route, ref, wrapper, model))
    return out


@pytest.mark.parametrize("first_cached", [True, False], ids=["first_call_cached", "first_call_plain"])
def test_steps_inside_parametrize_cached_match_plain_autograd(first_cached):
    for route, ref, wrapper, model in wrapped_models():
        for step in range(3):
            x, y = batch(step + 1)
            cached = step > 0 or first_cached
            with P.cached() if cached else torch.enable_grad():  # the backward inside too: recomputations
                loss = wrapper(x, y)
                if route != "sequential" and step == 0:  # the capture's first call: the least budget from now on
                    wrapper.replan(wrapper.min_budget_bytes)
                    loss = wrapper(x, y)
                loss.backward()
            with P.cached() if cached else torch.enable_grad():
                want = ref(x, y)
                want.backward()
            torch.testing.assert_close(loss, want, rtol=0, atol=0, msg=f"{route} step {step}")
            for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
                assert p.grad is not None, (route, step, name)
                torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=f"{route} step {step} {name}")
            for m in (model, ref):
                with torch.no_grad():
                    for p in m.parameters():
                        p -= 0.05 * p.grad
                        p.grad = None
        plan = wrapper.plan if route != "sequential" else model.blocks.plan
        assert any(op.kind.name == "FWD_NOGRAD" for op in plan.schedule), route  # stages recomputed
