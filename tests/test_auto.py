"""auto_checkpoint on models that are not nn.Sequential (CPU): the wrapper is called like the model,
has its parameter and state_dict names, trains to plain autograd's losses, gradients and BatchNorm
statistics while recomputing, holds its budget as measured by the allocator, falls back to the
model's blocks when the graph cannot be captured, and says what to do when neither works."""
from __future__ import annotations

import copy
import dataclasses
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import models as A  # noqa: E402  (examples/models.py: the models written for these tests)
import torch_exec as te  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import MemoryMeter, measure_peak  # noqa: E402
from gpusolve.errors import InfeasibleBudgetError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

MODELS = ["resnet", "densenet", "tvdensenet", "transformer",
          pytest.param("gpt2", marks=pytest.mark.skipif(
              __import__("importlib").util.find_spec("transformers") is None, reason="transformers not installed"))]


def _between(wrapped, args, kwargs, fraction=0.5):
    """Prepare, then re-plan at ``fraction`` of the way from the minimum budget to plain autograd's peak:
    a budget that makes the plan recompute."""
    wrapped.prepare(*args, **kwargs)
    lo, hi = wrapped.executor.min_budget_bytes, plain_peak_bytes(wrapped.executor._last)
    assert lo < hi
    wrapped.replan(int(lo + fraction * (hi - lo)))
    plan = wrapped.plan
    recomputed = sum(op.kind.name.startswith("FWD") for op in plan.schedule) > plan_stages(wrapped)
    assert plan.feasible and recomputed, plan.summary()
    return plan


def plan_stages(wrapped) -> int:
    return wrapped.executor.chain.n


def _grads(model):
    return {n: (None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}


def _step_both(wrapped, reference, args, kwargs, loss_of, seed: int):
    """One step of the wrapper and of plain autograd on ``reference`` from the same RNG state: the losses
    equal bit for bit, then both backwards."""
    torch.manual_seed(seed)
    loss = loss_of(wrapped(*args, **kwargs))
    torch.manual_seed(seed)
    ref_loss = loss_of(reference(*args, **kwargs))
    torch.testing.assert_close(loss, ref_loss, rtol=0, atol=0)
    loss.backward()
    ref_loss.backward()


@pytest.fixture(params=MODELS)
def case(request):
    model, args, kwargs, loss_of = A.make(request.param)
    model.train()
    return request.param, model, args, kwargs, loss_of


def test_names_and_state_dict_are_the_models(case):
    name, model, args, kwargs, loss_of = case
    wrapped = te.auto_checkpoint(model, "1GiB", sample=(args, kwargs) if False else None)
    assert list(wrapped.state_dict()) == list(model.state_dict())
    assert [(n, id(p)) for n, p in wrapped.named_parameters()] == [(n, id(p)) for n, p in model.named_parameters()]
    assert [n for n, _ in wrapped.named_buffers()] == [n for n, _ in model.named_buffers()]
    wrapped.prepare(*args, **kwargs)  # capturing and profiling register nothing
    assert list(wrapped.state_dict()) == list(model.state_dict())
    other, *_ = A.make(name, seed=1)
    wrapped.load_state_dict(other.state_dict())   # strict, both ways
    other.load_state_dict(wrapped.state_dict())
    for key, value in other.state_dict().items():
        assert torch.equal(value, model.state_dict()[key]), key


def test_trains_like_plain_autograd_while_recomputing(case):
    name, model, args, kwargs, loss_of = case
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1GiB")
    _between(wrapped, args, kwargs)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(2):
        torch.manual_seed(10 + step)
        out = wrapped(*args, **kwargs)
        torch.manual_seed(10 + step)
        ref_out = reference(*args, **kwargs)
        assert type(out) is type(ref_out)
        if isinstance(out, dict) or dataclasses.is_dataclass(out):
            assert list(out.keys()) == list(ref_out.keys())
        loss, ref_loss = loss_of(out), loss_of(ref_out)
        torch.testing.assert_close(loss, ref_loss, rtol=0, atol=0)
        loss.backward()
        ref_loss.backward()
        got, want = _grads(model), _grads(reference)
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-7, msg=f"{name}: grad of {key}")
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for (key, b), (_, ref_b) in zip(model.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(b, ref_b, rtol=1e-5, atol=1e-7, msg=f"{name}: buffer {key}")
    for (key, p), (_, ref_p) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p, ref_p, rtol=1e-5, atol=1e-6, msg=f"{name}: parameter {key}")


def _measured_step(wrapped, args, kwargs, loss_of):
    """Parameter gradients allocated, one step, then one more under the CPU meter: (the step, its reading)."""
    for p in wrapped.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        loss_of(wrapped(*args, **kwargs)).backward()
    step()
    _, reading = measure_peak(step)
    return step, reading


@pytest.mark.parametrize("name", ["resnet", "tvdensenet", "transformer"])
def test_measured_peak_holds_the_budget(name):
    model, args, kwargs, loss_of = A.make(name)
    wrapped = te.auto_checkpoint(model, "1GiB")
    plan = _between(wrapped, args, kwargs, fraction=0.3)
    _, reading = _measured_step(wrapped, args, kwargs, loss_of)
    assert reading.peak <= plan.budget_bytes, (reading.peak, plan.budget_bytes)


@pytest.mark.parametrize("name", ["resnet", "transformer", MODELS[-1]])
def test_measured_peak_holds_the_budget_when_the_caller_keeps_the_output(name):
    # Note [The caller holds a_N]: the usual loop keeps `out` through the backward. Before the
    # output was reserved, both went over at the least budget: resnet by 88 B (its logits), the
    # transformer by 36 484 B (logits returned beside the loss). GPT-2's loss stage passes on the
    # logits its head made (Note [Outputs passed through]): before the fused stage's output counted
    # them, they were counted twice and the measured peak was 0.89 x the prediction at 0.3.
    model, args, kwargs, loss_of = A.make(name)
    wrapped = te.auto_checkpoint(model, "1GiB")
    for fraction in (0.0, 0.3):
        plan = _between(wrapped, args, kwargs, fraction=fraction)
        for p in wrapped.parameters():
            p.grad = torch.zeros_like(p)

        def step():
            out = wrapped(*args, **kwargs)
            loss_of(out).backward()
            del out  # only after the backward
        step()
        _, reading = measure_peak(step)
        # resnet's loss is the caller's (cross-entropy on the returned logits): the loss tensor and its seed
        # gradient live through the backward outside the model and its budget, 2 x 4 B
        outside = 8 if name == "resnet" else 0
        assert reading.peak <= plan.budget_bytes + outside, (fraction, reading.peak, plan.budget_bytes)
        # GPT-2's reserve still counts an RNG state for each of its dropout stages (5 KB each on the CPU)
        # whether or not the plan re-runs it: a few % of this tiny model (0.946-0.965 measured)
        least = 0.93 if name == "gpt2" else 0.95
        assert reading.peak >= least * plan.predicted_peak_bytes, (fraction, reading.peak, plan.predicted_peak_bytes)


@pytest.mark.parametrize("preallocated", [False, True], ids=["grads-none", "grads-allocated"])
def test_measured_peak_holds_the_least_budget_under_autocast(preallocated):
    """bfloat16 autocast: the first convolution's backward (its input needs no gradient) takes workspace
    the size of the image batch. The profile's reading was taken as if it held the input's gradient,
    and the step went 46 % over its least budget (135 592 B and 140 216 B measured, 92 624 B budget).
    The loss is inside the model: what a caller's own criterion allocates is outside every budget."""
    model, args, kwargs, loss_of = A.make("resnet_loss")
    wrapped = te.auto_checkpoint(model, "100%")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        wrapped.prepare(*args, **kwargs)
    wrapped.replan(wrapped.executor.min_budget_bytes)
    for p in model.parameters():
        p.grad = torch.zeros_like(p) if preallocated else None
    wrapped.measure_memory(1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = wrapped(*args, **kwargs)
    loss_of(out).backward()
    record = wrapped.memory_report()[-1]
    assert record.within_budget, (record.beyond_param_grads, record.budget)
    assert record.beyond_param_grads >= 0.9 * record.predicted_peak, (record.beyond_param_grads, record.predicted_peak)


def test_measure_memory_arms_the_next_steps_whatever_their_signature():
    """measure_memory(n) before the first call, and across a new input signature: the next n steps are
    measured (they were not: only captures that existed were armed), and memory_report() has them all."""
    model, args, kwargs, loss_of = A.make("transformer")
    wrapped = te.auto_checkpoint(model, "75%")
    wrapped.measure_memory(3)
    ids = args[0]
    for batch in (ids, ids, ids[:2]):  # the third step: a new batch size, a new capture
        loss_of(wrapped(batch, targets=batch)).backward()
    report = wrapped.memory_report()
    assert len(report) == 3 and all(r.within_budget for r in report), report
    loss_of(wrapped(ids, targets=ids)).backward()  # armed for 3 steps only
    assert len(wrapped.memory_report()) == 3


class _ReturnsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.ReLU())], nn.Linear(64, 128))

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.layers(x), y), x  # the input beside the loss


@pytest.mark.parametrize("caller_keeps", ["output", "loss"])
def test_an_output_returning_the_input_reserves_nothing_for_it(caller_keeps):
    """The input the model returns is the caller's tensor, outside every budget: reserved as part of a_N,
    the least budget was above plain autograd's measured peak, and "100%" raised InfeasibleBudgetError
    with caller_keeps="loss" (a fuzzing helper's repro, bench/repros/returned_input.py)."""
    torch.manual_seed(0)
    model = _ReturnsInput()
    x, y = torch.randn(32, 64, requires_grad=True), torch.randint(0, 128, (32,))
    wrapped = te.auto_checkpoint(model, "100%", caller_keeps=caller_keeps)
    wrapped.prepare(x, y)
    entry = wrapped.executor._last
    reference = te.executor.reference_peak_bytes(entry)[0]
    assert wrapped.executor.min_budget_bytes <= reference
    wrapped.measure_memory(1)
    loss, _ = wrapped(x, y)
    loss.backward()
    assert wrapped.memory_report()[-1].within_budget


def test_a_smaller_last_batch_below_its_least_percentage_runs_within_the_others_budget():
    """A percentage resolves per input signature: the transformer's least budget is a larger share of
    plain autograd's peak at batch 1 than at batch 8 ("36%" lies between), so it raised
    InfeasibleBudgetError at an epoch's last, smaller batch. It now runs within the budget batch 8
    resolved to, saying so; alone, it still raises."""
    from gpusolve import FallbackWarning, InfeasibleBudgetError
    model, args, kwargs, loss_of = A.make("transformer", batch=8)
    ids = args[0]
    wrapped = te.auto_checkpoint(model, "36%")
    loss_of(wrapped(ids, targets=ids)).backward()
    ceiling = wrapped.plan.budget_bytes
    wrapped.measure_memory(1)
    with pytest.warns(FallbackWarning, match="below its least budget"):
        loss_of(wrapped(ids[:1], targets=ids[:1])).backward()
    assert wrapped.plan.budget_bytes == ceiling
    assert any("below its least budget" in note for note in wrapped.plan.notes)
    assert wrapped.memory_report()[-1].within_budget
    alone = te.auto_checkpoint(A.make("transformer", batch=8)[0], "36%")
    with pytest.raises(InfeasibleBudgetError, match="needs at least"):
        alone(ids[:1], targets=ids[:1])


def test_integer_inputs_profile_the_first_stages_backward():
    model, args, kwargs, loss_of = A.make("transformer")
    wrapped = te.auto_checkpoint(model, "1GiB")
    wrapped.prepare(*args, **kwargs)
    first = wrapped.executor._last.profile["stages"][0]
    assert args[0].dtype == torch.int64
    assert first["t_bwd"] > 0 and first["bwd_peak"] > 0  # the backward reaches the embeddings' weights


def test_plain_paths_and_outputs():
    model, args, kwargs, loss_of = A.make("transformer")
    model.eval()
    wrapped = te.auto_checkpoint(model, None)
    torch.testing.assert_close(wrapped(*args, **kwargs)["loss"], model(*args, **kwargs)["loss"])
    wrapped = te.auto_checkpoint(model, "1GiB")
    with torch.no_grad():
        torch.testing.assert_close(wrapped(*args, **kwargs)["logits"], model(*args, **kwargs)["logits"])
    assert wrapped.plan is None  # nothing captured without grad
    assert wrapped.wte is model.wte  # attributes reach the model


