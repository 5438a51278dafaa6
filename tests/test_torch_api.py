"""CheckpointedSequential under the autograd calls that name tensors, double and repeated backward,
and torch.compile: each behaves as plain autograd (gradients compared bitwise) or raises a clear error
before touching any ``.grad``."""
from __future__ import annotations

import copy
import shutil
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve.schedule import Checkpoint, Tape, segments_policy  # noqa: E402
from _torch_helpers import DT, LinearStage, loss_of  # noqa: E402
from _torch_helpers import wrap as cpu_wrap  # noqa: E402
from torch_exec.report import MemoryBudgetWarning  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning",
                                        "ignore::gpusolve.FallbackWarning",
                                        "ignore:Using backward\\(\\) with create_graph=True:UserWarning")


# ---------------------------------------------------------------------------- helpers
def mlp(seed=0, width=6, depth=5, dropout=0.0, dtype=DT):
    torch.manual_seed(seed)
    layers = [nn.Linear(4, width)]
    for d in range(depth):
        layers += [nn.Tanh(), nn.Dropout(dropout) if dropout and d % 2 else nn.Identity(), nn.Linear(width, width)]
    layers += [nn.Linear(width, 3)]
    return nn.Sequential(*layers).to(dtype)


def nested_runs(chain):
    """Checkpoints at a third and two thirds of the chain with nested tapes between: forward-made and
    recomputed multi-stage segments."""
    n = chain.n
    assert n >= 6, f"nested_runs needs at least 6 chain stages, the chain has {n}"
    a, b = n // 3, 2 * n // 3

    def tapes(i, j):
        return Tape(None) if j == i + 1 else Tape(tapes(i + 1, j))
    return Checkpoint(b, right=tapes(b, n), left=Checkpoint(a, right=tapes(a, b), left=tapes(0, a)))


SCHEDULES = {
    "segments": lambda chain: segments_policy([c for c in (2, 5, 9) if c < chain.n], chain.n),
    "nested": nested_runs,
}


def wrap(model, schedule="segments", **kwargs):
    kwargs.setdefault("schedule_fn", SCHEDULES[schedule])
    return cpu_wrap(model, **kwargs)


X = torch.randn(5, 4, dtype=DT)


def pair(make=mlp, schedule="segments", **kwargs):
    """(plain model, wrapped copy), the wrapper prepared and checked to recompute."""
    ref = make()
    wrapped = wrap(copy.deepcopy(ref), schedule, **kwargs)
    wrapped.prepare(X.clone().requires_grad_())
    assert any(op.kind.name == "FWD_NOGRAD" for op in wrapped.plan.schedule)  # really checkpointed
    return ref, wrapped


def params(model):
    return list(model.parameters())


def sentinel_grads(model):
    """Give every parameter a recognisable .grad; return them to check later that nothing touched them."""
    out = []
    for i, p in enumerate(model.parameters()):
        p.grad = torch.full_like(p, 0.5 + i)
        out.append((p.grad, p.grad.clone()))
    return out


def assert_untouched(model, sentinels):
    for p, (g, value) in zip(model.parameters(), sentinels):
        assert p.grad is g and torch.equal(g, value)


def assert_equal(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)


# ---------------------------------------------------------------------------- autograd.grad
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_grad_of_input_fills_no_param_grad(schedule):
    ref, wrapped = pair(schedule=schedule)
    x = X.clone().requires_grad_()
    (want,) = torch.autograd.grad(loss_of(ref(x)), x)
    sentinels = sentinel_grads(wrapped)
    x = X.clone().requires_grad_()
    (got,) = torch.autograd.grad(loss_of(wrapped(x)), x)
    assert torch.equal(got, want)
    assert_untouched(wrapped, sentinels)
    assert x.grad is None


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_grad_of_params_matches_plain_and_fills_no_grad(schedule):
    ref, wrapped = pair(schedule=schedule)
    x = X.clone().requires_grad_()
    want = torch.autograd.grad(loss_of(ref(x)), [x] + params(ref))
    sentinels = sentinel_grads(wrapped)
    x = X.clone().requires_grad_()
    got = torch.autograd.grad(loss_of(wrapped(x)), [x] + params(wrapped))
    assert_equal(got, want)
    assert_untouched(wrapped, sentinels)
    assert x.grad is None
    # Parameters only, input without grad.
    want = torch.autograd.grad(loss_of(ref(X)), params(ref)[3:7])
    got = torch.autograd.grad(loss_of(wrapped(X)), params(wrapped)[3:7])
    assert_equal(got, want)
    assert_untouched(wrapped, sentinels)


