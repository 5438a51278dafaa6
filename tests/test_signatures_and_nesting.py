"""Note [A failed plan keeps its profile] (torch_exec/executor.py): a signature whose budget is below its least
keeps the profile made for it; min_budget_bytes names its least, replan reaches it, and no call profiles it
again (chains and joins). Note [A wrapper inside another's step] (torch_exec/profiler.py): a wrapper used as
a stage of another runs plainly in its steps."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve import InfeasibleBudgetError  # noqa: E402
from _torch_helpers import DT  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

OPTS = dict(profile_passes=1, profile_warmup=0, backend="cpu")
D = 16


def mlp(seed=0, depth=5):
    torch.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(D, D), nn.Tanh())], nn.Linear(D, 3)).to(DT)


def step(model, x):
    x = x.detach().clone().requires_grad_()
    model.zero_grad()
    model(x).square().mean().backward()
    return x.grad


def test_prepare_that_fails_keeps_the_profile_and_names_its_least(profiles):
    seq = mlp()
    ref = copy.deepcopy(seq)
    small, big = (torch.randn(n, D, dtype=DT, requires_grad=True) for n in (2, 64))
    w = te.CheckpointedSequential(seq, budget="100%", **OPTS)
    w.prepare(small)
    w.replan(w.min_budget_bytes)
    small_least = w.min_budget_bytes
    with pytest.raises(InfeasibleBudgetError) as err:
        w.prepare(big)
    assert profiles[0] == 2
    assert err.value.min_bytes > small_least
    assert w.min_budget_bytes == err.value.min_bytes  # the failed signature is the latest
    assert len(w.plans) == 1 and w.plan is None  # planned signatures only; the latest has no plan
    with pytest.raises(InfeasibleBudgetError):  # its next call plans again, and still does not fit
        step(w, big)
    assert profiles[0] == 2
    w.replan(err.value.min_bytes)  # reaches the failed signature, from its kept profile
    assert len(w.plans) == 2
    got = step(w, big)
    assert profiles[0] == 2
    torch.testing.assert_close(got, step(ref, big), rtol=0, atol=0)
    for p, q in zip(w.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


def test_replan_below_a_failed_signature_keeps_the_others(profiles):
    """A budget the signatures that ran fit is not refused for one that never ran: it stays without a plan."""
    w = te.CheckpointedSequential(mlp(), budget="100%", **OPTS)
    small, big = (torch.randn(n, D, dtype=DT, requires_grad=True) for n in (2, 64))
    w.prepare(small)
    least = w.min_budget_bytes
    w.replan(least)
    with pytest.raises(InfeasibleBudgetError):
        w.prepare(big)
    w.replan(least)  # does not raise: the small signature fits
    assert len(w.plans) == 1
    step(w, small)
    with pytest.raises(InfeasibleBudgetError):
        step(w, big)
    assert profiles[0] == 2


def test_a_join_that_fails_keeps_its_profile(profiles):
    torch.manual_seed(0)
    towers = [[nn.Linear(D, D).to(DT), nn.Tanh(), nn.Linear(D, D).to(DT), nn.Tanh(), nn.Linear(D, D).to(DT)]
              for _ in range(2)]

    def head(a, b):
        return (a * b).mean()
    join = te.CheckpointedJoin(towers, head, budget=1, **OPTS)
    xs = [torch.randn(32, D, dtype=DT) for _ in range(2)]
    with pytest.raises(InfeasibleBudgetError) as err:
        join.prepare(*xs)
    taken = profiles[0]
    assert taken >= 2  # a profile per branch
    assert join.min_budget_bytes == err.value.min_bytes
    join.replan(err.value.min_bytes)
    join(*xs).backward()
    assert profiles[0] == taken and join.plan.budget_bytes == err.value.min_bytes


# ---------------------------------------------------------------------------- Note [A wrapper inside another's step]
def blocks(n, seed):
    torch.manual_seed(seed)
    return [m for _ in range(n) for m in (nn.Linear(D, D).to(DT), nn.Tanh())]


@pytest.mark.parametrize("inner_kind", ["sequential", "auto"])
def test_a_wrapper_inside_another_runs_plainly_in_its_steps(inner_kind):
    """The outer profiles the inner as a plain stage and owns the step: the inner never profiles nor plans
    (before, its first call with grad came in the outer's backward and left a profiler running when the
    outer's step was measured: every later CPU meter raised ProfilerBusyError)."""
    from torch_exec.meter import profiler_recording
    first, mid, last = nn.Sequential(*blocks(1, 0)), nn.Sequential(*blocks(3, 1)), nn.Sequential(*blocks(1, 2))
    ref = copy.deepcopy(nn.Sequential(first, mid, last))
    inner = (te.CheckpointedSequential(mid, budget="100%", **OPTS) if inner_kind == "sequential" else
             te.auto_checkpoint(mid, budget="100%", backend="cpu", profile_passes=1, profile_warmup=0))
    outer = te.CheckpointedSequential(nn.Sequential(first, inner, last), budget="100%", **OPTS)
    x = torch.randn(8, D, dtype=DT, requires_grad=True)
    outer.prepare(x)
    outer.replan(outer.min_budget_bytes)  # recomputes: the inner stage runs in the outer's backward too
    outer.measure_memory(2)
    for _ in range(2):
        got = step(outer, x)
    want = step(ref, x)
    assert not profiler_recording() or len(outer.memory_report()) == 2
    assert len(outer.memory_report()) == 2 and all(r.within_budget for r in outer.memory_report())
    if inner_kind == "sequential":
        assert inner.plan is None and not inner.plans  # never planned: the outer's stage
    else:
        assert inner.executor is None  # never captured
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for p, q in zip(outer.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    fresh = te.CheckpointedSequential(nn.Sequential(*blocks(2, 3)), budget="100%", **OPTS)
    fresh.prepare(x)  # no profiler left running on the thread


def test_a_wrapper_inside_an_auto_checkpointed_model_runs_plainly_while_it_is_captured():
    # the diff review: the probe and the block checks ran the inner wrapper's own step (it profiled itself under
    # the outer's meter): a false "differentiates itself" diagnosis, then ProfilerBusyError
    import torch.nn.functional as F  # noqa: N812

    class Blk(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(D, D).to(DT)

        def forward(self, h):
            return torch.tanh(self.a(h)) + h

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.blocks = nn.ModuleList(Blk() for _ in range(4))
            self.head = te.CheckpointedSequential(nn.Sequential(*blocks(2, 5), nn.Linear(D, 3).to(DT)),
                                                  budget="100%", **OPTS)

        def forward(self, x):
            h = x
            for b in self.blocks:
                if h.abs().max().item() < 1e6:  # data-dependent control flow: the block fallback
                    h = b(h)
            return self.head(h)

    model = Net()
    ref = copy.deepcopy(model)
    x, y = torch.randn(8, D, dtype=DT), torch.randint(0, 3, (8,))
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu", profile_passes=1)
    F.cross_entropy(wrapped(x), y).backward()
    F.cross_entropy(ref(x), y).backward()
    assert wrapped.capture.method == "blocks"
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