def test_train_and_eval_are_captured_separately():
    model, args, kwargs, loss_of = A.make("transformer")
    wrapped = te.auto_checkpoint(model, "1GiB")
    wrapped.eval()
    assert not model.training and all(not m.training for m in model.modules())
    loss = loss_of(wrapped(*args, **kwargs))
    torch.testing.assert_close(loss, loss_of(model(*args, **kwargs)))  # no dropout in eval: deterministic
    wrapped.train()
    assert model.training
    wrapped(*args, **kwargs)
    assert len(wrapped._captures) == 2


def test_blocks_fallback_when_the_graph_cannot_be_captured():
    model, args, kwargs, loss_of = A.make("gated")
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1GiB")
    with pytest.warns(UserWarning, match="using the model's blocks 'blocks'"):
        _between(wrapped, args, kwargs)
    assert wrapped.capture.method == "blocks"
    assert wrapped.executor.static_stages is False  # Python blocks: their drops are counted held in planning
    for step in range(2):
        _step_both(wrapped, reference, args, kwargs, loss_of, step)
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=key)
    # Called directly, the model is untouched by the substitution.
    assert "forward" not in model.blocks[0].__dict__


class _RoundSTE(torch.autograd.Function):
    """round() forward, identity backward: a straight-through estimator (quantisation-aware training)."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _QuantBlock(nn.Module):
    def __init__(self, ste: bool):
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.ste = ste

    def forward(self, x):
        x = torch.tanh(self.linear(x)) * 4
        return _RoundSTE.apply(x) if self.ste else x


class _QuantBlocks(nn.Module):
    def __init__(self, ste: bool = True):
        super().__init__()
        self.blocks = nn.ModuleList(_QuantBlock(ste) for _ in range(4))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.pow(2).mean()


def test_custom_autograd_functions_are_not_captured_by_export():
    # Note [Custom autograd Functions]: export dropped the estimator's backward, and every layer before
    # the last rounding got a zero gradient without a word; the model's own code runs them now
    torch.manual_seed(0)
    model = _QuantBlocks()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 8)
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu")
    with pytest.warns(UserWarning, match=r"custom autograd Functions whose backward torch.export would drop "
                                         r"\(Note \[Custom autograd Functions\]\): test_auto\._RoundSTE: its backward "
                                         r"is not the derivative of its forward"):
        loss = wrapped(x)
    assert wrapped.capture.method == "blocks"
    loss.backward()
    reference(x).backward()
    assert model.blocks[0].linear.weight.grad.abs().max() > 0
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=key)
    # without them the same model is captured by export
    wrapped = te.auto_checkpoint(_QuantBlocks(ste=False), "1GiB", backend="cpu")
    wrapped.prepare(x)
    assert wrapped.capture.method == "export"


class _ByHand(nn.Module):
    def __init__(self):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        for linear in self.linears:
            x = _GeluByHand.apply(linear(x))
        return x.pow(2).mean()


def test_custom_autograd_functions_whose_backward_is_the_derivative_are_captured():
    # Note [Custom autograd Functions]: checked against the derivative of its forward, the Function passes
    torch.manual_seed(0)
    model, x = _ByHand(), torch.randn(4, 8)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu")
    wrapped(x).backward()
    reference(x).backward()
    assert wrapped.capture.method == "export"
    assert wrapped.executor.static_stages is True  # one graph per stage: checked drops freed in planning
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=key)
    # the check itself, on both kinds of Function (the second with a derivative that is not its backward's)
    from torch_exec.auto import _backward_differs
    assert _backward_differs(_GeluByHand, (torch.randn(3, 5),), {}) == ""
    assert _backward_differs(_RoundSTE, (4 * torch.randn(3, 5),), {}) == "its backward is not the derivative of its forward"


class _Quantize(torch.autograd.Function):
    """Calls the estimator in its forward: its own check would go through the estimator's backward."""

    @staticmethod
    def forward(ctx, x, scale):
        return _RoundSTE.apply(x / scale) * scale

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _NoWeightGrad(torch.autograd.Function):
    """Reads a module's weight it is not given as a tensor, and gives it no gradient."""

    @staticmethod
    def forward(ctx, x, linear):
        ctx.linear = linear
        return linear(x)

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.linear.weight, None


class _ReluInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        x.clamp_(min=0)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return grad * (y > 0)


class _ScaleByKeyword(torch.autograd.Function):
    @staticmethod
    def forward(x, scale=1.0):
        return x * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


def _apply_takes_keywords() -> bool:
    """Whether torch's ``Function.apply`` takes keyword arguments (torch 2.13 does; torch 2.11 raised "apply() takes no
    keyword arguments", in the model's own forward before anything of ours ran)."""
    try:
        _ScaleByKeyword.apply(torch.ones(1), scale=2.0)
    except TypeError:
        return False
    return True


class _GeluByHand(torch.autograd.Function):
    """transformers' BLOOM's GELU, its derivative written by hand."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return grad * (0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t))


class _Calls(nn.Module):
    def __init__(self, call, dtype=torch.float32):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16).to(dtype), nn.Linear(16, 16).to(dtype)
        self.call = call

    def forward(self, x):
        return self.call(self, torch.tanh(self.a(x))).float().pow(2).mean()


@pytest.mark.parametrize("case, call, dtype, why", [
    ("nested", lambda m, h: _Quantize.apply(h, 0.5), torch.float32, "its forward runs other custom Functions"),
    ("closed over", lambda m, h: _NoWeightGrad.apply(h, m.b), torch.float32, "its forward reads tensors it is not given"),
    ("in place", lambda m, h: _ReluInPlace.apply(h - 0.2), torch.float32, ""),
    ("keyword", lambda m, h: _ScaleByKeyword.apply(h, scale=2.0), torch.float32, ""),
    ("bfloat16", lambda m, h: _GeluByHand.apply(h), torch.bfloat16, ""),
    ("float16", lambda m, h: _GeluByHand.apply(h), torch.float16, ""),
])
def test_custom_autograd_function_checks(case, call, dtype, why):
    # a review's cases (Note [Custom autograd Functions]): the first two passed the check and their gradients came
    # out wrong under export; the others were refused though their backward is the derivative
    from torch_exec.auto import _custom_functions
    if case == "keyword" and not _apply_takes_keywords():
        pytest.skip("this torch's Function.apply takes no keyword arguments: no model calls it so")
    torch.manual_seed(0)
    model, x = _Calls(call, dtype), torch.randn(8, 16, dtype=dtype)
    refused = _custom_functions(model, (x,), {})
    assert (len(refused) == 1 and why in refused[0]) if why else refused == [], refused


class _CtxVariable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, holder):
        ctx.variable = holder.weight  # a node's own attribute, not the leaf an AccumulateGrad adds into
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None


def test_a_functions_ctx_attribute_is_not_a_leaf_of_the_graph():
    # _util.accumulated_leaf: read by attribute, a Function's ctx.variable counted as a leaf its graph reaches
    from torch_exec.auto import _graph_reaches
    holder = nn.Linear(3, 3)
    out = _CtxVariable.apply(torch.randn(3, requires_grad=True), holder)
    assert not _graph_reaches([out], {id(holder.weight)})
    assert _graph_reaches([holder(out)], {id(holder.weight)})


def test_custom_ops_keep_their_backward_under_export():
    # torch.library.custom_op's register_autograd runs through a Function; export keeps the op and its backward
    @torch.library.custom_op("gpusolve_test::sine", mutates_args=())
    def sine(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)

    @sine.register_fake
    def _(x):
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * torch.cos(x)
    sine.register_autograd(backward, setup_context=setup)
    from torch_exec.auto import _custom_functions
    model = _Calls(lambda m, h: sine(m.b(h)))
    assert _custom_functions(model, (torch.randn(8, 16),), {}) == []


def test_custom_autograd_functions_without_blocks_are_refused_by_name():
    class Lone(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.b(_RoundSTE.apply(self.a(x))).sum()
    with pytest.raises(te.CaptureError, match=r"custom autograd Functions whose backward torch.export would drop "
                                              r"\(Note \[Custom autograd Functions\]\): test_auto\._RoundSTE"):
        te.auto_checkpoint(Lone(), "1GiB", backend="cpu").prepare(torch.randn(2, 8))


def test_reentrant_checkpoint_is_refused_with_the_remedy():
    from torch.utils.checkpoint import checkpoint

    class Reentrant(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.c(checkpoint(self.b, self.a(x), use_reentrant=True)).sum()
    with pytest.raises(te.CaptureError, match="call the layers without torch.utils.checkpoint"):
        te.auto_checkpoint(Reentrant(), "1GiB", backend="cpu").prepare(torch.randn(2, 8))


class _PairBlock(nn.Module):
    """transformers' DeBERTa-v2 layer: returns (hidden, attention map or None)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, mask, output_attentions=False):
        h = torch.tanh(self.linear(x)) * mask
        return h, (h.softmax(-1) if output_attentions else None)


class _Unpacking(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList(_PairBlock() for _ in range(4))

    def forward(self, x, alternate=False):
        mask = torch.ones(8)
        masks = [mask, mask * 0.5] if alternate else [mask, mask]
        for i, block in enumerate(self.layer):
            x, _ = block(x, masks[i % 2])
        return x.pow(2).mean()


def test_blocks_fallback_hands_back_the_other_items_of_a_tuple():
    # a 1-tuple was returned: "not enough values to unpack (expected 2, got 1)"
    torch.manual_seed(0)
    model, x = _Unpacking(), torch.randn(4, 8)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1GiB", capture="blocks", backend="cpu")
    wrapped(x).backward()
    reference(x).backward()
    assert wrapped.capture.blocks[0].name == "layer" and len(wrapped.executor.stages) == 4
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=key)


class _StatsBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.tanh(self.linear(x))
        return h, float(h.abs().mean())  # a value of the data: handed back as the first run made it, stale


def test_blocks_fallback_does_not_hand_back_values_of_the_data():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(_StatsBlock() for _ in range(3))

        def forward(self, x):
            for block in self.blocks:
                x, _ = block(x)
            return x.sum()
    with pytest.raises(te.CaptureError, match="block 0 returns float values beside its output, which the fallback "
                                              "cannot hand back"):
        te.auto_checkpoint(Model(), "1GiB", capture="blocks", backend="cpu").prepare(torch.randn(4, 8))


def test_blocks_fallback_says_why_no_list_was_taken():
    # transformers' Gemma2: sliding and full attention masks alternate between the layers
    with pytest.raises(te.CaptureError, match=r"lists tried: 'layer': block 1 gets another positional argument 1 "
                                              r"than block 0"):
        te.auto_checkpoint(_Unpacking(), "1GiB", capture="blocks", backend="cpu").prepare(torch.randn(4, 8), True)


