"""Callable stages (closures, lambdas, bound methods, partials) in CheckpointedSequential: refused when
they use parameters the wrapper cannot see, trained exactly when their modules are given as
``modules=``; profiling leaves every parameter's gradient, every buffer and the RNG state as it was."""
from __future__ import annotations

import copy
import functools

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve.schedule import segments_policy  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

DT = torch.float64
GLOBAL_LINEAR = nn.Linear(6, 6).to(DT)  # read by name from a stage function's globals


def every_stage_boundary(chain):
    """A checkpoint after every chain stage: each stage is recomputed in the backward."""
    return segments_policy(list(range(1, chain.n)), chain.n)


def wrap(stages, **kwargs):
    kwargs.setdefault("backend", "cpu")
    kwargs.setdefault("profile_passes", 1)
    kwargs.setdefault("profile_warmup", 0)
    kwargs.setdefault("budget", "1GiB")
    kwargs.setdefault("schedule_fn", every_stage_boundary)
    return te.CheckpointedSequential(stages, **kwargs)


class Model:
    """The modules of the tests: a first and last module stage, and modules only closures use."""

    def __init__(self, seed=0, batchnorm=False, dropout=0.0):
        torch.manual_seed(seed)
        self.first = nn.Linear(4, 6).to(DT)
        self.inner = nn.Linear(6, 6).to(DT)
        self.norm = nn.BatchNorm1d(6).to(DT) if batchnorm else nn.Identity()
        self.last = nn.Linear(6, 3).to(DT)
        self.dropout = dropout

    def stages(self):
        inner, norm, p = self.inner, self.norm, self.dropout
        return [self.first, torch.tanh, lambda x: norm(inner(x)),
                lambda x: nn.functional.dropout(torch.tanh(x), p), self.last]

    def hidden(self):
        return [self.inner, self.norm]

    def modules(self):
        return [self.first, self.inner, self.norm, self.last]

    def params(self):
        return [p for m in self.modules() for p in m.parameters()]

    def buffers(self):
        return [b for m in self.modules() for b in m.buffers()]


def plain_step(model: Model, x, seed):
    """Plain autograd's step on a copy of the model: (output, parameter gradients)."""
    ref = copy.deepcopy(model)
    torch.manual_seed(seed)
    state = x
    for fn in ref.stages():
        state = fn(state)
    state.square().sum().backward()
    return state.detach(), [p.grad for p in ref.params()], ref


# ---------------------------------------------------------------------------- refusal
def _closure_stage(linear):
    def stage(x):
        return linear(x)
    return stage


def _list_stage(layers):
    return lambda x: layers[0](x)


def _outer_stage(inner):
    return lambda x: inner(x) + 0


class CallableObject:
    def __init__(self, module):
        self.module = module

    def __call__(self, x):
        return self.module(x)


def _global_stage(x):
    return GLOBAL_LINEAR(x)


HIDDEN = {
    "closure": lambda lin, w: _closure_stage(lin),
    "bound method": lambda lin, w: lin.forward,
    "default argument": lambda lin, w: (lambda x, m=lin: m(x)),
    "partial": lambda lin, w: functools.partial(lambda m, x: m(x), lin),
    "list in a closure": lambda lin, w: _list_stage([lin]),
    "closure over a closure": lambda lin, w: _outer_stage(_closure_stage(lin)),
    "callable object": lambda lin, w: CallableObject(lin),
    "global": lambda lin, w: _global_stage,
    "leaf tensor requiring grad": lambda lin, w: (lambda x: x * w),
    "bound tensor method": lambda lin, w: w.mul,
}


@pytest.mark.parametrize("kind", list(HIDDEN))
def test_callable_with_hidden_parameters_is_refused(kind):
    lin = GLOBAL_LINEAR if kind == "global" else nn.Linear(6, 6).to(DT)
    w = torch.randn(6, dtype=DT, requires_grad=True)
    stage = HIDDEN[kind](lin, w)
    with pytest.raises(ValueError, match="stage '1:") as err:
        wrap([nn.Linear(4, 6).to(DT), stage, nn.Linear(6, 2).to(DT)])
    message = str(err.value)
    assert "plain callable" in message and "modules=[...]" in message and "nn.Module" in message
    assert "parameters()" in message  # says what goes wrong
    if "tensor" not in kind:  # the module is found, and given explicitly the stage is accepted
        assert "Linear (2 parameter(s)" in message
        wrapped = wrap([nn.Linear(4, 6).to(DT), stage, nn.Linear(6, 2).to(DT)], modules=[lin])
        assert any(p is lin.weight for p in wrapped.parameters())


def test_refusal_names_the_stage_and_the_variable():
    inner = nn.Linear(6, 6)
    with pytest.raises(ValueError, match=r"stage '2:<lambda>' .*closure variable 'inner': Linear \(2 parameter"):
        te.CheckpointedSequential([nn.Linear(4, 6), torch.tanh, lambda x: inner(x)], budget="1GiB")