def test_named_call_reaches_parameters_replaced_between_calls():
    """Note [One walk of the model per call]: the tap takes the parameters the call's own input signature walk
    found, so parameters replaced by ``load_state_dict(assign=True)`` (same shapes, dtypes: the same signature)
    are the ones a named call reaches, not the old ones."""
    ref, wrapped = pair()
    loss_of(wrapped(X)).backward()  # a step on the old parameters
    state = {k: v.detach().clone() * 1.5 for k, v in ref.state_dict().items()}
    ref.load_state_dict(state)
    wrapped.load_state_dict({k: v.clone() for k, v in state.items()}, assign=True)
    want = torch.autograd.grad(loss_of(ref(X)), params(ref))
    got = torch.autograd.grad(loss_of(wrapped(X)), params(wrapped))  # raised "not used in the graph" if stale
    assert_equal(got, want)


def test_the_signature_walk_lists_the_trainable_parameters_as_parameters_does():
    import torch_exec._util as U
    torch.manual_seed(0)
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.Sequential(nn.Linear(3, 3), shared), nn.BatchNorm1d(3), nn.Linear(3, 2))
    model[1][0].weight.requires_grad_(False)
    model[3].tied = model[0].weight  # a parameter registered under a second module
    walked = []
    key = U.module_state_key(model, walked)
    assert key == U.module_state_key(model)
    assert [id(p) for p in walked] == [id(p) for p in model.parameters() if p.requires_grad]


def test_the_tap_walk_lists_the_trainable_parameters_as_parameters_does():
    """Where the owner keys the state (auto_checkpoint), the parameter tap walks the wrapper's parameters itself
    (``U.trainable_parameters``, the signature walk's rule): ``parameters()``'s trainable ones, each once, in its
    order, also through a module listing its submodules its own way and after a parameter is frozen or replaced."""
    import torch_exec._util as U
    import torch_exec.executor as ex

    class Hides(nn.Sequential):
        def named_modules(self, memo=None, prefix="", remove_duplicate=True):
            yield prefix, self

    torch.manual_seed(0)
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.Sequential(nn.Linear(3, 3), shared), nn.BatchNorm1d(3), nn.Linear(3, 2))
    model[1][0].weight.requires_grad_(False)
    model[3].tied = model[0].weight  # a parameter registered under a second module
    model[3].register_parameter("gone", None)

    def want(m):
        return [id(p) for p in m.parameters() if p.requires_grad]
    assert [id(p) for p in U.trainable_parameters(model)] == want(model)
    assert [id(p) for p in ex._tap_params(model, None)] == want(model)
    model[0].bias.requires_grad_(False)
    model[3].weight = nn.Parameter(torch.zeros(2, 3))
    assert [id(p) for p in U.trainable_parameters(model)] == want(model)
    hiding = nn.Sequential(model, Hides(nn.Linear(3, 3)))
    assert [id(p) for p in U.trainable_parameters(hiding)] == want(hiding)


def test_the_captured_key_sees_every_scalar_type_and_hook_kind():
    """The captured key's scalar attributes are those of exactly the SCALAR_TYPES (not subclasses: an IntEnum is no
    scalar there), and each kind of module hook changes it."""
    import enum

    import torch_exec._util as U

    class Tag(enum.IntEnum):
        A = 1
        B = 2

    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    before = U.captured_state_key(model)
    for value in (True, 2, 0.5, "s", None):
        model[1].knob = value
        assert U.captured_state_key(model) != before, value
        del model[1].knob
    assert U.captured_state_key(model) == before
    model[1].tag = Tag.A
    assert dict(U.scalar_attributes(model[1])).get("tag") is None and U.captured_state_key(model) == before
    del model[1].tag
    for register in ("register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
                     "register_full_backward_pre_hook"):
        handle = getattr(model[0], register)(lambda *a: None)
        assert U.captured_state_key(model) != before, register
        handle.remove()
        assert U.captured_state_key(model) == before, register