class _ConvNetWithHead(nn.Module):
    """torchvision's MNASNet in small: convolutional features with few parameters and large activations,
    then a classifier list (dropout, a large linear layer on a vector) holding most parameters."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1), nn.ReLU())
                                      for i in range(4)])
        self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(8, 4000))

    def forward(self, x):
        return self.classifier(self.layers(x).mean((2, 3)))


def test_blocks_fallback_takes_the_list_that_makes_the_activations():
    # Note [Block fallback]: ranked by parameters, the classifier (2 stages, nothing to free) was chosen.
    model = _ConvNetWithHead()
    x = torch.randn(2, 3, 32, 32)
    assert sum(p.numel() for p in model.classifier.parameters()) > sum(p.numel() for p in model.layers.parameters())
    wrapped = te.auto_checkpoint(model, "1GiB", capture="blocks", backend="cpu")
    reference = copy.deepcopy(model)
    wrapped(x).sum().backward()
    reference(x).sum().backward()
    assert wrapped.capture.blocks[0].name == "layers"
    assert len(wrapped.executor.stages) == 4
    # each block makes a conv output and a ReLU output of 2*8*32*32 floats, 64 KiB each (not in place)
    assert "its blocks make 512.00 KiB in a forward" in " ".join(wrapped.capture.notes)
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=key)


def test_blocks_fallback_says_when_it_ranks_by_parameters(monkeypatch):
    # a model the counting mode cannot run: the lists are ranked by parameters, and the notes say so
    from torch_exec import auto

    def refuse(self, func, types, args=(), kwargs=None):
        raise RuntimeError("no dispatch modes here")
    monkeypatch.setattr(auto._BytesMade, "__torch_dispatch__", refuse)
    wrapped = te.auto_checkpoint(_ConvNetWithHead(), "1GiB", capture="blocks", backend="cpu")
    wrapped.prepare(torch.randn(2, 3, 32, 32))
    assert wrapped.capture.blocks[0].name == "classifier"
    assert ("ranked by parameters, since the forward that measures the bytes each list's blocks make raised "
            "RuntimeError: no dispatch modes here") in wrapped.capture.notes[0]


@pytest.mark.parametrize("fraction", [0.0, 0.4])
def test_blocks_fallback_holds_the_budget_over_the_whole_step(fraction):
    # Note [The rest of the model]: the gated transformer's embeddings, head and loss run as plain autograd
    # beside the blocks' chain. Counting the blocks only, the measured step went 59 336 B over the least
    # budget (361 544 B for 302 208 B) and over at every budget below plain autograd's.
    model, args, kwargs, loss_of = A.make("gated")
    with pytest.warns(UserWarning, match="its memory measured once and counted in the budget"):
        plan = _between(wrapped := te.auto_checkpoint(model, "1GiB"), args, kwargs, fraction=fraction)
    rest = wrapped.capture.rest
    assert rest.held > 0 and rest.turn > 0 and any("around the blocks" in n for n in wrapped.capture.notes)
    step, reading = _measured_step(wrapped, args, kwargs, loss_of)
    assert reading.peak <= plan.budget_bytes, (reading.peak, plan.budget_bytes)
    # the plan's count is close, not padded: the gradient of the blocks' output is counted twice (12 288 B)
    assert reading.peak >= 0.95 * plan.predicted_peak_bytes, (reading.peak, plan.predicted_peak_bytes)
    # the wrapper's own meter reads the same step, from the model's call (Note [A step measured from the model's
    # call]): the code before the blocks is seen, nothing is added as held before
    wrapped.measure_memory()
    step()
    record = wrapped.memory_report()[-1]
    assert record.held_before == 0 and record.within_budget
    assert abs(record.beyond_param_grads - reading.peak) <= 0.005 * reading.peak, (record, reading.peak)


class _WideEmbedding(nn.Module):
    """Blocks behind data-dependent control flow, and an embedding table far larger than their activations:
    its backward's dense gradient (a transient) is more than the blocks' whole step."""

    def __init__(self, vocab=20_000, width=16, n=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n))

    def forward(self, ids):
        x = self.embed(ids)
        if x.abs().max() > 1e6:  # data-dependent: torch.export cannot capture it
            x = x / 2
        for block in self.blocks:
            x = block(x)
        return x.square().mean()


def test_blocks_fallback_refuses_a_budget_below_what_the_rest_needs_alone():
    # Note [The rest of the model]: the floor is the least budget. Before it was, "100%" (plain autograd's
    # peak of the blocks plus the rest's reserves) resolved below it and raised at every percentage.
    model, ids = _WideEmbedding(), torch.randint(0, 20_000, (4, 8))
    wrapped = te.auto_checkpoint(model, "100%")
    with pytest.warns(UserWarning, match="using the model's blocks"):
        wrapped.prepare(ids)
    rest = wrapped.capture.rest
    assert rest.floor >= 20_000 * 16 * 4, rest
    assert wrapped.executor.min_budget_bytes == rest.floor == plain_peak_bytes(wrapped.executor._last)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    wrapped(ids).backward()
    _, reading = measure_peak(lambda: wrapped(ids).backward())
    assert reading.peak <= wrapped.plan.budget_bytes == rest.floor, (reading.peak, rest.floor)
    with pytest.raises(InfeasibleBudgetError, match=rf"below the {rest.floor} B the step reaches outside the "
                                                    rf"stages.*at least {rest.floor} B") as err:
        wrapped.replan(rest.floor - 1)
    assert err.value.min_bytes == rest.floor


class _GatedVariant(A.GatedTransformer):
    """The gated transformer with a BatchNorm before its blocks, and its loss per token or averaged."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.norm = nn.BatchNorm1d(32)
        self.reduction = reduction

    def forward(self, ids, targets=None):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))[None]
        x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        if x.abs().max() > 1e6:  # data-dependent: torch.export cannot capture it
            x = x / 2
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=self.reduction)


def test_blocks_fallback_capture_leaves_the_model_state_alone():
    # Finding the blocks, checking them and measuring the rest run the model: on a first call without
    # prepare(), BatchNorm's statistics were updated four times instead of once
    _, args, kwargs, _ = A.make("gated")
    torch.manual_seed(0)
    model = _GatedVariant()
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu")
    with pytest.warns(UserWarning, match="using the model's blocks"):
        wrapped(*args, **kwargs).backward()
    reference(*args, **kwargs).backward()
    assert int(model.norm.num_batches_tracked) == int(reference.norm.num_batches_tracked) == 1
    torch.testing.assert_close(model.norm.running_mean, reference.norm.running_mean, rtol=0, atol=0)
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=key)


def test_blocks_fallback_caller_keeps_loss_needs_a_scalar_output():
    # the rest of the model was measured without any backward (nothing seeded): 1.44 x over the budget
    _, args, kwargs, _ = A.make("gated")
    wrapped = te.auto_checkpoint(_GatedVariant(reduction="none"), "1GiB", caller_keeps="loss")
    with pytest.warns(UserWarning, match="using the model's blocks"), \
            pytest.raises(ValueError, match="caller_keeps='loss' but the model's output has no scalar tensor"):
        wrapped(*args, **kwargs)


class _GatedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 32)

    def forward(self, x, gate):
        return x + torch.tanh(self.linear(x)) * gate


class _SharedGate(nn.Module):
    """Blocks that share one argument beside the hidden state: a parameter itself, or a gate computed from
    parameters before them (an autograd graph the schedule cannot back-propagate into more than once)."""

    def __init__(self, computed: bool):
        super().__init__()
        self.computed = computed
        self.embed = nn.Embedding(97, 32)
        self.gate = nn.Linear(32, 32)
        self.bias = nn.Parameter(torch.ones(32))
        self.blocks = nn.ModuleList(_GatedBlock() for _ in range(4))

    def forward(self, ids):
        x = self.embed(ids)
        gate = torch.sigmoid(self.gate(x)) if self.computed else self.bias
        for block in self.blocks:
            x = block(x, gate)
        return x.square().mean()


@pytest.mark.parametrize("fraction", [0.0, 0.5])
@pytest.mark.parametrize("computed", [False, True])
def test_blocks_fallback_and_an_argument_shared_by_the_blocks(computed, fraction):
    # a computed gate crashed in the profiler ("Trying to backward through the graph a second time"), then
    # was refused; now it travels in the chain's state (Note [Block fallback]) and its gradient reaches the
    # code that made it: the gate's parameters get plain autograd's gradients
    torch.manual_seed(0)
    model, ids = _SharedGate(computed), torch.randint(0, 97, (4, 16))
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1GiB", capture="blocks", backend="cpu")
    wrapped.prepare(ids)
    lo, hi = wrapped.executor.min_budget_bytes, plain_peak_bytes(wrapped.executor._last)
    wrapped.replan(int(lo + fraction * (hi - lo)))
    step, reading = _measured_step(wrapped, (ids,), {}, lambda out: out)
    assert reading.peak <= wrapped.plan.budget_bytes, (reading.peak, wrapped.plan.budget_bytes)
    for p in model.parameters():
        p.grad = None
    wrapped(ids).backward()
    reference(ids).backward()
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        if q.grad is None:
            assert p.grad is None, key
        else:
            assert p.grad is not None, key
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=key)


class _CrossBlock(nn.Module):
    """A decoder block: reads the encoder's output and a learned scale by keyword, returns a tuple."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 32)

    def forward(self, x, memory=None, scale=None):
        return (x + torch.tanh(self.linear(x) + memory.mean(1, keepdim=True)) * scale,)


class _EncoderDecoder(nn.Module):
    """Data-dependent control flow (torch.export cannot capture it, as transformers 5.17's LayerDrop) and
    decoder blocks that all read values computed with a gradient before them: the encoder's output and
    a scale computed from a parameter."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(97, 32)
        self.encoder = nn.Sequential(nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32))
        self.log_scale = nn.Parameter(torch.zeros(()))
        self.blocks = nn.ModuleList(_CrossBlock() for _ in range(6))

    def forward(self, ids):
        x = self.embed(ids)
        if x.abs().max() > 1e6:  # data-dependent
            x = x / 2
        memory, scale = self.encoder(x), self.log_scale.exp()
        for block in self.blocks:
            x = block(x, memory=memory, scale=scale)[0]
        return x.square().mean()


@pytest.mark.parametrize("fraction", [0.0, 0.5])
def test_blocks_fallback_sends_gradients_to_what_the_blocks_read(fraction):
    # Note [Block fallback]: the encoder's output and the scale travel in the chain's state; the encoder's
    # and the scale's parameters get plain autograd's gradients, and the measured step holds its budget
    torch.manual_seed(0)
    model, ids = _EncoderDecoder(), torch.randint(0, 97, (8, 64))
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu")
    with pytest.warns(UserWarning, match="using the model's blocks 'blocks'"):
        plan = _between(wrapped, (ids,), {}, fraction=fraction) if fraction else wrapped.prepare(ids)
    if not fraction:
        wrapped.replan(wrapped.executor.min_budget_bytes)
        plan = wrapped.plan
    assert wrapped.capture.method == "blocks"
    _, reading = _measured_step(wrapped, (ids,), {}, lambda out: out)
    assert reading.peak <= plan.budget_bytes, (reading.peak, plan.budget_bytes)
    for p in model.parameters():
        p.grad = None
    wrapped(ids).backward()
    reference(ids).backward()
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert p.grad is not None, key
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=key)


class _RouterAux(nn.Module):
    """Each block's gate output is recorded by a hook and read by an auxiliary loss at the end (as
    transformers' MoE models do with output_router_logits=True): values made inside the blocks reach the
    output beside the blocks' own output."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(97, 32)
        self.blocks = nn.ModuleList(_GatedBlock() for _ in range(4))
        self.recorded = []
        for block in self.blocks:
            block.linear.register_forward_hook(lambda m, a, out: self.recorded.append(out))

    def forward(self, ids):
        self.recorded = []
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, 1.0)
        return x.square().mean() + 0.01 * sum(r.square().mean() for r in self.recorded)


def test_blocks_fallback_refuses_values_made_inside_the_blocks():
    # the block fallback ran such a model and raised "Trying to backward through the graph a second time"
    # in the middle of a training step, at every budget below plain autograd's peak
    wrapped = te.auto_checkpoint(_RouterAux(), "1GiB", capture="blocks", backend="cpu")
    with pytest.raises(te.CaptureError, match=r"outputs read values made inside the blocks of 'blocks' other than "
                                              r"the last block's output"):
        wrapped(torch.randint(0, 97, (4, 16)))


class _Routed(nn.Module):
    """A mixture of experts' shape: each block's router logits (4 per token, small beside the block's
    activations) are kept for an auxiliary loss read at the end."""

    def __init__(self, layers: int = 6):
        super().__init__()
        self.embed = nn.Embedding(97, 32)
        self.routers = nn.ModuleList(nn.Linear(32, 4) for _ in range(layers))
        self.ups = nn.ModuleList(nn.Linear(32, 128) for _ in range(layers))
        self.downs = nn.ModuleList(nn.Linear(128, 32) for _ in range(layers))

    def forward(self, ids):
        x, logits = self.embed(ids), []
        for router, up, down in zip(self.routers, self.ups, self.downs):
            logits.append(router(x))
            x = x + down(torch.tanh(up(x)))
        return x.square().mean() + 0.01 * sum(r.softmax(-1).square().mean() for r in logits)


def test_values_read_late_are_cut_through_and_hold_the_budget():
    # Note [Values read late]: a mixture of experts' router logits kept for its auxiliary loss left 3 stages
    # and a least budget of 94.8 % of plain autograd's peak (transformers' Mixtral, 8 layers), without a word
    torch.manual_seed(0)
    model = _Routed()
    plain, other = copy.deepcopy(model), copy.deepcopy(model)
    ids = torch.randint(0, 97, (4, 16), generator=torch.Generator().manual_seed(0))
    narrow = te.auto_checkpoint(other, "1GiB", capture="export", backend="cpu")
    import torch_exec.auto as auto
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(auto, "LONG_LIVED_CROSSING", auto.MAX_CROSSING)  # as before: one value across a cut
        with pytest.warns(UserWarning, match=r"few places to cut: \w+ \(made in routers\.0\) is read again "
                                             r"at the end and crosses \d+ of the \d+ points"):
            narrow.prepare(ids)
    wrapped = te.auto_checkpoint(model, "1GiB", capture="export", backend="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped.prepare(ids)
    assert not [w for w in caught if "few places to cut" in str(w.message)]
    assert any("values across a cut instead" in n for n in wrapped.capture.notes), wrapped.capture.notes
    assert wrapped.executor.chain.n > narrow.executor.chain.n
    least = wrapped.executor.min_budget_bytes
    assert least < 0.8 * narrow.executor.min_budget_bytes, (least, narrow.executor.min_budget_bytes)
    _holds_least_and_matches(wrapped, least, model, plain, ids)


def _holds_least_and_matches(wrapped, least, model, plain, ids):
    """A step at ``least`` holds it, and the gradients equal plain autograd's on ``plain``."""
    wrapped.replan(least)
    _, reading = _measured_step(wrapped, (ids,), {}, lambda out: out)
    assert reading.peak <= wrapped.plan.budget_bytes, (reading.peak, wrapped.plan.budget_bytes)
    for m in (model, plain):
        m.zero_grad(set_to_none=True)
    wrapped(ids).backward()
    plain(ids).backward()
    for (key, p), q in zip(model.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=key)