def test_stateless_callables_are_allowed():
    stages = [nn.Linear(4, 6), torch.relu, lambda x: x.flatten(1), nn.functional.gelu,
              functools.partial(nn.functional.dropout, p=0.1), torch.Tensor.tanh, nn.Linear(6, 2)]
    wrapped = te.CheckpointedSequential(stages, budget="1GiB")
    assert len(list(wrapped.parameters())) == 4
    assert "extra_modules" not in dict(wrapped.named_children())  # nothing registered when none are given


def test_modules_argument_is_checked():
    with pytest.raises(TypeError, match=r"modules\[1\] is a Tensor"):
        te.CheckpointedSequential([nn.Linear(2, 2)], modules=[nn.Linear(2, 2), torch.zeros(2)])


# ---------------------------------------------------------------------------- training with modules=
@pytest.mark.parametrize("schedule_fn", [every_stage_boundary, None], ids=["recompute", "plain"])
def test_modules_train_like_plain_autograd(schedule_fn):
    model = Model(batchnorm=True, dropout=0.3)
    x = torch.randn(16, 4, dtype=DT)
    expected, grads, ref = plain_step(model, x, seed=3)
    wrapped = wrap(model.stages(), modules=model.hidden(), schedule_fn=schedule_fn)
    torch.manual_seed(3)
    out = wrapped(x)
    out.square().sum().backward()
    if schedule_fn is not None:
        assert any(wrapped._last.recomputed), "the schedule must recompute the closure stages"
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for p, g in zip(model.params(), grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-12, atol=1e-12)
    for b, r in zip(model.buffers(), ref.buffers()):  # BatchNorm statistics updated once, as plain autograd
        torch.testing.assert_close(b, r, rtol=0, atol=0)
    # The modules' parameters and buffers are the wrapper's: an optimizer built from it updates them.
    ids = {id(p) for p in wrapped.parameters()}
    assert all(id(p) in ids for p in model.params())
    keys = set(wrapped.state_dict())
    assert {"extra_modules.0.weight", "extra_modules.0.bias", "extra_modules.1.running_mean"} <= keys
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    before = model.inner.weight.detach().clone()
    opt.step()
    assert not torch.equal(model.inner.weight, before)


# ---------------------------------------------------------------------------- profiling leaves state alone
@pytest.mark.parametrize("grads_before", ["none", "set"])
def test_first_call_gradients_equal_plain_autograd(grads_before):
    """The first call profiles (several forward/backward passes) and then trains: afterwards every
    ``.grad`` is plain autograd's first-step gradient (added to the gradient held before, if any)."""
    model = Model(dropout=0.2)
    x = torch.randn(16, 4, dtype=DT)
    held = {}
    if grads_before == "set":
        for p in model.params():
            p.grad = torch.full_like(p, 0.5)
            held[id(p)] = p.grad
    _, grads, _ = plain_step(model, x, seed=7)  # the copy starts without gradients
    wrapped = wrap(model.stages(), modules=model.hidden(), profile_passes=3, profile_warmup=1)
    torch.manual_seed(7)
    wrapped(x).square().sum().backward()
    for p, g in zip(model.params(), grads):
        expected = g if grads_before == "none" else g + 0.5
        torch.testing.assert_close(p.grad, expected, rtol=1e-12, atol=1e-12)
        if grads_before == "set":
            assert p.grad is held[id(p)]  # accumulated into the very tensor, as plain autograd does


@pytest.mark.parametrize("via", ["prepare", "profile_dict"])
def test_profiling_leaves_grads_buffers_and_rng(via):
    model = Model(batchnorm=True, dropout=0.5)
    for p in model.params()[:3]:
        p.grad = torch.randn_like(p)
    grads = [p.grad for p in model.params()]
    grad_values = [None if g is None else g.clone() for g in grads]
    model.norm.running_mean.add_(0.25)
    buffers = [b.clone() for b in model.buffers()]
    params = [p.detach().clone() for p in model.params()]
    torch.manual_seed(11)
    x = torch.randn(16, 4, dtype=DT)
    rng = torch.get_rng_state()
    if via == "prepare":
        wrap(model.stages(), modules=model.hidden(), profile_passes=2).prepare(x)
    else:  # the profiler on its own finds the closures' modules: no modules= needed
        te.profile_dict(model.stages(), x, passes=2, warmup=1)
    assert torch.equal(torch.get_rng_state(), rng)
    for p, g, v in zip(model.params(), grads, grad_values):
        assert p.grad is g
        if g is not None:
            assert torch.equal(g, v)
    for b, v in zip(model.buffers(), buffers):
        assert torch.equal(b, v)
    assert int(model.norm.num_batches_tracked) == 0
    for p, v in zip(model.params(), params):
        assert torch.equal(p, v)