def test_the_signature_walk_visits_the_modules_as_modules_does():
    """Note [The signature's walk of the modules]: the same modules, each once, in ``modules()``'s order (a module
    held twice, a None entry, a ModuleDict), and a module listing its submodules its own way walked by
    ``modules()``; the hook predicates' fast paths still see a hook of either kind."""
    import torch_exec._util as U

    class Hides(nn.Sequential):
        def named_modules(self, memo=None, prefix="", remove_duplicate=True):
            yield prefix, self

    shared = nn.Linear(3, 3)
    inner = nn.Sequential(nn.Linear(3, 3), shared, nn.ModuleDict({"b": nn.ReLU(), "a": shared}))
    model = nn.Sequential(shared, inner, nn.Sequential(inner, nn.Tanh()))
    model.register_module("gone", None)
    want = [id(m) for m in model.modules()]
    assert len(want) == 8
    model.modules = None  # the stack walk is the one taken: it calls no modules()
    assert [id(m) for m in U.walked_modules(model)] == want
    del model.modules
    hiding = nn.Sequential(model, Hides(nn.Linear(3, 3)))
    assert [id(m) for m in U.walked_modules(hiding)] == [id(m) for m in hiding.modules()] == [
        id(hiding), *want, id(hiding[1])]
    p = shared.weight
    assert not U.users_grad_hooks(p) and not U.users_post_hooks(p)
    handle = p.register_hook(lambda g: g)
    assert U.users_grad_hooks(p) and not U.users_post_hooks(p)
    handle.remove()
    handle = p.register_post_accumulate_grad_hook(lambda t: None)
    assert U.users_post_hooks(p) and not U.users_grad_hooks(p)
    handle.remove()


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_grad_of_params_on_a_measured_step(schedule):
    """A measured step's meter hooks every parameter without a gradient (Note [Gradients set during the
    step] in torch_exec/report.py); the parameter tap must still route them, or autograd.grad raised
    "not used in the graph" on exactly the steps measure_memory() watches."""
    ref, wrapped = pair(schedule=schedule)
    want = torch.autograd.grad(loss_of(ref(X)), params(ref))
    for p in params(wrapped):
        p.grad = None
    wrapped.measure_memory(1)
    got = torch.autograd.grad(loss_of(wrapped(X)), params(wrapped))
    assert_equal(got, want)
    assert all(p.grad is None for p in params(wrapped))
    assert not any(getattr(p, "_post_accumulate_grad_hooks", None) for p in params(wrapped))  # removed


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.unused = nn.Parameter(torch.ones(2))

    def forward(self, x):
        return self.lin(x)


def with_unused():
    model = mlp()
    model[3] = WithUnused().to(DT)
    return model


def stage(model, i):
    return model[i] if isinstance(model, nn.Sequential) else model.stages[i]


def test_grad_of_an_unused_param_as_plain_autograd():
    ref, wrapped = pair(make=with_unused)
    for model in (ref, wrapped):
        with pytest.raises(RuntimeError, match="not have been used in the graph"):
            torch.autograd.grad(loss_of(model(X)), [stage(model, 3).unused])
    want = torch.autograd.grad(loss_of(ref(X)), [ref[3].unused, ref[3].lin.weight], allow_unused=True)
    got = torch.autograd.grad(loss_of(wrapped(X)), [stage(wrapped, 3).unused, stage(wrapped, 3).lin.weight],
                              allow_unused=True)
    assert got[0] is None
    assert_equal(got, want)
    assert all(p.grad is None for p in wrapped.parameters())


def test_grad_inside_a_larger_model():
    def make():
        torch.manual_seed(3)
        return nn.Linear(4, 4).to(DT), mlp(seed=4), nn.Linear(3, 2).to(DT)

    pre, body, head = make()
    ref = nn.Sequential(pre, body, head)
    pre2, body2, head2 = (copy.deepcopy(m) for m in (pre, body, head))
    model = nn.Sequential(pre2, wrap(body2), head2)
    x = X.clone().requires_grad_()
    names = lambda m: [m[0].weight, params(m[1])[2], params(m[1])[9], m[2].weight]  # noqa: E731
    want = torch.autograd.grad(loss_of(ref(x)), [x] + names(ref))
    x = X.clone().requires_grad_()
    got = torch.autograd.grad(loss_of(model(x)), [x] + names(model))
    assert_equal(got, want)
    assert all(p.grad is None for p in model.parameters())