class _Converted(nn.Module):
    """transformers' XLNet: every layer converts the position embedding it reads to its own dtype (a
    conversion that changes nothing), so export makes one value per layer out of it."""

    def __init__(self, width: int = 32, layers: int = 8):
        super().__init__()
        self.embed = nn.Embedding(97, width)
        self.pos = nn.Parameter(torch.randn(16, width))
        self.ups = nn.ModuleList(nn.Linear(width, 4 * width) for _ in range(layers))
        self.downs = nn.ModuleList(nn.Linear(4 * width, width) for _ in range(layers))

    def forward(self, ids):
        x, r = self.embed(ids), torch.tanh(self.pos)
        for up, down in zip(self.ups, self.downs):
            r = r.type(x.dtype)
            x = x + down(torch.tanh(up(x + r)))
        return x.square().mean()


def test_values_read_late_through_conversions_that_change_nothing():
    # Note [Values read late]: each layer's r.type(x.dtype) was a node of its own, none crossing enough points
    # to be seen as read late: 2 stages and a least budget of 3.2 x this one, without a word
    torch.manual_seed(0)
    model = _Converted()
    plain = copy.deepcopy(model)
    ids = torch.randint(0, 97, (4, 16), generator=torch.Generator().manual_seed(0))
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu")
    wrapped.prepare(ids)
    assert any("values across a cut instead" in n for n in wrapped.capture.notes), wrapped.capture.notes
    assert wrapped.executor.chain.n >= 8
    _holds_least_and_matches(wrapped, wrapped.executor.min_budget_bytes, model, plain, ids)


class _LongSource(nn.Module):
    """An encoder over a long source whose output each layer of a decoder over 4 tokens attends to (a
    review's case): the values read late are large beside what the layers reading them make."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.embed = nn.Embedding(97, width)
        self.ups = nn.ModuleList(nn.Linear(width, 4 * width) for _ in range(8))
        self.downs = nn.ModuleList(nn.Linear(4 * width, width) for _ in range(8))

    def block(self, i, x):
        return x + self.downs[i](torch.tanh(self.ups[i](x)))

    def forward(self, ids):
        e = self.embed(ids)
        for i in range(2):
            e = self.block(i, e)
        x = self.embed(ids[:, :4])
        for i in range(2, 8):
            x = self.block(i, x + torch.softmax(x @ e.transpose(1, 2) / 8, -1) @ e)
        return x.square().mean()


def test_values_read_late_are_not_cut_through_where_that_plans_higher(monkeypatch):
    # Note [Values read late]: the chain cut with up to 64 values across a cut was taken for having more cuts;
    # here its least budget came out 14 % above the one-value chain's (8 388 616 B against 7 340 040 B)
    import torch_exec.auto as auto
    ids = torch.randint(0, 97, (8, 256), generator=torch.Generator().manual_seed(0))
    least = []
    for limit in (auto.MAX_CROSSING, auto.LONG_LIVED_CROSSING):
        monkeypatch.setattr(auto, "LONG_LIVED_CROSSING", limit)
        torch.manual_seed(0)
        wrapped = te.auto_checkpoint(_LongSource(), "1TiB", capture="export", backend="cpu")
        wrapped.prepare(ids)
        least.append(wrapped.executor.min_budget_bytes)
    assert least[1] <= least[0], least
    assert any("not cut with up to 64 values" in n for n in wrapped.capture.notes), wrapped.capture.notes


def test_a_value_read_late_that_blocks_most_cuts_is_warned_about(monkeypatch):
    # more values read late than LONG_LIVED_CROSSING: the capture still says why the least budget is high
    import torch_exec.auto as auto
    monkeypatch.setattr(auto, "LONG_LIVED_CROSSING", 2)
    wrapped = te.auto_checkpoint(_RouterAux(), "1GiB", capture="export", backend="cpu")
    with pytest.warns(UserWarning, match=r"few places to cut: \w+ \(made in blocks\.\d\.linear\) is read again at "
                                         r"the end and crosses \d+ of the \d+ points where a cut could go \(a cut "
                                         r"takes at most 2 values\)"):
        wrapped.prepare(torch.randint(0, 97, (4, 16)))
    assert any("few places to cut" in n for n in wrapped.capture.notes)
    model, args, kwargs, _ = A.make("transformer")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        te.auto_checkpoint(model, "1GiB", backend="cpu").prepare(*args, **kwargs)
    assert not [w for w in caught if "few places to cut" in str(w.message)]


def test_prepare_under_inference_mode_says_why_it_cannot():
    # it raised "Inference tensors do not track version counter"
    model, args, kwargs, _ = A.make("transformer")
    sequential = te.CheckpointedSequential(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), budget="1GiB", backend="cpu")
    for prepare, sample in ((te.auto_checkpoint(model, "1GiB", backend="cpu").prepare, (args, kwargs)),
                            (sequential.prepare, ((torch.randn(2, 4),), {}))):
        with torch.inference_mode(), pytest.raises(RuntimeError, match=r"prepare\(\) profiles a training step .* "
                                                                        r"torch.inference_mode\(\)"):
            prepare(*sample[0], **sample[1])


def test_many_input_signatures_are_warned_about():
    # a number that changes every step (transformers' num_items_in_batch as an int) captured, profiled and
    # solved the model again on every step, silently
    model, ids = _SharedGate(computed=False), torch.randint(0, 97, (4, 16))
    model.forward = lambda ids, scale=1.0: _SharedGate.forward(model, ids) * scale
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(te.auto.MANY_CAPTURES):
            wrapped(ids, scale=1.0 + step)
    many = [str(w.message) for w in caught if "input signatures captured" in str(w.message)]
    assert len(many) == 1 and "differs from the one before in argument 'scale' (value)" in many[0], many


def test_no_chain_names_the_manual_route():
    wrapped = te.auto_checkpoint(A.Tangled(), "1GiB")
    with pytest.raises(te.CaptureError, match=r"(?s)torch.export could not capture.*no nn.ModuleList.*"
                                              r"CheckpointedSequential\(stages"):
        wrapped(torch.randn(2, 8))


def test_profiling_leaves_model_state_alone():
    model, args, kwargs, loss_of = A.make("resnet")
    for p in model.parameters():
        p.grad = torch.full_like(p, 3.0)
    before = copy.deepcopy(model.state_dict())
    grads = {n: p.grad for n, p in model.named_parameters()}
    rng = torch.get_rng_state()
    te.auto_checkpoint(model, "1GiB", sample=args)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key  # BatchNorm statistics and num_batches_tracked included
    assert all(p.grad is grads[n] and bool((p.grad == 3).all()) for n, p in model.named_parameters())
    assert torch.equal(torch.get_rng_state(), rng)


@pytest.mark.skipif(__import__("importlib").util.find_spec("transformers") is None, reason="transformers not installed")
def test_gpt2_use_cache_turned_off_with_a_note():
    model = A.gpt2()
    ids = torch.randint(0, 101, (2, 16))
    wrapped = te.auto_checkpoint(model, "1GiB")
    with pytest.warns(UserWarning, match="use_cache=False"):
        out = wrapped(ids, labels=ids)
    out.loss.backward()
    assert out.past_key_values is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        wrapped(ids, labels=ids, use_cache=False)


TRAIN = Path(__file__).resolve().parent.parent / "examples" / "train.py"


@pytest.mark.parametrize("flags", [["--model", "nope"], ["--budget", "-5GiB"], ["--budget", "150%"], ["--steps", "x"]])
def test_train_example_reports_bad_flags_in_one_line(flags):
    import subprocess
    done = subprocess.run([sys.executable, str(TRAIN), *flags], capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("USDT")]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("train.py: error:"), done.stderr
    assert "Traceback" not in done.stderr


def test_train_example_trains_a_model_by_name_with_a_percentage_budget():
    import subprocess
    done = subprocess.run([sys.executable, str(TRAIN), "--model", "transformer", "--budget", "80%", "--steps", "2",
                           "--batch", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "captured with torch.export" in done.stdout and "final loss" in done.stdout
    assert "budget 80% of plain autograd's peak" in done.stdout


@pytest.mark.parametrize("budget", ["abc", "-5GiB", "150%", float("nan")])
def test_bad_budget_fails_at_the_call_before_any_capture(budget):
    model, *_ = A.make("resnet")
    with pytest.raises(ValueError, match="budget"):
        te.auto_checkpoint(model, budget)


# ---------------------------------------------------------------------------- side values (Note [Cut points])
def test_side_bytes_count_each_new_storage_once():
    from torch_exec.auto import side_nbytes
    x = torch.randn(4, 8)                       # an input
    buf = torch.ones(64)                        # a buffer of the model
    mask = torch.rand(4, 8) > 0.5               # made by the prologue: 32 B
    pos = torch.arange(8)                       # made by the prologue: 64 B
    values = [x, x[:, :2], mask, mask[:, :, None].expand(4, 8, 1000), pos, pos[None], buf[:8], None, 3]
    assert side_nbytes(values, [x], [("buf", buf)]) == 32 + 64


class _MaskedBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, h, m, s):
        return torch.where(m, torch.tanh(self.lin(h)), h) * s


class _Masked(nn.Module):
    """A prologue that makes a mask from the lengths and hands every block a wide view of it (expand)
    and a slice of a buffer: views that hold nothing of their own."""

    def __init__(self, width=256, depth=6):
        super().__init__()
        self.width = width
        self.blocks = nn.ModuleList(_MaskedBlock(width) for _ in range(depth))
        self.register_buffer("scale", torch.linspace(0.5, 1.0, 2 * width))

    def forward(self, x, lengths):
        mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
        m = mask[:, :, None].expand(-1, -1, self.width)
        s = self.scale[:self.width]
        for block in self.blocks:
            x = block(x, m, s)
        return x.square().mean()


def test_side_views_are_not_counted_and_the_prediction_is_tight():
    """Before, each side value counted its own numel: the expanded mask 16 KiB and the buffer slice
    1 KiB, 17.8 KiB in all for 192 B of new storage, 3-4 % of this model's predicted peak."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = _Masked()
    x, lengths = torch.randn(4, 16, 256), torch.tensor([16, 10, 5, 12])
    wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu")
    wrapped.prepare(x, lengths)
    assert wrapped.capture.method == "export"
    # the (4, 16) bool mask; the arange(16) it is made from is freed inside the prologue (Note [Side values
    # nothing reads]), whose peak (both) is the floor
    assert wrapped.capture.side_bytes == 4 * 16
    assert wrapped.capture.prologue_peak >= 16 * 8 + 4 * 16
    ex = wrapped.executor
    lo, hi = ex.min_budget_bytes, plain_peak_bytes(ex._last)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        wrapped(x, lengths).backward()
    for fraction in (0.0, 0.5):
        wrapped.replan(int(lo + fraction * (hi - lo)))
        step()
        _, reading = measure_peak(step)
        predicted = wrapped.plan.predicted_peak_bytes
        assert reading.peak <= wrapped.plan.budget_bytes
        assert reading.peak >= 0.98 * predicted, (fraction, reading.peak, predicted)


