"""What a training loop changes in a wrapped model between (or inside) steps, against plain autograd: a stage replaced
(transfer learning), a dropout switched on, a full backward hook removed, a Python counter the forward writes, a
parameter written between the forward and the backward, an EMA buffer written by the model's code after its blocks,
and stages that pass a dict between them (review rv20, bench/repros/rv20*.py)."""
from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from _torch_helpers import assert_grads_close  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

D = 16


def _net(seed=0, depth=6, p=0.0):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(D, D), nn.Tanh()]
    layers += [nn.Dropout(p), nn.Linear(D, 4)]
    return nn.Sequential(*layers)


def _x(seed=1):
    return torch.randn(64, D, generator=torch.Generator().manual_seed(seed))


def _step(model, x, seed=5):
    torch.manual_seed(seed)
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss.detach()


def test_a_stage_replaced_after_wrapping_runs_and_trains():
    """Note [Stages replaced after wrapping]: the old layer ran, the new one got no gradient."""
    ref = _net()
    seq = copy.deepcopy(ref)
    wrapped = te.CheckpointedSequential(seq, budget="85%", backend="cpu", profile_passes=1)
    _step(wrapped, _x())
    seq[-1] = nn.Linear(D, 5)
    ref[-1] = copy.deepcopy(seq[-1])
    for m in (seq, ref):
        m.zero_grad(set_to_none=True)
    assert wrapped(_x(2)).shape == (64, 5)
    assert torch.equal(_step(wrapped, _x(2)), _step(ref, _x(2)))
    assert seq[-1].weight.grad is not None
    assert_grads_close(ref, seq)


def test_a_join_branch_stage_replaced_after_wrapping():
    towers = [_net(1), _net(2)]
    ref = copy.deepcopy(towers)

    def head(a, b):
        return (a - b).pow(2).mean()
    join = te.CheckpointedJoin(towers, head, budget="85%", backend="cpu", profile_passes=1)
    join(_x(1), _x(2)).backward()
    towers[0][-1] = nn.Linear(D, 4)
    ref[0][-1] = copy.deepcopy(towers[0][-1])
    for m in towers + ref:
        m.zero_grad(set_to_none=True)
    got = join(_x(3), _x(4))
    got.backward()
    want = head(ref[0](_x(3)), ref[1](_x(4)))
    want.backward()
    assert torch.equal(got, want)
    assert torch.equal(towers[0][-1].weight.grad, ref[0][-1].weight.grad)


def test_a_dropout_switched_on_after_the_first_step_is_replayed():
    """module_state_key keys the stages' scalar attributes: the profile's "draws nothing" was kept (2.2e-3 off)."""
    ref = _net()
    seq = copy.deepcopy(ref)
    wrapped = te.CheckpointedSequential(seq, budget="85%", backend="cpu", profile_passes=1)
    _step(wrapped, _x())
    _step(ref, _x())
    for m in (seq[-2], ref[-2]):
        m.p = 0.3
    for m in (seq, ref):
        m.zero_grad(set_to_none=True)
    assert torch.equal(_step(wrapped, _x(2)), _step(ref, _x(2)))
    assert_grads_close(ref, seq)
    assert len(wrapped._entries) == 2  # profiled again


def test_a_removed_full_backward_hook_keeps_the_signature():
    """torch leaves ``_is_full_backward_hook`` set when the hook is removed: the key leaves it out and keys the
    hooks themselves."""
    import torch_exec._util as U
    model = _net()
    before = U.captured_state_key(model)
    handle = model[0].register_full_backward_hook(lambda *a: None)
    assert U.captured_state_key(model) != before
    handle.remove()
    assert U.captured_state_key(model) == before


class _Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)
        self.calls = 0
        self.warned = False

    def forward(self, x):
        self.warned = True  # the first call only: not refused
        self.calls += 1
        return torch.tanh(self.lin(x)) * (1 + 0.1 * self.calls)


def test_a_counter_the_forward_writes_is_refused_and_put_back():
    """Note [Attributes a forward writes]: every profiling pass and recomputation ran it again (losses 275428
    against 4.80), silently."""
    torch.manual_seed(0)
    stages = [_Counting() for _ in range(4)]
    wrapped = te.CheckpointedSequential(stages, budget="85%", backend="cpu", profile_passes=1)
    with pytest.raises(te.AttributeWriteError, match=r"stage 1's forward writes _Counting.calls at every call"):
        wrapped(_x()).sum().backward()
    assert [s.calls for s in stages] == [0] * 4 and not any(s.warned for s in stages)