class Mix(LinearStage):
    def forward(self, state):
        x, h = state
        return (x + h.tanh(), self.lin(h) * x)


def test_grad_through_tuple_states():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(*[Mix(4) for _ in range(5)]).to(DT)

    ref = make()
    wrapped = te.CheckpointedSequential(copy.deepcopy(ref), budget="1GiB", backend="cpu", profile_passes=1,
                                        profile_warmup=0, schedule_fn=lambda chain: segments_policy([1, 3], chain.n))
    h = torch.randn(3, 4, dtype=DT)
    out = []
    for model in (ref, wrapped):
        x, g = X[:3].clone().requires_grad_(), h.clone().requires_grad_()
        a, b = model((x, g))
        loss = loss_of(a) + loss_of(b)
        out.append(torch.autograd.grad(loss, [g, x] + params(model)[2:6]))
        assert x.grad is None and all(p.grad is None for p in model.parameters())
    assert_equal(out[1], out[0])


# ---------------------------------------------------------------------------- backward(inputs=...)
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_backward_inputs_fills_only_those(schedule):
    ref, wrapped = pair(schedule=schedule)
    picked = [1, 6, 10]
    x = X.clone().requires_grad_()
    loss_of(ref(x)).backward(inputs=[params(ref)[i] for i in picked])
    want = [p.grad for p in ref.parameters()]
    x2 = X.clone().requires_grad_()
    loss_of(wrapped(x2)).backward(inputs=[params(wrapped)[i] for i in picked])
    assert_equal([p.grad for p in wrapped.parameters()], want)
    assert x.grad is None and x2.grad is None
    # The input only: no parameter gradient.
    x = X.clone().requires_grad_()
    loss_of(ref(x)).backward(inputs=[x])
    sentinels = sentinel_grads(wrapped)
    x2 = X.clone().requires_grad_()
    loss_of(wrapped(x2)).backward(inputs=[x2])
    assert torch.equal(x2.grad, x.grad)
    assert_untouched(wrapped, sentinels)


def test_backward_inputs_accumulates_like_plain():
    ref, wrapped = pair()
    for model in (ref, wrapped):
        sentinel_grads(model)
        loss_of(model(X)).backward(inputs=params(model)[2:5])
    assert_equal([p.grad for p in wrapped.parameters()], [p.grad for p in ref.parameters()])


# ---------------------------------------------------------------------------- hooks
def test_param_hooks_fire_as_in_plain_autograd():
    calls = {}

    def hooked(model, tag):
        def hook(g):
            calls.setdefault(tag, []).append(None if g is None else g.clone())
            return g
        params(model)[2].register_hook(hook)
        params(model)[7].register_post_accumulate_grad_hook(lambda p: calls.setdefault(tag + "-post", []).append(1))
        return model

    ref, wrapped = pair()
    wrapped.prepare(X)  # profiling runs backward passes, which would call the hooks too
    hooked(ref, "plain")
    hooked(wrapped, "ckpt")
    loss_of(ref(X)).backward()
    loss_of(wrapped(X)).backward()
    assert len(calls["ckpt"]) == len(calls["plain"]) == 1
    assert torch.equal(calls["ckpt"][0], calls["plain"][0])
    assert len(calls["ckpt-post"]) == len(calls["plain-post"]) == 1
    assert_equal([p.grad for p in wrapped.parameters()], [p.grad for p in ref.parameters()])
    # A hooked parameter is routed to the schedule like any other (Note [Hooks of routed parameters]): a call
    # naming it gets plain autograd's gradient, its hook run once (it failed, the parameter unused, before)
    calls.clear()
    got = torch.autograd.grad(loss_of(wrapped(X)), [params(wrapped)[2]])
    want = torch.autograd.grad(loss_of(ref(X)), [params(ref)[2]])
    assert torch.equal(got[0], want[0])
    assert len(calls["ckpt"]) == len(calls["plain"]) == 1 and torch.equal(calls["ckpt"][0], calls["plain"][0])