def test_two_values_across_a_cut_into_a_cat_hold_the_least_budget(monkeypatch):
    # Note [Segment inputs] in torch_exec/executor.py: with two values allowed across a cut, a DenseNet layer
    # is cut between its convolution and its cat; the cat's backward hands its input a slice of its gradient.
    # A leaf's AccumulateGrad copied that slice with the whole gradient alive: 657 576 B measured at the least
    # budget, 575 808 B (bench/results/max_crossing_cpu.md).
    import torch_exec.auto as auto
    monkeypatch.setattr(auto, "MAX_CROSSING", 2)
    model, args, kwargs, loss_of = A.make("densenet")
    wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu")
    wrapped.prepare(*args, **kwargs)
    wrapped.replan(wrapped.executor.min_budget_bytes)
    _, reading = _measured_step(wrapped, args, kwargs, loss_of)
    assert reading.peak <= wrapped.plan.budget_bytes, (reading.peak, wrapped.plan.budget_bytes)


def test_parameters_unfrozen_after_the_first_call_get_their_gradients():
    """Gradual unfreezing: parameters frozen when the graph was captured are data to it (computed without
    grad). Unfrozen later, they got no gradient and nothing said so (a review's BERT classifier: all 39
    encoder parameters' .grad None): which parameters require grad is part of a capture's signature."""
    model, args, kwargs, loss_of = A.make("transformer")
    names = [n for n, _ in model.named_parameters()]
    frozen = set(names[: len(names) // 2])
    for n, p in model.named_parameters():
        p.requires_grad_(n not in frozen)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "80%")
    for step, unfreeze in enumerate((False, True)):
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
            for n, p in m.named_parameters():
                p.requires_grad_(unfreeze or n not in frozen)
        _step_both(wrapped, reference, args, kwargs, loss_of, step)
        got, want = _grads(model), _grads(reference)
        assert [k for k in want if (got[k] is None) != (want[k] is None)] == [], f"step {step}"
        for key in want:
            if want[key] is not None:
                torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-7, msg=f"step {step}: {key}")
    assert len(wrapped._captures) == 2


def test_the_models_own_mode_switch_is_followed():
    """model.train() called on the model, not the wrapper (a model from from_pretrained is in eval mode
    when wrapped): each step ran the graph captured in the other mode (BatchNorm on running statistics,
    dropout off). The modules' training modes are part of a capture's signature."""
    model, args, kwargs, loss_of = A.make("densenet")
    model.eval()
    wrapped = te.auto_checkpoint(model, "80%")
    wrapped.prepare(*args, **kwargs)  # captured in eval mode
    model.train()
    reference = copy.deepcopy(model)
    _step_both(wrapped, reference, args, kwargs, loss_of, 3)
    for (key, b), (_, ref_b) in zip(model.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(b, ref_b, rtol=1e-5, atol=1e-7, msg=f"buffer {key}")  # running statistics
    model.eval()  # and back: the eval capture is kept
    with torch.no_grad():
        torch.testing.assert_close(wrapped(*args, **kwargs), reference.eval()(*args, **kwargs), rtol=0, atol=0)
    assert len(wrapped._captures) == 2


def test_a_deep_copy_trains_on_its_own_parameters():
    """copy.deepcopy of the wrapper (timm's model EMA, torch.optim.swa_utils.AveragedModel) raised on an
    unused thread lock; the copy holds its own parameters and gives the same loss."""
    model, args, kwargs, loss_of = A.make("transformer")
    wrapped = te.auto_checkpoint(model, "80%")
    twin = copy.deepcopy(wrapped)  # before the first call
    loss_of(wrapped(*args, **kwargs)).backward()
    later = copy.deepcopy(wrapped)  # and after it
    for other in (twin, later):
        assert not {id(p) for p in other.parameters()} & {id(p) for p in wrapped.parameters()}
        with torch.no_grad():
            for p, q in zip(other.parameters(), wrapped.parameters()):
                p.copy_(q)
        torch.testing.assert_close(loss_of(other(*args, **kwargs)), loss_of(wrapped(*args, **kwargs)), rtol=0, atol=0)
    averaged = torch.optim.swa_utils.AveragedModel(wrapped)
    averaged.update_parameters(wrapped)


def test_a_full_budget_runs_plain_autograd_when_the_caller_keeps_the_loss():
    """A "100%" budget is plain autograd's peak in the caller's loop: with caller_keeps="loss", the step
    keeping only the loss. The plain path was judged against the step holding every output (above it),
    so a frozen model whose chain model counts a little more than that step was refused at "100%"
    (a review's BERT linear probe: "this input needs at least 102.6%")."""
    model, args, kwargs, loss_of = A.make("gpt2")
    for p in list(model.parameters())[: len(list(model.parameters())) * 3 // 4]:
        p.requires_grad_(False)
    wrapped = te.auto_checkpoint(model, "100%", caller_keeps="loss")
    wrapped.prepare(*args, **kwargs)
    from torch_exec.executor import reference_peak_bytes
    peak, what = reference_peak_bytes(wrapped.executor._last)
    assert wrapped.plan.budget_bytes == peak < plain_peak_bytes(wrapped.executor._last) and "only the loss" in what
    assert any("plain autograd fits" in note for note in wrapped.plan.notes), wrapped.plan.notes
    wrapped.measure_memory()
    loss_of(wrapped(*args, **kwargs)).backward()
    record = wrapped.memory_report()[-1]
    assert record.within_budget, record


def test_cpu_timing_warning_once_across_input_signatures():
    # Note [Warnings once per process]: each new input shape exports and profiles again, and the
    # export's catch_warnings cleared Python's registry, so the warning repeated (3 times here)
    torch.manual_seed(0)
    wrapped = te.auto_checkpoint(A.WithCrossEntropy(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))),
                                 budget="100%")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for n in (4, 8, 12):
            wrapped(torch.randn(n, 16), torch.randint(0, 4, (n,))).backward()
    assert len(wrapped._captures) == 3
    assert sum(issubclass(w.category, te.CPUTimingWarning) for w in caught) == 1


def test_a_frozen_backbones_intermediates_are_not_held_through_the_step():
    # Note [Side values nothing reads]: the prologue returned every side value, so a frozen backbone's
    # every intermediate was held through the step and counted: "100%" was 5.76x plain autograd's peak
    # and the step measured that much. The prologue's own peak is measured and counted (the floor).
    torch.manual_seed(0)
    args = (torch.randn(256, 768), torch.randint(0, 100, (256, 8)))
    model = A.FrozenTwoTower()
    reference = copy.deepcopy(model)
    plain = A.plain_step_peak(reference, args)
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(*args)
    assert wrapped.plan.budget_bytes <= 1.05 * plain
    assert wrapped.executor.floor_bytes == wrapped.capture.prologue_peak > 0
    model.zero_grad(set_to_none=True)
    reference.zero_grad(set_to_none=True)
    wrapped.measure_memory(1)
    wrapped(*args).backward()
    reference(*args).backward()
    record = wrapped.memory_report()[-1]
    assert record.before_peak == wrapped.capture.prologue_peak and record.within_budget
    for p, q in zip(model.parameters(), reference.parameters()):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


def test_a_prologue_above_the_budget_is_refused_and_measured():
    # a wide frozen part before a small trained one: the prologue's peak is the step's least budget
    # (refused below it, naming it), and a measured step's record counts that peak, which the step
    # meter does not see
    torch.manual_seed(0)
    frozen = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 64)).requires_grad_(False)
    model = A.WithCrossEntropy(nn.Sequential(frozen, nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)))
    args = (torch.randn(64, 64), torch.randint(0, 4, (64,)))
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(*args)
    floor = wrapped.executor.floor_bytes
    assert floor >= 2 * 64 * 4096 * 4 and wrapped.executor.min_budget_bytes == floor
    with pytest.raises(InfeasibleBudgetError, match=rf"below the {floor} B the step reaches outside the stages"):
        wrapped.replan(floor - 1)
    wrapped.replan(floor)
    wrapped.measure_memory(1)
    wrapped(*args).backward()
    record = wrapped.memory_report()[-1]
    assert record.before_peak == floor and record.beyond_param_grads >= floor and record.within_budget


def test_the_report_counts_the_gradients_a_loop_zeroes_before_reading_it():
    # the gradients' bytes were summed when the record was made (the next step, or the report read),
    # after the loop's zero_grad had freed them: "param grads" read 0 B
    torch.manual_seed(0)
    model = A.WithCrossEntropy(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                             nn.Linear(64, 4)))
    wrapped = te.auto_checkpoint(model, "100%")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    wrapped.measure_memory(2)
    for _ in range(3):
        wrapped(x, y).backward()
        optimizer.step()
        optimizer.zero_grad()
    grads = sum(p.numel() * p.element_size() for p in model.parameters())
    assert [r.param_grad_bytes_allocated for r in wrapped.memory_report()] == [grads, grads]


class _Tempered(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
        self.temperature = 1.0

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.body(x) / self.temperature, y)


@pytest.mark.parametrize("change", ["attribute", "hook", "dtype"])
def test_what_a_captured_graph_fixes_is_in_the_signature(change):
    # Note [What a captured graph fixes]: an attribute the loop anneals, a forward hook added later, or
    # model.double() (same Parameter objects) went on with the first capture: loss and gradients stale
    torch.manual_seed(0)
    model = _Tempered()
    reference = copy.deepcopy(model)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped(x, y).backward()
    for m in (model, reference):
        if change == "attribute":
            m.temperature = 0.25
        elif change == "hook":
            m.body[2].register_forward_hook(lambda mod, args, out: out * 2)
        else:
            m.double()
    if change == "dtype":
        x = x.double()
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = wrapped(x, y)
    want = reference(x, y)
    assert len(wrapped._captures) == 2
    assert torch.equal(loss, want)
    loss.backward()
    want.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    assert any("run while the graph is captured" in str(w.message) for w in caught) == (change == "hook")


def test_checkpointed_sequential_profiles_again_after_a_dtype_change():
    # model.double() keeps the Parameter objects and the input (token ids) is the same: the float32 plan
    # ran the float64 step 84 % over its budget (bench/repros/rv_loop_dtype_after_wrap.py)
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Embedding(50, 32), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))
    wrapped = te.CheckpointedSequential(seq, budget="100%")
    ids = torch.randint(0, 50, (4, 16))
    wrapped(ids).sum().backward()
    wrapped.double()
    wrapped(ids).sum().backward()
    assert len(wrapped._entries) == 2
    assert len({e.plan.budget_bytes for e in wrapped._entries.values()}) == 2


def test_compiling_the_wrapper_before_its_first_call_runs_the_capture_eagerly():
    # the capture, its custom-Function check and profiling ran inside dynamo's trace: "internal error:
    # 7 marks taken but 5 found by the profiler", or a block fallback refused (bench/repros/rv_loop_compile_wrapper.py)
    torch.manual_seed(0)
    model = A.WithCrossEntropy(nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.LayerNorm(32), nn.GELU())
                                               for _ in range(4)], nn.Linear(32, 4)))
    reference = copy.deepcopy(model)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    compiled = torch.compile(te.auto_checkpoint(model, "70%"))
    loss = compiled(x, y)
    want = reference(x, y)
    assert torch.equal(loss, want)
    loss.backward()
    want.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    compiled_in_place = copy.deepcopy(reference)
    compiled_in_place.compile()
    with pytest.raises(ValueError, match=r"compiled in place .*torch.compile\(auto_checkpoint\(model, budget\)\)"):
        te.auto_checkpoint(compiled_in_place, "70%")


