"""Note [Generators of the model's own] (torch_exec/_util.py): stages that draw from a torch.Generator of the
model's own (a module attribute, or one a plain callable closes over) are replayed with it when recomputed,
as they are with torch's default generator; preparing leaves it as it was."""
from __future__ import annotations

import pytest
torch = pytest.importorskip("torch")  # the suite runs without torch: these tests skip
import torch.nn.functional as F
from torch import nn

import torch_exec as te

D = 32


class _Noisy(nn.Module):
    def __init__(self, gen, held="attribute"):
        super().__init__()
        self.l = nn.Linear(D, D)
        self.held = held
        # an attribute, or in a list or dict attribute (a review found those unseen: rv7_rev_generator_in_container)
        self.gen = {"attribute": gen, "list": [gen], "dict": {"noise": gen}}[held]

    def forward(self, h):
        gen = (self.gen if self.held == "attribute" else self.gen[0] if self.held == "list"
               else self.gen["noise"])
        return torch.tanh(self.l(h + 0.5 * torch.randn(h.shape, generator=gen)))


def _stages(gen, held="attribute"):
    torch.manual_seed(0)
    closure_gen = torch.Generator().manual_seed(7)
    return [nn.Linear(16, D), _Noisy(gen, held), _Noisy(gen, held),
            lambda h: h * torch.rand(h.shape, generator=closure_gen), _Noisy(gen, held), nn.Linear(D, 5)], closure_gen


def _step(fns, x, y):
    h = x
    for fn in fns:
        h = fn(h)
    return F.cross_entropy(h, y)


@pytest.mark.parametrize("wrapper,held", [("sequential", "attribute"), ("auto", "attribute"),
                                          ("sequential", "list"), ("sequential", "dict")])
def test_a_recomputed_stage_draws_what_its_forward_drew(wrapper, held):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(512, 16, generator=g), torch.randint(0, 5, (512,), generator=g)
    gen = torch.Generator().manual_seed(3)
    fns, closure_gen = _stages(gen, held)
    if wrapper == "sequential":
        modules = nn.ModuleList([f for f in fns if isinstance(f, nn.Module)])
        w = te.CheckpointedSequential(fns, budget="100%", backend="cpu", profile_passes=1, modules=[modules])
        params, run = list(modules.parameters()), lambda: F.cross_entropy(w(x), y)
        ref_fns = fns
    else:
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.ModuleList([f for f in fns if isinstance(f, nn.Module)])

            def forward(self, x, y):
                h = x
                for m in self.body:
                    h = m(h)
                return F.cross_entropy(h, y)
        model = Net()
        w = te.auto_checkpoint(model, "100%", backend="cpu", profile_passes=1)
        params, run = list(model.parameters()), lambda: w(x, y)
        ref_fns = list(model.body)
    before = (gen.get_state().clone(), closure_gen.get_state().clone())
    w.prepare(*((x,) if wrapper == "sequential" else (x, y)))
    assert torch.equal(gen.get_state(), before[0]) and torch.equal(closure_gen.get_state(), before[1])
    executor = w if wrapper == "sequential" else w.executor
    executor.replan(executor.min_budget_bytes)
    for p in params:
        p.grad = None
    run().backward()
    assert sum(executor._last.recomputed) > 0
    after = (gen.get_state().clone(), closure_gen.get_state().clone())
    grads = [p.grad.clone() for p in params]
    # plain autograd from the same generator states, on the same parameters
    gen.set_state(before[0])
    closure_gen.set_state(before[1])
    for p in params:
        p.grad = None
    _step(ref_fns, x, y).backward()
    for g1, p in zip(grads, params):
        torch.testing.assert_close(g1, p.grad, rtol=0, atol=0)
    assert torch.equal(gen.get_state(), after[0]) and torch.equal(closure_gen.get_state(), after[1])