@pytest.mark.parametrize("how", ["second call", "prepare"])
def test_a_new_signature_profiled_while_a_step_waits_leaves_its_graph_valid(how):
    # Note [Restoring leaves the versions] in torch_exec/_util.py: profiling a new input signature wrote every
    # parameter back with copy_, moving its version counter; the waiting step's backward then raised "modified by
    # an inplace operation" (bench/repros/rv9_off_new_signature_in_flight.py)
    ref, wrapped = pair()
    small = torch.randn(3, 4, dtype=DT)
    versions = [p._version for p in wrapped.parameters()]
    loss = loss_of(wrapped(X))
    seen = len(wrapped.plans)
    if how == "second call":
        loss = loss + loss_of(wrapped(small))  # a signature the wrapper has not seen: profiled and solved here
    else:
        wrapped.prepare(small)
    assert len(wrapped.plans) == seen + 1 and [p._version for p in wrapped.parameters()] == versions
    loss.backward()
    (loss_of(ref(X)) + (loss_of(ref(small)) if how == "second call" else 0)).backward()
    assert_equal([p.grad for p in wrapped.parameters()], [p.grad for p in ref.parameters()])


# ---------------------------------------------------------------------------- double and repeated backward
def test_double_backward_raises_before_touching_grad():
    _, wrapped = pair()
    sentinels = sentinel_grads(wrapped)
    x = X.clone().requires_grad_()
    loss = loss_of(wrapped(x))
    with pytest.raises(RuntimeError, match=r"double backward \(create_graph=True\) is not supported.*budget=None"):
        torch.autograd.grad(loss, x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"double backward \(create_graph=True\)"):
        loss.backward(create_graph=True)
    assert_untouched(wrapped, sentinels)
    assert x.grad is None


def test_double_backward_refused_then_plain_backward_still_runs():
    ref, wrapped = pair()
    x = X.clone().requires_grad_()
    loss_of(ref(x)).backward()
    x2 = X.clone().requires_grad_()
    loss = loss_of(wrapped(x2))
    with pytest.raises(RuntimeError, match="create_graph"):
        loss.backward(create_graph=True)  # keeps the graph: the step is still whole
    loss.backward()
    assert_equal([p.grad for p in wrapped.parameters()] + [x2.grad], [p.grad for p in ref.parameters()] + [x.grad])


def convnet(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.3),
        nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Tanh(), nn.Dropout(0.3),
        nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * 6 * 6, 3)).to(DT)


@pytest.mark.parametrize("make,schedule", [(mlp, "segments"), (mlp, "nested"), (convnet, "segments"),
                                           (convnet, "nested")])
def test_retain_graph_second_backward_matches_plain(make, schedule):
    """Dropout and BatchNorm stages recomputed: every backward replays the forward's random numbers
    and leaves the statistics as the forward set them."""
    ref = make()
    x0 = torch.randn(2, 3, 6, 6, dtype=DT) if make is convnet else X
    wrapped = wrap(copy.deepcopy(ref), schedule)
    results = []
    for model in (ref, wrapped):
        torch.manual_seed(7)
        x = x0.clone().requires_grad_()
        y = model(x)
        a = torch.linspace(-1, 1, y.numel(), dtype=DT).view_as(y)
        (y * a).square().sum().backward(retain_graph=True)
        first = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        (y.sin() * a).sum().backward(retain_graph=True)
        (y * a).sum().backward()
        results.append((first, [p.grad for p in model.parameters()] + [x.grad],
                        [b.clone() for b in model.buffers()]))
    assert any(op.kind.name == "FWD_NOGRAD" for op in wrapped.plan.schedule)
    for got, want in zip(results[1], results[0]):
        assert_equal(got, want)


def test_retained_grad_then_backward():
    ref, wrapped = pair()
    out = []
    for model in (ref, wrapped):
        x = X.clone().requires_grad_()
        loss = loss_of(model(x))
        named = torch.autograd.grad(loss, [x] + params(model)[:4], retain_graph=True)
        assert all(p.grad is None for p in model.parameters())
        loss.backward()
        out.append(list(named) + [p.grad for p in model.parameters()] + [x.grad])
    assert_equal(out[1], out[0])


def test_second_backward_without_retain_raises_before_touching_grad():
    _, wrapped = pair()
    x = X.clone().requires_grad_()
    y = wrapped(x)
    y.sum().backward()
    sentinels = sentinel_grads(wrapped)
    x_grad = x.grad.clone()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.sum().backward()
    assert_untouched(wrapped, sentinels)
    assert torch.equal(x.grad, x_grad)


# ---------------------------------------------------------------------------- torch.compile
dynamo = pytest.importorskip("torch._dynamo")