class _HookedBetweenBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(4))
        self.head = nn.Linear(32, 4)

    def forward(self, x, y):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == 1 and x.requires_grad:
                x.register_hook(lambda g: g * 3)
        return nn.functional.cross_entropy(self.head(x), y)


@pytest.mark.parametrize("capture", ["auto", "export", "blocks"])
def test_a_gradient_hook_registered_in_the_forward_is_refused(capture):
    # Note [Gradient hooks registered in the forward]: export dropped it (the layers before it got a third of
    # plain autograd's gradient) and the block fallback put it on the last block's output
    torch.manual_seed(0)
    wrapped = te.auto_checkpoint(_HookedBetweenBlocks(), "100%", capture=capture)
    consequence = "torch.export drops" if capture == "export" else "would land on another tensor"
    with pytest.raises(te.CaptureError, match=rf"registers a gradient hook on a tensor .*test_auto\.py:\d+\), "
                                              rf"which {consequence}"):
        wrapped.prepare(torch.randn(8, 32), torch.randint(0, 4, (8,)))


def test_the_wrappers_forward_has_the_models_signature():
    # transformers' Trainer keeps the batch columns inspect.signature(model.forward) names: the wrapper's
    # (*args, **kwargs) named none, and every column was dropped (bench/repros/rv_loop_forward_signature.py)
    import inspect
    import io
    model = A.WithCrossEntropy(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)))
    wrapped = te.auto_checkpoint(model, "100%")
    assert inspect.signature(wrapped.forward) == inspect.signature(model.forward)
    assert list(inspect.signature(wrapped.forward).parameters) == ["x", "y"]
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    twin = copy.deepcopy(wrapped)
    assert twin.forward.wrapper is twin and twin.model is not model
    buffer = io.BytesIO()
    torch.save(wrapped, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.forward.wrapper is loaded
    assert torch.equal(loaded(x, y), model(x, y)) and torch.equal(twin(x, y), model(x, y))


# ---------------------------------------------------------------------------- Note [Probing the model]
class _Blocks(nn.Module):
    """Six Linear-Tanh blocks; ``kind`` adds what a review found trained silently wrong, or was misreported."""

    def __init__(self, kind=None, d=16):
        super().__init__()
        torch.manual_seed(0)
        self.kind = kind
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(6))
        self.aux_loss = None
        self.losses = []
        self.stats = {"aux": [], "steps": 0}
        self._aux = []

    def forward(self, x):
        import random

        import numpy as np
        if self.kind == "inplace":
            x.mul_(2.0)
        h = x
        for i, b in enumerate(self.blocks):
            if self.kind == "random" and random.random() < 0.3:  # LayerDrop written with Python's random
                continue
            h = b(h)
            if self.kind == "numpy":
                h = h + torch.from_numpy(np.random.randn(*h.shape).astype("float32"))
        if self.kind == "aux":
            self.aux_loss = h.square().mean()  # read by the training loop
        if self.kind == "aux_list":
            self.losses.append(h.square().mean())  # read and cleared by the training loop
        if self.kind == "aux_tuple":
            self.aux_loss = (h.square().mean(), h.shape[0])
        if self.kind == "aux_nested":
            self.stats["aux"].append([h.square().mean()])
        if self.kind == "aux_private":
            self._aux.append(h.square().mean())
        return h.sum()


@pytest.mark.parametrize("capture", ["auto", "blocks"])
@pytest.mark.parametrize("kind,message", [
    ("random", "draws from Python's random"), ("numpy", r"draws from NumPy's global generator"),
    ("aux", r"stores tensors that carry gradient on its modules, off the path to its outputs \(aux_loss\)"),
    ("aux_list", r"off the path to its outputs \(losses\[\.\.\.\]\)"),
    ("aux_tuple", r"off the path to its outputs \(aux_loss\[\.\.\.\]\)"),
    ("aux_nested", r"off the path to its outputs \(stats\[\.\.\.\]\)"),
    ("aux_private", r"off the path to its outputs \(_aux\[\.\.\.\]\)")])
def test_what_no_capture_can_replay_is_refused_before_capturing(kind, message, capture):
    # before: export fixed the first draw (the same layers skipped at every step) and the stored loss; the
    # block fallback stored auxiliary losses without gradient, or refused for another reason; a loss kept in a
    # tuple, or in a list inside a dict, was not seen (five blocks' parameters got no gradient)
    import random

    import numpy as np
    model = _Blocks(kind)
    w = te.auto_checkpoint(model, "70%", capture=capture)
    random.seed(1)
    np.random.seed(1)
    states = random.getstate(), np.random.get_state()[1].copy()
    with pytest.raises(te.CaptureError, match=message):
        w(torch.randn(4, 16))
    assert random.getstate() == states[0] and np.array_equal(np.random.get_state()[1], states[1])
    assert model.aux_loss is None and model.losses == [] and model.stats == {"aux": [], "steps": 0}
    assert model._aux == []
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("capture", ["auto", "blocks"])
def test_a_forward_writing_into_its_input_trains_like_plain_autograd(capture):
    # before: every capture run wrote into the caller's tensor (x 4 on the first step), and the blocks
    # fallback refused the model as using a block's output for more than the next block
    model, ref = _Blocks("inplace"), _Blocks("inplace")
    w = te.auto_checkpoint(model, "100%", capture=capture)
    x = torch.randn(4, 16)
    x_ref, x_got = x.clone(), x.clone()
    ref(x_ref).backward()
    w(x_got).backward()
    assert torch.equal(x_got, x_ref) and torch.equal(x_got, 2 * x)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters(), strict=True))


def test_the_models_own_error_is_raised_as_it_is():
    # before: a misspelt keyword came back as "auto_checkpoint could not find a chain ... cut the model by hand"
    w = te.auto_checkpoint(_Blocks(), "100%")
    with pytest.raises(TypeError, match="unexpected keyword argument 'label'"):
        w(torch.randn(4, 16), label=1)
    with pytest.raises(RuntimeError, match="once the model has been called or prepared"):
        w.min_budget_bytes  # noqa: B018
    w.prepare(torch.randn(4, 16))
    assert w.min_budget_bytes == w.executor.min_budget_bytes > 0


class _Table(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n, self.pos = n, torch.linspace(0, 1, n)  # a plain tensor attribute (a cache)


class _Probed(nn.Module):
    """What the probe must accept (a second review: the first version refused or broke each): weight
    norm's hook-set weight and a kept attention map (tensors carrying gradient on the path to the output),
    a submodule the forward replaces, a cache set to None, a generator the forward seeds itself."""

    def __init__(self, d=16):
        super().__init__()
        torch.manual_seed(0)
        self.table = _Table(4)
        self.memory = torch.ones(2, d)
        self.blocks = nn.ModuleList(nn.utils.weight_norm(nn.Linear(d, d)) for _ in range(5))

    def forward(self, x):
        import numpy as np
        if x.shape[0] > self.table.n:
            self.table = _Table(x.shape[0])  # rebuilt for a larger input
        if self.memory is not None and self.memory.shape[0] != x.shape[0]:
            self.memory = None
        np.random.seed(1234)  # the same "random" pattern every call
        perm = torch.as_tensor(np.random.permutation(x.shape[1]))
        h = x[:, perm] + self.table.pos[:x.shape[0], None]
        for b in self.blocks:
            h = torch.tanh(b(h))
            self.last = h  # kept for inspection
        return h.square().sum()


def test_the_probe_accepts_what_runs_and_puts_the_attributes_back():
    import warnings
    model, ref = _Probed(), _Probed()
    x = torch.randn(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # weight_norm's deprecation
        w = te.auto_checkpoint(model, "100%")
        w(x).backward()
        ref(x).backward()
    assert model.table.n == len(model.table.pos) == 8
    assert all(torch.allclose(p.grad, q.grad, rtol=1e-6, atol=1e-7)
               for p, q in zip(model.parameters(), ref.parameters(), strict=True))
    from torch_exec.auto import _probe_model
    fresh = _Probed()
    memory = fresh.memory
    _probe_model(fresh, (torch.randn(3, 16),), {})
    assert fresh.memory is memory and fresh.table.n == 4 and not hasattr(fresh, "last")


def test_a_forward_that_differentiates_itself_is_refused_by_name():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))

        def forward(self, x):
            x = x.detach().requires_grad_()
            y = self.blocks(x)
            (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            return (y + g).sum()
    with pytest.raises(te.CaptureError, match=r"differentiates itself.*budget=None"):
        te.auto_checkpoint(Inner(), "70%")(torch.randn(4, 8))


class _SideMasked(nn.Module):
    """Six blocks, each multiplying by a mask made from the input ``mask``: side data (no gradient), read by
    every block; under the block fallback one of the blocks' other arguments."""

    def __init__(self, d=32):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(_SideMaskBlock(d) for _ in range(6))
        self.head = nn.Linear(d, 1)

    def forward(self, x, mask):
        keep = (mask > 0).float()
        h = x
        for b in self.blocks:
            h = b(h, keep)
        return self.head(h).mean()


class _SideMaskBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, h, keep):
        return torch.tanh(self.lin(h)) * keep


@pytest.mark.parametrize("capture,budget", [("export", "40%"), ("blocks", "55%")])
def test_two_calls_before_one_backward_recompute_with_their_own_side_data(capture, budget):
    # Note [Data bound to a call]: before, the second call's mask replaced the first's on the capture, and the
    # first call's recomputations read it: gradients 3.4e-2 off (largest 7.8e-3), losses equal, no warning
    ref = _SideMasked()
    model = copy.deepcopy(ref)
    w = te.auto_checkpoint(model, budget, backend="cpu", capture=capture)
    torch.manual_seed(1)
    x1, x2 = torch.randn(64, 32), torch.randn(64, 32)
    m1, m2 = (torch.rand(64, 32) > 0.5).long(), torch.ones(64, 32, dtype=torch.long)
    w.prepare(x1, m1)
    assert any(op.kind.name == "FWD_NOGRAD" for op in w.plan.schedule)  # stages are recomputed
    (w(x1, m1) + w(x2, m2)).backward()
    (ref(x1, m1) + ref(x2, m2)).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("capture,budget", [("export", "40%"), ("blocks", "55%"), ("export", "100%")])
def test_a_calls_side_data_is_freed_with_its_backward(capture, budget, monkeypatch):
    # Note [Data bound to a call]: before, the capture held the last step's side values (a frozen backbone's
    # output, masks) until the next call, through the optimizer step and validation: 1.5x the budget, unseen
    import weakref

    import torch.utils._pytree as pytree
    from torch_exec import _util as U
    seen = []
    bound = U.CallData.bound

    def recording(self, value):
        seen.extend(weakref.ref(t) for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor))
        return bound(self, value)
    monkeypatch.setattr(U.CallData, "bound", recording)
    w = te.auto_checkpoint(_SideMasked(), budget, backend="cpu", capture=capture)
    x, m = torch.randn(64, 32), (torch.rand(64, 32) > 0.5).long()
    w.prepare(x, m)
    seen.clear()
    loss = w(x, m)
    loss.backward()  # the caller still holds the loss
    made = [r for r in seen if r() is not None and r() is not x and r() is not m]
    assert seen and not made, f"{len(made)} of the call's side tensors still held after its backward"


@pytest.mark.parametrize("capture", ["export", "blocks"])
def test_a_replaced_parameter_is_captured_again(capture):
    # Note [Sharing the model's state]: a capture reads the model's tensor objects; a parameter assigned anew
    # (load_state_dict(assign=True), weight tying done late) must be read, and trained, from then on
    model = _Blocks()
    ref = copy.deepcopy(model)
    w = te.auto_checkpoint(model, "90%", backend="cpu", capture=capture)
    x = torch.randn(4, 16)
    w(x).backward()
    model.load_state_dict({"blocks.1.0.bias": torch.ones(16)}, strict=False, assign=True)
    new = model.blocks[2][0].weight = nn.Parameter(torch.randn(16, 16))
    ref.blocks[1][0].bias = nn.Parameter(torch.ones(16))
    ref.blocks[2][0].weight = nn.Parameter(new.detach().clone())
    out, expected = w(x), ref(x)
    torch.testing.assert_close(out, expected)
    out.backward()
    expected.backward()
    torch.testing.assert_close(new.grad, ref.blocks[2][0].weight.grad)
    torch.testing.assert_close(model.blocks[1][0].bias.grad, ref.blocks[1][0].bias.grad)