def test_a_first_call_flag_is_not_refused():
    class Flag(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(D, D)
            self.seen = False

        def forward(self, x):
            self.seen = True
            return torch.tanh(self.lin(x))
    torch.manual_seed(0)
    stages = [Flag() for _ in range(4)]
    ref = copy.deepcopy(stages)
    wrapped = te.CheckpointedSequential(stages, budget="85%", backend="cpu", profile_passes=1)
    wrapped(_x()).sum().backward()
    y = _x()
    for s in ref:
        y = s(y)
    y.sum().backward()
    for a, b in zip(stages, ref):
        assert torch.allclose(a.lin.weight.grad, b.lin.weight.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["sequential", "join"])
def test_a_parameter_written_before_the_backward_raises_as_plain_autograd(kind):
    """Note [Parameters written before the backward]: the recomputations read the new weight, silently."""
    if kind == "sequential":
        seq = _net()
        model = te.CheckpointedSequential(seq, budget="85%", backend="cpu", profile_passes=1)
        weight = seq[2].weight

        def loss():
            return model(_x()).pow(2).mean()
    else:
        towers = [_net(1), _net(2)]
        model = te.CheckpointedJoin(towers, lambda a, b: (a - b).pow(2).mean(), budget="85%", backend="cpu",
                                    profile_passes=1)
        weight = towers[0][2].weight

        def loss():
            return model(_x(1), _x(2))
    loss().backward()  # planned
    step = loss()
    with torch.no_grad():
        weight.mul_(0.9)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*written in place after the forward"):
        step.backward()
    loss().backward()  # the next step trains


def test_stages_passing_a_dict_are_refused():
    class Stage(nn.Module):
        def __init__(self, first=False):
            super().__init__()
            self.lin, self.first = nn.Linear(D, D), first

        def forward(self, state):
            h = state if self.first else state["h"]
            return {"h": torch.tanh(self.lin(h))}
    stages = [Stage(True)] + [Stage() for _ in range(3)] + [lambda s: s["h"]]
    wrapped = te.CheckpointedSequential(stages, budget="85%", backend="cpu", profile_passes=1)
    with pytest.raises(TypeError, match="stage 1.s output is a dict holding 1 tensor.s. that need a gradient"):
        wrapped(_x())


def test_an_ema_buffer_written_after_the_blocks_is_updated_once():
    """A buffer written in place before the chain and again in a stage is the stage's own buffer (review rv20a: the
    first step's profiling left it 18 x plain autograd's)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(4))
            self.register_buffer("ema", torch.zeros(D))

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            self.ema.mul_(0.9).add_(x.detach().mean(0), alpha=0.1)
            return x
    torch.manual_seed(0)
    ref = Net()
    model = copy.deepcopy(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = te.auto_checkpoint(model, "85%", backend="cpu", profile_passes=1)
        for step in range(2):
            wrapped(_x(step)).pow(2).mean().backward()
            ref(_x(step)).pow(2).mean().backward()
    assert torch.allclose(model.ema, ref.ema, rtol=1e-6, atol=1e-7)
    assert_grads_close(ref, model)


class _Res(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


def test_a_plain_step_over_its_budget_is_learned():
    """At "100%" the plan is plain autograd, and the caller's loss (``pow``: a tensor the size of the output) went
    over the budget at every step, unlearned (review rv20a); the next step plans within the budget less it."""
    torch.manual_seed(0)
    wrapped = te.CheckpointedSequential([_Res() for _ in range(6)], budget="100%", backend="cpu", profile_passes=1)
    wrapped.measure_memory(3)
    x = torch.randn(4, 16, 32)
    with pytest.warns(te.report.MemoryBudgetWarning, match="a step run as plain autograd measured"):
        for _ in range(3):
            wrapped(x).pow(2).mean().backward()
        records = list(wrapped.memory_report())
    assert not records[0].within_budget and all(r.within_budget for r in records[1:]), records


def test_a_wrapper_saves_with_a_measured_step_pending(tmp_path):
    """The learner a measured step keeps until it is recorded is picklable (review rv20b: a lambda)."""
    torch.manual_seed(0)
    wrapped = te.CheckpointedSequential([_Res() for _ in range(6)], budget="70%", backend="cpu", profile_passes=1)
    wrapped.measure_memory(1)
    wrapped(torch.randn(4, 16, 32)).pow(2).mean().backward()
    torch.save(wrapped, tmp_path / "w.pt")
    loaded = torch.load(tmp_path / "w.pt", weights_only=False)
    loaded(torch.randn(4, 16, 32)).pow(2).mean().backward()


# ---------------------------------------------------------------------------- the review of the fixes (rv20r)
class _Temp(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)
        self.temp = 1.0

    def forward(self, x):
        return torch.tanh(self.lin(x) / self.temp)


def test_a_scalar_the_loop_anneals_is_read_live_without_a_new_profile():
    """Note [Keys of modules run live]: keyed, every step was profiled again."""
    torch.manual_seed(0)
    stages = [_Temp() for _ in range(6)]
    wrapped = te.CheckpointedSequential(stages, budget="85%", backend="cpu", profile_passes=1)
    for step in range(3):
        for s in stages:
            s.temp = 1 + 0.1 * step
        wrapped(_x()).sum().backward()
    assert len(wrapped._entries) == 1


def test_a_copied_wrapper_keeps_its_plans():
    wrapped = te.CheckpointedSequential(_net(), budget="85%", backend="cpu", profile_passes=1)
    _step(wrapped, _x())
    twin = copy.deepcopy(wrapped)
    assert not twin._follow_replaced_stages() and len(twin._entries) == 1


def test_a_tensor_needing_no_gradient_may_ride_in_a_nested_state():
    class Stage(nn.Module):
        def __init__(self, first=False):
            super().__init__()
            self.lin, self.first = nn.Linear(D, D), first

        def forward(self, state):
            h, (mask,) = (state, (torch.ones(D),)) if self.first else state
            return torch.tanh(self.lin(h)) * mask, (mask,)
    torch.manual_seed(0)
    stages = [Stage(True)] + [Stage() for _ in range(5)] + [lambda s: s[0]]
    ref = copy.deepcopy(stages)
    wrapped = te.CheckpointedSequential(stages, budget="85%", backend="cpu", profile_passes=1)
    wrapped(_x()).sum().backward()
    y = _x()
    for s in ref:
        y = s(y)
    y.sum().backward()
    for a, b in zip(stages[:-1], ref[:-1]):
        torch.testing.assert_close(a.lin.weight.grad, b.lin.weight.grad, rtol=1e-5, atol=1e-6)


def test_a_value_logged_at_every_call_is_not_refused():
    """Note [Attributes a forward writes]: overwritten from what the call computes (here from a dropout's draws), not
    accumulated: the same from the same draws."""
    class Logged(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.drop = nn.Linear(D, D), nn.Dropout(0.2)
            self.last_mean = 0.0

        def forward(self, x):
            h = self.drop(torch.tanh(self.lin(x)))
            self.last_mean = float(h.detach().mean())
            return h
    torch.manual_seed(0)
    wrapped = te.CheckpointedSequential([Logged() for _ in range(6)], budget="85%", backend="cpu", profile_passes=1)
    wrapped(_x()).sum().backward()


def test_a_counter_in_a_module_given_as_modules_is_refused():
    shared = _Counting()
    stages = [nn.Linear(D, D), lambda h: shared(h), nn.Linear(D, D), nn.Tanh()]
    wrapped = te.CheckpointedSequential(stages, budget="85%", backend="cpu", profile_passes=1, modules=[shared])
    with pytest.raises(te.AttributeWriteError, match="writes _Counting.calls at every call"):
        wrapped(_x()).sum().backward()
    assert shared.calls == 0


def test_a_stage_replaced_in_a_sequential_given_with_modules_is_followed():
    shared = nn.Linear(D, D)
    seq = _net()
    wrapped = te.CheckpointedSequential(seq, budget="85%", backend="cpu", profile_passes=1, modules=[shared])
    _step(wrapped, _x())
    seq[-1] = nn.Linear(D, 5)
    assert wrapped(_x()).shape == (64, 5)
    assert any(p is seq[-1].weight for p in wrapped.parameters())