def dropout_net(seed=0):
    return mlp(seed=seed, width=8, depth=5, dropout=0.5, dtype=torch.float32)


def eager_reference(make, x0, seed=11, steps=2):
    ref = make()
    grads = []
    for step in range(steps):
        ref.zero_grad(set_to_none=True)
        torch.manual_seed(seed + step)
        x = x0.clone().requires_grad_()
        loss_of(ref(x)).backward()
        grads.append([p.grad for p in ref.parameters()] + [x.grad])
    return grads


def compiled_grads(model, compiled, x0, seed=11, steps=2):
    grads = []
    for step in range(steps):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(seed + step)
        x = x0.clone().requires_grad_()
        loss_of(compiled(x)).backward()
        grads.append([p.grad for p in model.parameters()] + [x.grad])
    return grads


def has_cxx():
    return shutil.which("g++") is not None or shutil.which("clang++") is not None


BACKENDS = ["eager", "aot_eager", pytest.param("inductor", marks=pytest.mark.skipif(not has_cxx(), reason="no C++"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_unprepared_wrapper_matches_eager(backend):
    dynamo.reset()
    x0 = torch.randn(5, 4)
    want = eager_reference(dropout_net, x0)
    model = wrap(dropout_net())
    compiled = torch.compile(model, backend=backend)
    got = compiled_grads(model, compiled, x0)  # the first call profiles and solves outside dynamo
    assert model.plan is not None and any(op.kind.name == "FWD_NOGRAD" for op in model.plan.schedule)
    assert any(not isinstance(m, (nn.Linear, nn.Tanh, nn.Identity)) for m in model.stages)  # has dropout
    for g, w in zip(got, want):
        assert_equal(g, w)


def test_compiled_wrapper_inside_a_compiled_model():
    dynamo.reset()
    x0 = torch.randn(5, 4)

    def make():
        torch.manual_seed(5)
        return nn.Sequential(nn.Linear(4, 4), dropout_net(seed=6), nn.Linear(3, 3))

    ref = make()
    model = make()
    model[1] = wrap(model[1])
    want = compiled_grads(ref, torch.compile(ref, backend="aot_eager"), x0)
    got = compiled_grads(model, torch.compile(model, backend="aot_eager"), x0)
    for g, w in zip(got, want):
        assert_equal(g, w)


def test_fullgraph_names_the_reason():
    dynamo.reset()
    compiled = torch.compile(wrap(dropout_net()), backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="CheckpointedSequential runs its checkpointed schedule eagerly"):
        compiled(torch.randn(5, 4, requires_grad=True))


def test_fullgraph_traces_the_plain_path():
    dynamo.reset()
    x0 = torch.randn(5, 4)
    want = eager_reference(dropout_net, x0)
    model = te.CheckpointedSequential(dropout_net(), budget=None)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    got = compiled_grads(model, compiled, x0)
    for g, w in zip(got, want):
        assert_equal(g, w)
    with torch.no_grad():
        model.eval()
        assert torch.equal(compiled(x0), model(x0))


@pytest.mark.skipif(not has_cxx(), reason="inductor on the CPU needs a C++ compiler")
def test_inductor_compiled_stages_recompute_the_same_dropout():
    """Stages compiled by the user run compiled in the schedule (forward under no_grad, recomputation
    under grad: two graphs); inductor draws its dropout seeds from torch's generator, which the
    executor replays, so the gradients are those of the same compiled stages as plain autograd."""
    dynamo.reset()
    x0 = torch.randn(5, 4)
    torch.manual_seed(0)
    stages = [nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.5), nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 3)]
    compiled = [torch.compile(s, backend="inductor") for s in stages]
    with dynamo.config.patch(recompile_limit=64), warnings.catch_warnings():  # every stage compiled
        warnings.simplefilter("ignore")
        plain = te.CheckpointedSequential(compiled, budget=None)
        want = compiled_grads(plain, plain, x0)
        model = te.CheckpointedSequential(compiled, budget="1GiB", backend="cpu", profile_passes=1, profile_warmup=0,
                                          schedule_fn=lambda chain: segments_policy([chain.n - 1], chain.n))
        got = compiled_grads(model, model, x0)
    runs = [op.stage for op in model.plan.schedule if op.kind.name in ("FWD_NOGRAD", "FWD_TAPE")]
    # the chain stages holding the two dropouts (stages may be fused: find them by their members' names)
    drops = [s + 1 for s, members in enumerate(model.chain.provenance["members"])
             if any(m.split(":")[0] in ("2", "4") for m in members)]
    assert len(drops) == 2 and all(runs.count(s) == 2 for s in drops)  # both run again in the backward
    for g, w in zip(got, want):
        assert_equal(g, w)
    # The comparison sees the masks: without replaying the RNG state the recomputation draws others.
    with dynamo.config.patch(recompile_limit=64), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.preserve_rng_state = False
        model.replan(profile=True)
        bad = compiled_grads(model, model, x0)
    assert not all(torch.equal(a, b) for a, b in zip(bad[0], want[0]))


# ---------------------------------------------------------------------------- the user's torch.profiler
# Note [One profiler per thread] in torch_exec/meter.py: the CPU meter started inside the user's profiler
# ended it (its trace came back empty) and then raised an internal error at the measured step's record
def _aten_events(prof):
    return len([e for e in prof.events() if e.name.startswith("aten::")])


def _tanh_net():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(4)]).to(DT)