def test_the_block_check_starts_both_runs_from_the_same_buffers():
    # a review: the check of the block substitution restored the RNG between its two runs but not the buffers, so
    # a model that updates a buffer and reads it (spectral norm's power iteration) was refused as "uses a block's
    # output for more than the next block"
    from torch.nn.utils.parametrizations import spectral_norm

    class Blk(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = spectral_norm(nn.Linear(16, 16)), nn.Linear(16, 16)

        def forward(self, h):
            return h + self.b(torch.nn.functional.leaky_relu(self.a(h), 0.2))

    class Disc(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.inp, self.out = nn.Linear(8, 16), nn.Linear(16, 1)
            self.blocks = nn.ModuleList(Blk() for _ in range(4))

        def forward(self, x):
            h = self.inp(x)
            for b in self.blocks:
                h = b(h)
            return self.out(h).mean()

    model = Disc()
    ref = copy.deepcopy(model)
    x = torch.randn(8, 8)
    wrapped = te.auto_checkpoint(model, "100%", capture="blocks", backend="cpu", profile_passes=1)
    wrapped.prepare(x)
    wrapped.replan(wrapped.min_budget_bytes)
    for _ in range(2):
        wrapped(x).backward()
        ref(x).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)
    for (name, b), c in zip(model.named_buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=0, atol=0, msg=name)


def test_functional_call_with_plain_tensor_weights_is_refused_naming_it():
    # a review: capture="auto" raised a bare TypeError from the stand-ins, capture="export" "could not find a
    # chain" and the wrong fix
    from torch.func import functional_call
    for capture in ("auto", "export"):
        torch.manual_seed(0)
        model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(8, 8), nn.Tanh())])
        wrapped = te.auto_checkpoint(model, "50%", capture=capture, backend="cpu")
        fast = {n: (p.detach() * 1.1).requires_grad_() for n, p in model.named_parameters()}
        with pytest.raises(te.CaptureError, match=r"plain tensors in this call.*functional_call"):
            functional_call(wrapped, fast, (torch.randn(4, 8),))
        with torch.no_grad():  # no step to plan: the model itself runs
            functional_call(wrapped, fast, (torch.randn(4, 8),))


def test_forward_hooks_on_the_blocks_themselves_are_refused_under_the_block_fallback():
    # a review: the model's own call of a hooked block returned the chain's result, and the hook ran again at
    # each run of the block by the schedule (a deep-supervision loss from hooked features: twice the features,
    # wrong gradients at "100%", a bare "backward through the graph a second time" under a plan)
    class Blk(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, h):
            return torch.tanh(self.a(h)) + h

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Blk() for _ in range(4))

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x.square().mean()

    model, feats = Net(), []
    handle = model.blocks[1].register_forward_hook(lambda m, a, out: feats.append(out))
    with pytest.raises(te.CaptureError, match=r"forward hooks on the blocks blocks\.1 .*block fallback"):
        te.auto_checkpoint(model, "100%", capture="blocks", backend="cpu")(torch.randn(4, 8))
    handle.remove()
    seen = []
    model.blocks[1].a.register_forward_hook(lambda m, a, out: seen.append(1))  # inside a block: runs
    te.auto_checkpoint(model, "100%", capture="blocks", backend="cpu")(torch.randn(4, 8)).backward()
    assert seen


class _ScaledBlocks(nn.Module):
    """Six Linear+Tanh blocks with data-dependent Python control flow between them: torch.export fails, and the block
    fallback takes one block's Sequential (the list is no chain with the scaling between its blocks)."""

    def __init__(self, d=32):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(6))
        self.head = nn.Linear(d, 5)

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
            if x.abs().mean().item() > 0.3:
                x = x * 0.5
        return nn.functional.cross_entropy(self.head(x), y)


def test_an_infeasible_budget_under_auto_checkpoint_names_its_own_cuts():
    # the hint of stages merged at unsaved boundaries told auto_checkpoint's user to "wrap the model with
    # auto_checkpoint" (bench/repros/rv10_auto_infeasible_hint_wrap_again.py)
    torch.manual_seed(0)
    w = te.auto_checkpoint(_ScaledBlocks(), "60%", backend="cpu")
    with pytest.raises(InfeasibleBudgetError) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w(torch.randn(16, 32), torch.randint(0, 5, (16,))).backward()
    message = str(err.value)
    assert "auto_checkpoint cut the model at the blocks of 'layers.0' (the block fallback)" in message
    assert "wrap the model with auto_checkpoint" not in message


def test_the_block_fallbacks_step_takes_every_parameters_gradient_off_its_peak():
    # Note [The step's parameters]: with .grad None before the step the meter knew the blocks' gradients only and
    # counted the head's as activations: a plain step at "100%" read 29988 B against 20624 B
    # (bench/repros/rv10_auto_blocks_rest_grads_as_activations.py)
    torch.manual_seed(0)
    x, y = torch.randn(16, 32), torch.randint(0, 5, (16,))
    w = te.auto_checkpoint(_ScaledBlocks(), "100%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w.prepare(x, y)
        assert w.capture.method == "blocks"
        readings = []
        for preset in (True, False):
            for p in w.parameters():
                p.grad = torch.zeros_like(p) if preset else None
            w.measure_memory(1)
            w(x, y).backward()
            readings.append(w.memory_report()[-1])
    assert readings[1].param_grad_bytes_allocated == sum(p.numel() * 4 for p in w.parameters())
    assert readings[0].beyond_param_grads == readings[1].beyond_param_grads <= readings[1].budget
    assert all(r.within_budget for r in readings)


class _ScratchAcrossTheBlocks(nn.Module):
    """Blocks behind data-dependent control flow (the block fallback), with a scratch tensor the code before them
    makes and the code after them frees (alive when the blocks are reached, never saved for the backward), and a
    wide head after them, where the step peaks."""

    def __init__(self, d=32, n=4, scratch=64 * 1024):
        super().__init__()
        self.embed = nn.Linear(d, d)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(n))
        self.wide, self.head = nn.Linear(d, 2048), nn.Linear(2048, 5)  # the step peaks in this head
        self.scratch = scratch

    def forward(self, x, y):
        x = self.embed(x)
        scratch = torch.ones(self.scratch)  # like wav2vec2's positional convolution's output, a local of the forward
        if x.abs().max() > 1e6:  # data-dependent: torch.export cannot capture it
            x = x / 2
        for layer in self.layers:
            x = layer(x)
        del scratch
        return nn.functional.cross_entropy(self.head(torch.tanh(self.wide(x))), y)


@pytest.mark.parametrize("budget", ["least", "100%"])
def test_the_block_fallbacks_step_meter_sees_what_the_code_before_the_blocks_frees(budget):
    # Note [A step measured from the model's call]: the CPU meter, started at the first block, never saw the free of
    # the scratch tensor made before it, and added it as held on top: a step within its budget was reported over
    # it by about the scratch (bench/repros/rv10_hf_wav2vec2_blocks_meter_unseen_frees.py, wav2vec2: +22144 B)
    torch.manual_seed(0)
    x, y = torch.randn(64, 32), torch.randint(0, 5, (64,))
    w = te.auto_checkpoint(_ScratchAcrossTheBlocks(), "100%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w.prepare(x, y)
        assert w.capture.method == "blocks" and w.capture.rest.held >= 64 * 1024 * 4
        if budget == "least":
            w.replan(w.min_budget_bytes)
        for p in w.parameters():
            p.grad = torch.zeros_like(p)
        w(x, y).backward()  # an unmeasured step: counted once
        w.measure_memory(1)
        w(x, y).backward()
        record = w.memory_report()[-1]
        with MemoryMeter("cpu") as whole:  # the same step, measured from its start
            w(x, y).backward()
    assert record.step == 2 and len(w.memory_report()) == 1
    assert whole.total.peak <= record.budget
    assert record.beyond_param_grads == whole.total.peak and record.within_budget, (record, whole.total.peak)


class _LayerDrop(nn.Module):
    """Blocks skipped at random (transformers' LayerDrop: ``torch.rand([]) < layerdrop`` before each block)."""

    def __init__(self, d=16, n=4, layerdrop=0.0):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))  # the model's only list
        self.head = nn.Linear(d, 3)
        self.layerdrop = layerdrop

    def forward(self, x, y):
        for layer in self.layers:
            if self.training and self.layerdrop > 0 and torch.rand([]) < self.layerdrop:
                continue
            x = layer(x)
        return nn.functional.cross_entropy(self.head(x), y)


def test_blocks_with_random_draws_between_them_are_refused_naming_layerdrop():
    # Note [Draws between the blocks]: wav2vec2's LayerDrop was refused as "uses a block's output for more than the
    # next block" (bench/repros/rv11_hf_wav2vec2_layerdrop_wrong_cause.py)
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
    w = te.auto_checkpoint(_LayerDrop(layerdrop=0.1), "100%", backend="cpu", capture="blocks")
    with pytest.raises(te.CaptureError, match=r"'layers': the model skips blocks at random \(LayerDrop: a draw "
                                              r"before or between its blocks, rand,.*layerdrop=0") as err:
        w(x, y)
    assert "more than the next block" not in str(err.value)
    w = te.auto_checkpoint(_LayerDrop(layerdrop=0.0), "100%", backend="cpu", capture="blocks")  # the remedy
    w(x, y).backward()
    assert w.capture.method == "blocks" and "'layers'" in w.capture.notes[0]


class _DrawsForNothing(nn.Module):
    """A LayerDrop of 0 that still draws before each block (an older library)."""

    def __init__(self, d=16, n=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))  # the model's only list
        self.head = nn.Linear(d, 3)

    def forward(self, x, y):
        for layer in self.layers:
            if self.training and torch.rand([]) < 0.0:
                continue
            x = layer(x)
        return nn.functional.cross_entropy(self.head(x), y)


class _DropoutLinear(nn.Linear):
    def forward(self, x):
        return nn.functional.dropout(super().forward(x), 0.1, self.training)


def test_draws_between_blocks_that_skip_nothing_train_where_the_blocks_draw_nothing():
    # Note [Draws between the blocks]: the draws keep their order when the blocks draw nothing themselves
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
    model = _DrawsForNothing()
    reference = copy.deepcopy(model)
    w = te.auto_checkpoint(model, "100%", backend="cpu", capture="blocks")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w.prepare(x, y)
        w.replan(w.min_budget_bytes)
        torch.manual_seed(1)
        w(x, y).backward()
    torch.manual_seed(1)
    reference(x, y).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    model = _DrawsForNothing()
    model.layers = nn.ModuleList(_DropoutLinear(16, 16) for _ in range(4))
    w = te.auto_checkpoint(model, "100%", backend="cpu", capture="blocks")
    with pytest.raises(te.CaptureError, match=r"'layers': the model draws random numbers between its blocks \(rand\) "
                                              r"and inside them \(dropout\)"):
        w(x, y)


class _SkipsOnData(nn.Module):
    """Blocks the model skips on the data: every one runs on the sample, not on a batch of large values."""

    def __init__(self, d=16, n=4, skip=0):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(n))
        self.head = nn.Linear(d, 3)
        self.skip = skip

    def forward(self, x, y):
        large = bool(x.abs().mean() > 10)
        for i, layer in enumerate(self.layers):
            if i == self.skip and large:
                continue
            x = layer(x)
        return nn.functional.cross_entropy(self.head(x), y)


@pytest.mark.parametrize("skip", [0, 3])
def test_a_call_that_skips_a_block_raises_instead_of_training_on_blocks_it_did_not_run(skip):
    # Note [Draws between the blocks]: a skipped last block had run in the chain at the first block's call, and the
    # loss differed from plain autograd's with no warning; a skipped first block raised "out of order" unexplained
    torch.manual_seed(0)
    y = torch.randint(0, 3, (8,))
    w = te.auto_checkpoint(_SkipsOnData(skip=skip), "100%", backend="cpu", capture="blocks")
    w(torch.randn(8, 16), y).backward()
    with pytest.raises(RuntimeError, match=r"(called out of order|called 3 of the 4 blocks).*needs every block "
                                           r"called once, in order"):
        w(100 * torch.randn(8, 16), y)


def test_a_buffer_the_first_forward_resizes_is_put_back_as_it_was():
    # ModelSnapshot.restore copied the snapshot into the resized buffer: "The size of tensor a (64) must match the
    # size of tensor b (0)" at the first call of a prepared QAT model (bench/repros/rv11_tv_qat_observer_resize.py)
    torch.manual_seed(0)
    # torch.ao's per-channel observer (torchvision's quantization-aware models): its min/max start empty and the
    # first forward sizes them
    observer = torch.ao.quantization.PerChannelMinMaxObserver(ch_axis=1)
    model = A.WithCrossEntropy(nn.Sequential(nn.Linear(16, 64), observer, nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                                             nn.Linear(64, 4)))
    reference = copy.deepcopy(model)
    args = (torch.randn(32, 16), torch.randint(0, 4, (32,)))
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped.prepare(*args)
    assert model.model[1].min_val.shape == (0,)  # left as it was
    wrapped(*args).backward()
    reference(*args).backward()
    torch.testing.assert_close(model.model[1].min_val, reference.model[1].min_val, rtol=0, atol=0)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


def test_recomputing_a_fake_quantiser_starts_from_the_forwards_buffers():
    # Note [Buffers written behind their versions]: the fused fake-quantiser of quantization-aware training moves
    # its observer's buffers without moving their version counters; no stage counted as writing a buffer, and a
    # recomputation quantised with the scale the forward had already moved (torchvision's QAT ResNet-18: a gradient
    # 1.87 off, bench/repros/rv11_tv_qat_fused_fakequant_recompute.py)
    torch.manual_seed(0)
    quantiser = torch.ao.quantization.FusedMovingAvgObsFakeQuantize
    layers = [nn.Linear(16, 64)]
    for _ in range(4):
        layers += [quantiser(), nn.Tanh(), nn.Linear(64, 64)]
    model = A.WithCrossEntropy(nn.Sequential(*layers, nn.Linear(64, 4)))
    args = (torch.randn(32, 16), torch.randint(0, 4, (32,)))
    model(3 * torch.randn(32, 16), args[1])  # the observers have seen another batch: their scales move at each step
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped.prepare(*args)
        wrapped.replan(wrapped.min_budget_bytes)
    assert wrapped.plan.backend != "given"  # a plan that recomputes
    wrapped(*args).backward()
    reference(*args).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    for b, c in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, rtol=0, atol=0)


def test_a_call_that_runs_no_block_leaves_no_meter_running():
    # StepMeter.open's CPU meter (a profiler session) stayed on after a call that ran none of the blocks, recording
    # through the loop (bench/repros/rv11_diff_blocks_opened_meter_left_running.py)
    torch.manual_seed(0)
    y = torch.randint(0, 3, (8,))
    w = te.auto_checkpoint(_SkipsOnData(skip=0), "100%", backend="cpu", capture="blocks")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w(torch.randn(8, 16), y).backward()
        w.measure_memory(1)
        with pytest.raises(RuntimeError, match="out of order"):
            w(100 * torch.randn(8, 16), y)
        assert not torch._C._autograd._profiler_enabled()
        w(torch.randn(8, 16), y).backward()
    assert len(w.memory_report()) == 1


class _SparseGraph(nn.Module):
    """Graph convolutions over a sparse adjacency buffer."""

    def __init__(self, n=40, d=8):
        super().__init__()
        dense = (torch.rand(n, n) < 0.1).float() + torch.eye(n)
        self.register_buffer("adj", (dense / dense.sum(1, keepdim=True)).to_sparse())
        self.lins = nn.ModuleList(nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        for lin in self.lins:
            x = torch.relu(torch.sparse.mm(self.adj, lin(x)))
        return x.square().mean()


def test_a_sparse_buffer_is_profiled():
    # Note [Buffers written behind their versions]: torch.equal raised on a sparse buffer
    # (bench/repros/rv11_diff_sparse_buffer_profile_raises.py)
    torch.manual_seed(0)
    model = _SparseGraph()
    reference = copy.deepcopy(model)
    w = te.auto_checkpoint(model, "100%", backend="cpu")
    x = torch.randn(40, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w.prepare(x)
        w.replan(w.min_budget_bytes)
        w(x).backward()
    reference(x).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)


class _DrawsFirst(nn.Module):
    """fairseq's LayerDropModuleList: one draw per block, all made before the first block runs."""

    def __init__(self, d=16, n=4, p=0.2):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
        self.head = nn.Linear(d, 3)
        self.p = p

    def forward(self, x, y):
        keep = torch.empty(len(self.layers)).uniform_()
        for layer, u in zip(self.layers, keep):
            if not self.training or u > self.p:
                x = layer(x)
        return nn.functional.cross_entropy(self.head(x), y)


def test_a_layerdrop_that_draws_before_the_blocks_is_refused():
    # Note [Draws between the blocks]: draws made before the first block went unseen; the list was taken and 9 of
    # 30 steps raised (bench/repros/rv11_diff_layerdrop_drawn_before_blocks.py)
    torch.manual_seed(0)
    w = te.auto_checkpoint(_DrawsFirst(), "100%", backend="cpu", capture="blocks")
    with pytest.raises(te.CaptureError, match=r"'layers': the model skips blocks at random"):
        w(torch.randn(8, 16), torch.randint(0, 3, (8,)))


class _CountedExperts(nn.Module):
    """Each layer routes every row to an expert, counts rows per expert into a fresh ``torch.zeros`` with
    ``scatter_add_`` (a mixture of experts' load-balancing counts) and scales its output by them."""

    def __init__(self, width=32, depth=6, experts=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.gates = nn.ModuleList(nn.Linear(width, experts) for _ in range(depth))
        self.experts = experts

    def forward(self, x):
        h = x
        for layer, gate in zip(self.layers, self.gates, strict=True):
            chosen = gate(h).argmax(-1)
            counts = torch.zeros(self.experts).scatter_add_(0, chosen, torch.ones(chosen.shape[0]))
            h = torch.tanh(layer(h)) * (1 + counts[chosen].unsqueeze(-1) / chosen.shape[0])
        return h.pow(2).mean()


def test_a_stage_writing_into_a_value_made_before_the_chain_writes_it_once():
    # Note [Side values the chain writes]: the zeros were side data made once per step, and every run of the stage
    # that scatter_add_s into them (profiling passes, recomputations) added the counts again: gradients 0.07-0.14
    # off plain autograd's wherever a plan recomputed, silently (a review, with transformers' MoE routers)
    torch.manual_seed(0)
    model = _CountedExperts()
    plain = copy.deepcopy(model)
    x = torch.randn(64, 32)
    wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu")
    wrapped.prepare(x)
    ex = wrapped.executor
    for budget in (int(0.6 * plain_peak_bytes(ex._last)), ex.min_budget_bytes):
        wrapped.replan(max(budget, ex.min_budget_bytes))
        assert any(op.kind.name == "FWD_NOGRAD" for op in wrapped.plan.schedule)  # it recomputes
        model.zero_grad(set_to_none=True)
        plain.zero_grad(set_to_none=True)
        mine, theirs = wrapped(x), plain(x)
        mine.backward()
        theirs.backward()
        assert torch.equal(mine.detach(), theirs.detach())
        for p, q in zip(model.parameters(), plain.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad))


class _Cache:
    """A key/value cache as transformers' DynamicCache: a plain object export cannot return."""

    def __init__(self):
        self.keys = []


class _CachedDecoder(nn.Module):
    """Blocks that append to a cache when asked (``use_cache``, taken through ``**kwargs``, as GraniteMoE's)."""

    def __init__(self, width=64, depth=8):
        super().__init__()
        import types
        self.config = types.SimpleNamespace(use_cache=True)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth))
        self.asked = []

    def forward(self, x, **kwargs):
        use_cache = kwargs.get("use_cache", self.config.use_cache)
        self.asked.append(use_cache)
        cache = _Cache() if use_cache else None
        for layer in self.layers:
            x = layer(x)
            if cache is not None:
                cache.keys.append(x)
        return (x.square().mean(), cache) if use_cache else x.square().mean()


def test_use_cache_taken_through_kwargs_is_turned_off_and_an_explicit_one_refused():
    # a review: use_cache was turned off only where forward named it; GraniteMoE takes it through **kwargs, export
    # failed on the returned cache, and under the block fallback every run of a block appended to the one cache
    # ("backward through the graph a second time" from the profiler). An explicit use_cache=True is refused by name
    torch.manual_seed(0)
    model = _CachedDecoder()
    x = torch.randn(32, 64)
    wrapped = te.auto_checkpoint(model, "80%", backend="cpu")
    with pytest.warns(UserWarning, match="use_cache=False while training"):
        wrapped(x).backward()
    assert model.asked and not any(model.asked), model.asked
    with pytest.raises(te.CaptureError, match=r"use_cache=True.*pass use_cache=False"):
        te.auto_checkpoint(_CachedDecoder(), "80%", backend="cpu")(x, use_cache=True)


class _HooksAtFirstForward(nn.Module):
    """Installs a forward hook on its layers at its first forward, as transformers' output recorders do."""

    def __init__(self, width=32, depth=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth))
        self.installed = False

    def forward(self, x):
        if not self.installed:
            self.installed = True
            for layer in self.layers:
                layer.register_forward_hook(lambda module, args, out: None)
        for layer in self.layers:
            x = layer(x)
        return x.square().mean()


def test_a_model_that_hooks_itself_at_its_first_forward_is_captured_once():
    # the signature's key was taken before the probe run, the model's first forward, which installed the hooks: the
    # next call's key differed, and each signature was captured, profiled and solved twice (a review, transformers'
    # output_hidden_states)
    torch.manual_seed(0)
    x = torch.randn(16, 32)
    wrapped = te.auto_checkpoint(_HooksAtFirstForward(), "80%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped.prepare(x)
        for _ in range(2):
            wrapped(x).backward()
    assert len(wrapped._captures) == 1


class _LayerDropBesideAStem(_LayerDrop):
    """A stem of blocks (taken as the chain) before layers skipped at random (wav2vec2: its convolutional feature
    encoder, then its LayerDrop transformer layers)."""

    def __init__(self, layerdrop=0.5):
        super().__init__(d=64, n=4, layerdrop=layerdrop)
        self.stem = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)])  # makes less
        self.widen = nn.Linear(8, 64)

    def forward(self, x, y):
        return super().forward(self.widen(self.stem(x)), y)


def test_layerdrop_layers_left_beside_the_chain_are_refused():
    # a review: the LayerDrop list was refused as the chain, the next list taken, and the LayerDrop layers ran in the
    # rest of the model, whose memory is measured once: a step that ran more of them went 25-48 % over its budget
    torch.manual_seed(0)
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    w = te.auto_checkpoint(_LayerDropBesideAStem(), "100%", backend="cpu", capture="blocks")
    with pytest.raises(te.CaptureError, match=r"'stem': the blocks of layers would run beside it.*layerdrop=0"):
        w(x, y)
    w = te.auto_checkpoint(_LayerDropBesideAStem(layerdrop=0.0), "100%", backend="cpu", capture="blocks")
    w(x, y).backward()  # the remedy: then the layers are the chain (they make the most)
    assert w.capture.method == "blocks"


def test_layerdrop_layers_ranked_below_the_chain_are_refused_too():
    # a review: the check above saw only lists ranked above the one taken; a stem that makes more than the LayerDrop
    # layers (wav2vec2's convolutional encoder on long audio) was taken with nothing refused, and steps went over
    torch.manual_seed(0)
    model = _LayerDropBesideAStem()
    model.stem = nn.Sequential(*[nn.Sequential(nn.Linear(8, 512), nn.Tanh(), nn.Linear(512, 8)) for _ in range(4)])
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    w = te.auto_checkpoint(model, "100%", backend="cpu", capture="blocks")
    with pytest.raises(te.CaptureError, match=r"'stem': the blocks of layers would run beside it.*layerdrop=0"):
        w(x, y)