def test_cpu_meter_refuses_to_start_inside_a_recording_profiler():
    from torch_exec.meter import MemoryMeter, ProfilerBusyError
    x = torch.randn(100, dtype=DT)
    with torch.profiler.profile() as prof:
        with pytest.raises(ProfilerBusyError, match="before starting your profiler"):
            MemoryMeter("cpu").__enter__()
        (x * 2).sum()
    assert _aten_events(prof) >= 2  # the user's session kept recording
    with MemoryMeter("cpu") as meter:  # and a meter outside it starts
        y = x * 3
    assert meter.total.peak >= y.nbytes


@pytest.mark.parametrize("kind", ["sequential", "auto"])
def test_first_call_inside_the_users_profiler_is_refused_then_runs_outside(kind):
    net = _tanh_net()
    x = torch.randn(8, 16, dtype=DT)
    w = te.CheckpointedSequential(net, budget="80%") if kind == "sequential" else te.auto_checkpoint(net, "80%")
    with torch.profiler.profile() as prof:
        with pytest.raises(te.ProfilerBusyError, match=r"model\.prepare"):
            w(x).sum().backward()
        (x * 2).sum()
    assert _aten_events(prof) > 0 and all(p.grad is None for p in net.parameters())
    ref = _tanh_net()
    ref(x).sum().backward()
    w(x).sum().backward()
    assert_equal([p.grad for p in net.parameters()], [p.grad for p in ref.parameters()])
    if kind == "auto":  # the prologue's peak was measured on the first step run outside the profiler
        assert next(iter(w._captures.values())).prologue_peak is not None


def test_a_measured_step_inside_the_users_profiler_stays_due():
    w = te.CheckpointedSequential(_tanh_net(), budget="80%")
    x = torch.randn(8, 16, dtype=DT)
    w(x).sum().backward()
    w.measure_memory(1)
    with torch.profiler.profile() as prof:
        with pytest.warns(MemoryBudgetWarning, match="not measured while your torch.profiler or memory meter records"):
            w(x).sum().backward()
    assert _aten_events(prof) > 0 and len(w.memory_report()) == 0
    w(x).sum().backward()  # the next step outside it is the measured one
    report = w.memory_report()
    assert len(report) == 1 and report[-1].within_budget


def test_a_step_meter_waiting_for_its_record_makes_room_for_another_wrapper():
    # a measured step's CPU meter runs until its record is made (Note [Ending a measurement inside a
    # backward]): another wrapper's profiling records it first, or stops it when its wrapper is gone
    from torch_exec.meter import MemoryMeter
    x = torch.randn(8, 16, dtype=DT)
    a = te.CheckpointedSequential(_tanh_net(), budget="80%")
    a(x).sum().backward()
    a.measure_memory(1)
    a(x).sum().backward()  # measured: its meter waits for the record
    b = te.CheckpointedSequential(_tanh_net(), budget="80%")
    b(x).sum().backward()  # profiles: a's step is recorded first
    assert len(a.memory_report()) == 1 and a.memory_report()[-1].within_budget
    a.measure_memory(1)
    a(x).sum().backward()
    del a  # its waiting meter has no one to record it now
    c = te.CheckpointedSequential(_tanh_net(), budget="80%")
    c(x).sum().backward()
    with MemoryMeter("cpu"):
        with pytest.raises(te.ProfilerBusyError, match=r"a MemoryMeter \(measure_peak\) is already running"):
            MemoryMeter("cpu").__enter__()


def test_measured_steps_give_way_and_stay_due():
    # a review: two wrappers measured in one step lost one measurement without a word; a measured step inside
    # the user's own MemoryMeter stopped the training step; a profiler started while a measured step's meter
    # waited for its record raised an internal error
    from torch_exec.meter import measure_peak
    x = torch.randn(8, 16, dtype=DT)
    a, b = (te.CheckpointedSequential(_tanh_net(), budget="80%") for _ in range(2))
    b(a(x)).sum().backward()
    a.measure_memory(1)
    b.measure_memory(1)
    with pytest.warns(MemoryBudgetWarning, match="another wrapper's CPU memory meter started during it"):
        b(a(x)).sum().backward()  # a's meter runs when b's must start
    assert len(a.memory_report()) == 0 and len(b.memory_report()) == 1
    a(x).sum().backward()  # a's measurement stayed due
    assert len(a.memory_report()) == 1
    a.measure_memory(1)
    with pytest.warns(MemoryBudgetWarning, match="not measured while your torch.profiler or memory meter records"):
        measure_peak(lambda: a(x).sum().backward())  # the step runs, unmeasured
    assert len(a.memory_report()) == 1
    a(x).sum().backward()
    assert len(a.memory_report()) == 2
    a.measure_memory(1)
    a(x).sum().backward()  # measured: its meter waits for the record
    with pytest.warns(MemoryBudgetWarning, match="record was lost: a profiler started on this thread"):
        with torch.profiler.profile():
            a(x).sum().backward()
    assert len(a.memory_report()) == 2


def test_a_cpu_meter_warns_nothing():
    # torch 2.11's profiler warns at its first start without acc_events ("Profiler clears events at the end of each
    # cycle"): a line on the user's stderr from every process that measured. Once per process: a process of its own
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(te.__file__).resolve().parent.parent
    code = ("import warnings, torch; from torch_exec.meter import measure_peak; warnings.simplefilter('always'); "
            "print(measure_peak(lambda: torch.ones(1000) * 2)[1].peak)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0 and int(res.stdout.split()[-1]) > 0, res.stderr
    assert "Warning" not in res.stderr, res.stderr


def test_a_module_at_several_positions_of_a_sequential_runs_at_each():
    # named_children() yields a module once: a Linear at positions 0, 6 and 10 of 12 made 10 stages, outputs 0.44
    # off plain autograd's even without a budget (bench/repros/rv10_diff_sequential_repeated_module.py)
    def make():
        torch.manual_seed(0)
        shared = nn.Linear(32, 32)
        return nn.Sequential(shared, nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                             shared, nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), shared, nn.Tanh())
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    for least in (False, True):
        ref, model = make(), make()
        w = te.CheckpointedSequential(model, budget="100%" if least else None, backend="cpu")
        assert len(w._fns) == 12
        if least:
            w.prepare(x)
            w.replan(w.min_budget_bytes)
        out, want = w(x), ref(x)
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        out.square().sum().backward()
        want.square().sum().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)


def test_a_plain_autograd_plans_json_form_and_least_budget():
    # a review (bench/repros/rv11_docs_plain_plan_to_dict.py): a wrapper running plain autograd ("100%") had a plan
    # whose to_dict() and min_feasible_bytes raised "this plan has no chain", and whose summary read "bucket 0 B
    # (0 buckets), backend given, solved in 0.0 ms"
    from gpusolve.dp.minpeak import min_feasible_bytes
    model = te.CheckpointedSequential(mlp(), budget="100%", backend="cpu")
    model(torch.randn(8, 4, dtype=DT)).sum().backward()
    plan = model.plan
    assert plan.backend == "given"
    assert plan.min_feasible_bytes == model.min_budget_bytes > 0  # the wrapper's least, not the store-all chain's
    assert model.min_budget_bytes >= min_feasible_bytes(model._last.plan.chain)
    assert plan.to_dict()["budget_bytes"] == plan.budget_bytes
    assert "schedule given, not solved" in plan.summary() and "0 buckets" not in plan.summary()
