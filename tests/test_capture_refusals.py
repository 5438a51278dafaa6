"""auto_checkpoint on what a forward does beside its operations (CPU): reentrant torch.utils.checkpoint and
``retain_grad()`` refused by name before either capture, a Python number returned beside the tensors, torch.vmap
inside the forward, a replaced tensor attribute, and a saved and loaded wrapper (review rv20, 2026-11-29)."""
from __future__ import annotations

import copy
import io
import pickle

import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.utils.checkpoint as tuc  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve.errors import InfeasibleBudgetError  # noqa: E402
from _torch_helpers import export_takes_generators  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning",
                                        "ignore:auto_checkpoint. torch.export:UserWarning",
                                        "ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # forward AD's

D = 16


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class Blocks(nn.Module):
    """Residual blocks; ``kind`` adds what the review found."""

    def __init__(self, kind: str, n: int = 4):
        super().__init__()
        self.kind = kind
        self.l = nn.ModuleList(Block() for _ in range(n))
        self.w = nn.Parameter(torch.randn(3, D, D) / D ** 0.5)
        self.n = nn.ModuleList(Block() for _ in range(n))
        self.scale = torch.tensor(1.0)  # a plain tensor attribute, not a buffer

    def forward(self, x):
        h = None
        for i, block in enumerate(self.l):
            if self.kind in ("reentrant", "non-reentrant") and i == len(self.l) - 1:
                x = tuc.checkpoint(block, x, use_reentrant=self.kind == "reentrant")
            else:
                x = block(x)
            if self.kind == "retain_grad" and i == 1:
                h = x
                h.retain_grad()
        if self.kind == "vmap":
            x = x + torch.vmap(lambda w: torch.tanh(x @ w))(self.w).mean(0)
        if self.kind == "forward AD":
            import torch.autograd.forward_ad as fwAD
            with fwAD.dual_level():
                x = x + 0.1 * fwAD.unpack_dual(torch.tanh(fwAD.make_dual(x, torch.ones_like(x)))).tangent
        if self.kind == "attribute":
            x = x * self.scale
        for block in self.n:
            x = block(x)
        if self.kind == "item":
            return x, x.norm().item()
        return (x, h) if self.kind == "retain_grad" else x


def _least(model, x, **kw) -> int:
    with pytest.raises(InfeasibleBudgetError) as info:
        te.auto_checkpoint(copy.deepcopy(model), "1%", backend="cpu", **kw)(x)
    return info.value.min_bytes


def _assert_grads_equal(model, reference):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def _recomputes(wrapped) -> bool:
    plan = wrapped.plan
    return sum(op.kind.name.startswith("FWD") for op in plan.schedule) > wrapped.executor.chain.n


# ---------------------------------------------------------------------------- reentrant torch.utils.checkpoint
@pytest.mark.parametrize("capture", ["auto", "blocks", "export"])
def test_reentrant_checkpoint_is_refused_before_either_capture(capture):
    # export was refused and the block fallback trained with every gradient wrong, silently (bench/repros/
    # rv20a_blocks_reentrant_checkpoint_wrong_grads.py)
    torch.manual_seed(0)
    model = Blocks("reentrant")
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu", capture=capture)
    with pytest.raises(te.CaptureError, match=r"reentrant torch\.utils\.checkpoint .*use_reentrant=True\) around l\.3"
                                              r".*call the layers without torch\.utils\.checkpoint .*use_reentrant=False"):
        wrapped(torch.randn(4, D))
    assert wrapped.capture is None and not wrapped._captures and all(p.grad is None for p in model.parameters())


def test_non_reentrant_checkpoint_trains_as_plain_autograd():
    torch.manual_seed(0)
    model, x = Blocks("non-reentrant"), torch.randn(4, 8, D)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, _least(model, x), backend="cpu")
    wrapped(x).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    assert wrapped.capture.method == "export" and _recomputes(wrapped)
    _assert_grads_equal(model, reference)


# ---------------------------------------------------------------------------- retain_grad in the forward
@pytest.mark.parametrize("capture", ["auto", "blocks", "export"])
def test_retain_grad_in_the_forward_is_refused_naming_the_line(capture):
    # export dropped it: h.grad stayed None, silently (bench/repros/rv20a_auto_retain_grad_in_forward_dropped.py)
    torch.manual_seed(0)
    wrapped = te.auto_checkpoint(Blocks("retain_grad"), "100%", backend="cpu", capture=capture)
    with pytest.raises(te.CaptureError, match=r"registers a gradient hook on a tensor in its forward \(Tensor\.retain_grad"
                                              r" at .*test_capture_refusals\.py:\d+\), which neither capture keeps"
                                              r".*for h\.retain_grad\(\): .*wrapper\.model"):
        wrapped(torch.randn(4, D))


def test_retain_grad_on_a_leaf_is_left_alone():
    class Leaf(Blocks):
        def forward(self, x):
            x.retain_grad()  # a leaf's .grad is set anyway: nothing to refuse
            return super().forward(x)
    torch.manual_seed(0)
    model, x = Leaf("plain"), torch.randn(4, 8, D, requires_grad=True)
    reference, x2 = copy.deepcopy(model), x.detach().clone().requires_grad_()
    te.auto_checkpoint(model, "100%", backend="cpu")(x).pow(2).mean().backward()
    reference(x2).pow(2).mean().backward()
    _assert_grads_equal(model, reference)
    torch.testing.assert_close(x.grad, x2.grad)


# ---------------------------------------------------------------------------- a number returned beside the tensors
def test_a_number_computed_with_item_is_returned_from_this_call():
    # the export path raised IndexError in _call_scheduled (bench/repros/rv20a_auto_item_output_indexerror.py):
    # export now refuses it, and the block fallback runs the model's own code for it
    torch.manual_seed(0)
    model = Blocks("item")
    reference = copy.deepcopy(model)
    x = torch.randn(4, 8, D)
    wrapped = te.auto_checkpoint(model, _least(model, x), backend="cpu")
    for step in range(2):
        x = torch.randn(4, 8, D, generator=torch.Generator().manual_seed(step))
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        out, number = wrapped(x)
        want, want_number = reference(x)
        assert isinstance(number, float) and number == pytest.approx(want_number, rel=1e-6)
        out.pow(2).mean().backward()
        want.pow(2).mean().backward()
        _assert_grads_equal(model, reference)
    assert wrapped.capture.method == "blocks" and _recomputes(wrapped)
    with pytest.raises(te.CaptureError, match=r"returns a number computed from tensors .*\.item\(\).*x\.norm\(\)\.detach"):
        te.auto_checkpoint(Blocks("item"), "100%", backend="cpu", capture="export")(x)


# ---------------------------------------------------------------------------- torch.vmap in the forward
@pytest.mark.parametrize("capture", ["export", "blocks"])
def test_a_vmap_region_runs_in_one_stage(capture):
    # its nesting calls ran in the prologue and the batched ops in a stage at no vmap level: profiling raised
    # functorch's "tensor may have escaped" (bench/repros/rv20a_auto_vmap_region_cut.py)
    torch.manual_seed(0)
    model, x = Blocks("vmap"), torch.randn(4, 8, D)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, _least(model, x, capture=capture), backend="cpu", capture=capture)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        wrapped(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
        _assert_grads_equal(model, reference)
    assert wrapped.capture.method == capture and _recomputes(wrapped)
    if capture == "export":
        code = [s.graph_module.code for s in wrapped.capture.stages]
        assert "_vmap_increment_nesting" not in wrapped.capture.prologue.code
        assert sum("_vmap_increment_nesting" in c for c in code) == 1
        assert all(c.count("_vmap_increment_nesting") == c.count("_vmap_decrement_nesting") for c in code)


class VmappedMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(4))

    def forward(self, x, m):
        mask = torch.vmap(lambda r: (r > 0).float() * r.softmax(-1))(m)  # side data only: runs in the prologue
        for block in self.l:
            x = block(x) * mask
        return x


def test_a_vmap_region_of_side_data_runs_in_the_prologue():
    torch.manual_seed(0)
    model, x, m = VmappedMask(), torch.randn(4, D), torch.randn(4, D)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "80%", backend="cpu")
    wrapped(x, m).pow(2).mean().backward()
    reference(x, m).pow(2).mean().backward()
    _assert_grads_equal(model, reference)
    assert wrapped.capture.method == "export" and wrapped.capture.branches is None
    assert "_vmap_increment_nesting" in wrapped.capture.prologue.code
    assert not any("_vmap" in s.graph_module.code for s in wrapped.capture.stages)
    assert not any("join" in note for note in wrapped.capture.notes)


def test_forward_ad_in_the_forward_is_refused_by_export_and_runs_in_the_block_fallback():
    # the first call raised "Trying to access a forward AD level with an invalid index" (Note [Function transforms in
    # the graph]); export now refuses it by name, and the block fallback runs the model's code around its blocks
    torch.manual_seed(0)
    model, x = Blocks("forward AD"), torch.randn(4, 8, D)
    reference = copy.deepcopy(model)
    with pytest.raises(te.CaptureError, match=r"runs forward-mode AD .*capture='blocks'"):
        te.auto_checkpoint(copy.deepcopy(model), "100%", backend="cpu", capture="export")(x)
    wrapped = te.auto_checkpoint(model, _least(model, x), backend="cpu")
    wrapped(x).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    assert wrapped.capture.method == "blocks" and _recomputes(wrapped)
    _assert_grads_equal(model, reference)


# ---------------------------------------------------------------------------- a replaced tensor attribute
def test_a_replaced_tensor_attribute_captures_again():
    # the graph held the first tensor: loss 1.53 where plain autograd gave 163.9, silently (bench/repros/
    # rv20a_auto_tensor_attribute_fixed_in_graph.py)
    torch.manual_seed(0)
    model = Blocks("attribute")
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu")
    x = torch.randn(4, 8, D)
    for step, value in enumerate((1.0, 1.0, 1.5)):
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
            if value != 1.0:
                m.scale = torch.tensor(value)
        if step == 2:
            with pytest.warns(UserWarning, match=r"tensor attribute\(s\) scale \(not buffers\) were replaced"):
                loss = wrapped(x).pow(2).mean()
        else:
            loss = wrapped(x).pow(2).mean()
        want = reference(x).pow(2).mean()
        torch.testing.assert_close(loss, want)
        loss.backward()
        want.backward()
        _assert_grads_equal(model, reference)
        if step == 1:  # the same tensor: not captured again
            first = wrapped.capture
            assert first.constants and first.constants[0][1] == "scale"
    assert wrapped.capture is not first and len(wrapped._captures) == 1


# ---------------------------------------------------------------------------- saving and loading the wrapper
class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(D, D), nn.BatchNorm1d(D), nn.Tanh(),
                                  *[m for _ in range(4) for m in (nn.Linear(D, D), nn.Tanh())], nn.Linear(D, 4))
        self.register_buffer("ema", torch.ones(D))

    def forward(self, x, y):
        self.ema.mul_(0.9).add_(0.1 * x.detach().mean(0))
        return nn.functional.cross_entropy(self.body(x), y)


def _torch_save_load(m):
    buffer = io.BytesIO()
    torch.save(m, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("how", ["torch.save", "pickle", "deepcopy"])
def test_loading_a_saved_wrapper_leaves_its_buffers_as_saved(how):
    # unpickling traced the captured GraphModules again, running their in-place buffer writes at load time
    # (bench/repros/rv20b_auto_pickle_load_writes_buffers.py)
    load = {"torch.save": _torch_save_load, "pickle": lambda m: pickle.loads(pickle.dumps(m)),
            "deepcopy": copy.deepcopy}[how]
    torch.manual_seed(0)
    model = WithBuffers()
    reference = copy.deepcopy(model)
    x, y = torch.randn(32, D), torch.randint(0, 4, (32,))
    wrapped = te.auto_checkpoint(model, "60%", backend="cpu")
    wrapped(x, y).backward()
    reference(x, y).backward()
    assert _recomputes(wrapped)
    saved = {k: v.clone() for k, v in wrapped.state_dict().items()}
    loaded, plain = load(wrapped), load(reference)
    for key, value in loaded.state_dict().items():
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0, msg=key)
    assert loaded.forward.wrapper is loaded
    assert bool(loaded._captures) == (how == "deepcopy")  # a copy keeps its captures: Note [Saving the wrapper]
    for m in (loaded, plain):
        m.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    loss = loaded(x, y)
    torch.manual_seed(1)
    want = plain(x, y)
    torch.testing.assert_close(loss, want, rtol=0, atol=0)
    loss.backward()
    want.backward()
    assert _recomputes(loaded)
    _assert_grads_equal(loaded, plain)
    for (key, b), c in zip(loaded.named_buffers(), plain.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-6, atol=1e-7, msg=key)
    assert not {id(p) for p in loaded.parameters()} & {id(p) for p in wrapped.parameters()}


# ---------------------------------------------------------------------------- torch.cond in the forward
class CondBlock(Block):
    def forward(self, x):
        return x + torch.cond(x.sum() > 0, lambda x: self.b(torch.tanh(self.a(x))) * 2,
                              lambda x: -self.b(torch.tanh(self.a(x))), (x,))


class Conditional(Blocks):
    """``torch.cond`` between the blocks (``where="between"``) or inside each block of ``n`` (``"inside"``)."""

    def __init__(self, where: str):
        super().__init__("plain")
        self.where = where
        self.g = nn.Linear(D, D)
        if where == "inside":
            self.n = nn.ModuleList(CondBlock() for _ in self.n)

    def forward(self, x):
        for i, block in enumerate(self.l):
            x = block(x)
            if self.where == "between" and i == 1:
                x = torch.cond(x.sum() > 0, lambda x: self.g(x) * 2, lambda x: torch.tanh(self.g(x)), (x,))
        for block in self.n:
            x = block(x)
        return x


@pytest.mark.parametrize("where, capture", [("between", "auto"), ("inside", "blocks")])
def test_torch_cond_trains_as_plain_autograd(where, capture):
    # export's CondAutogradOp was refused as a user autograd Function, and the block fallback's dispatch mode raised
    # torch's "no rule registered for HigherOrderOperator cond" (bench/repros/rv20a_auto_torch_cond_refused_wrong_cause.py)
    torch.manual_seed(0)
    model, x = Conditional(where), torch.randn(4, 8, D)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, _least(model, x, capture=capture), backend="cpu", capture=capture)
    for step in range(2):  # the other branch at the second step
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        xs = x if step == 0 else -x
        wrapped(xs).pow(2).mean().backward()
        reference(xs).pow(2).mean().backward()
        _assert_grads_equal(model, reference)
    assert wrapped.capture.method == ("export" if capture == "auto" else "blocks") and _recomputes(wrapped)
    if capture == "auto":
        assert sum("cond" in s.graph_module.code for s in wrapped.capture.stages) == 1


# ---------------------------------------------------------------------------- torch.manual_seed in the forward
class SeedingBlock(Block):
    def forward(self, x):
        torch.manual_seed(4321)
        return nn.functional.dropout(super().forward(x), 0.2)


class Seeding(nn.Module):
    """Fixed noise drawn after ``torch.manual_seed`` in the forward (``where="before"`` the blocks, or inside the
    third block), blocks with dropout."""

    def __init__(self, where: str):
        super().__init__()
        self.where = where
        self.l = nn.ModuleList(SeedingBlock() if where == "inside" and i == 2 else nn.Sequential(Block(), nn.Dropout(0.2))
                               for i in range(6))

    def forward(self, x):
        if self.where == "before":
            torch.manual_seed(1234)
            x = x + 0.1 * torch.randn_like(x)
        for block in self.l:
            x = block(x)
        return x


@pytest.mark.parametrize("where", ["before", "inside"])
def test_torch_manual_seed_in_the_forward_takes_the_block_fallback(where):
    # export kept the draws, not the seeding: every gradient and the RNG state after the step off plain autograd's,
    # silently (bench/repros/rv20a_auto_torch_manual_seed_in_forward.py)
    torch.manual_seed(0)
    model, x = Seeding(where), torch.randn(4, 8, D)
    reference = copy.deepcopy(model)
    with pytest.raises(te.CaptureError, match=r"forward seeds torch's default generator \(the CPU's: torch\.manual_seed"
                                              r".*use capture='blocks'"):
        te.auto_checkpoint(copy.deepcopy(model), "100%", backend="cpu", capture="export")(x)
    wrapped = te.auto_checkpoint(model, _least(model, x), backend="cpu")
    for step in range(2):
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        torch.manual_seed(50 + step)
        loss = wrapped(x).pow(2).mean()
        loss.backward()
        after = torch.get_rng_state()
        torch.manual_seed(50 + step)
        want = reference(x).pow(2).mean()
        want.backward()
        torch.testing.assert_close(loss, want)
        _assert_grads_equal(model, reference)
        assert torch.equal(after, torch.get_rng_state())
    assert wrapped.capture.method == "blocks" and _recomputes(wrapped)


# ---------------------------------------------------------------------------- a Python counter written at every call
class Counting(nn.Module):
    """``self.calls += 1`` in the forward and a factor computed from it (``scaled="blocks"``: each block's output
    scaled, which the block fallback cannot chain; ``"input"``: the input scaled); ``warned``: a flag set at the first
    call only; the third block counts its own calls with ``inner``."""

    def __init__(self, scaled: str = "input", inner: bool = False):
        super().__init__()
        self.scaled = scaled
        self.l = nn.ModuleList(CountingBlock() if inner and i == 2 else Block() for i in range(4))
        self.calls, self.warned = 0, False

    def forward(self, x):
        self.warned = True
        if self.training:
            self.calls += 1
        factor = 0.5 + 0.5 * min(1.0, self.calls / 3)
        x = x * factor if self.scaled == "input" else x
        for block in self.l:
            x = block(x) * factor if self.scaled == "blocks" else block(x)
        return x


class CountingBlock(Block):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return super().forward(x) * min(self.calls, 2)


def test_a_counter_the_forward_writes_is_refused_by_export_and_put_back():
    # the graph kept the capture's value and the counter never moved again: loss 0.0705 where plain autograd gave
    # 0.0121, silently (bench/repros/rv20a_auto_forward_counter_attribute_frozen.py)
    torch.manual_seed(0)
    for scaled, capture in (("input", "export"), ("blocks", "auto")):
        model = Counting(scaled)
        wrapped = te.auto_checkpoint(model, "100%", backend="cpu", capture=capture)
        with pytest.raises(te.CaptureError, match=r"forward writes the attribute\(s\) Counting\.calls \(1 -> 2\) at "
                                                  r"every call.*buffer updated in place.*capture='blocks'") as info:
            wrapped(torch.randn(4, 8, D))
        assert "warned" not in str(info.value)
        assert model.calls == 0 and not wrapped._captures  # (warned: written at the first call only, the probe's)
        assert all(p.grad is None for p in model.parameters())


def test_a_counter_the_forward_writes_moves_as_in_plain_autograd_under_the_block_fallback():
    torch.manual_seed(0)
    model, x = Counting("input"), torch.randn(4, 8, D)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, _least(model, x), backend="cpu")
    wrapped.prepare(x)  # prepares, not a step: the counter stays
    assert model.calls == 0
    for step in range(4):
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        loss = wrapped(x).pow(2).mean()
        want = reference(x).pow(2).mean()
        torch.testing.assert_close(loss, want)
        loss.backward()
        want.backward()
        _assert_grads_equal(model, reference)
        assert model.calls == reference.calls == step + 1 and model.warned
    assert wrapped.capture.method == "blocks" and _recomputes(wrapped) and len(wrapped._captures) == 1
    assert any("Counting.calls at every call" in note for note in wrapped.capture.notes)


def test_what_the_first_call_alone_writes_is_captured():
    # a warn-once flag and a lazy module's sizes are written by the probe's forward only: not refused
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.LazyLinear(D), Counting("input")), torch.randn(4, 8, 12)
    model.train(False)  # the counter moves in training only: the flag alone is written
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu")
    wrapped(x).pow(2).mean().backward()
    reference = copy.deepcopy(model)
    for m in (model, reference):
        m.zero_grad(set_to_none=True)
    wrapped(x).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    _assert_grads_equal(model, reference)
    assert wrapped.capture.method == "export" and model[1].warned and model[1].calls == 0
    assert model[0].in_features == 12


@pytest.mark.parametrize("capture", ["auto", "blocks"])
def test_a_counter_a_block_writes_is_refused_once_and_put_back(capture):
    torch.manual_seed(0)
    model = Counting("none", inner=True)
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu", capture=capture)
    with pytest.raises(te.AttributeWriteError, match=r"forward writes CountingBlock\.calls at every call"):
        wrapped(torch.randn(4, 8, D))
    assert model.l[2].calls == 0 and model.calls == 0


class _Rows(nn.Module):
    """tanh(Linear) of the tokens, the rows of positive sum kept (boolean indexing: sizes that follow the data)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, x):
        h = torch.tanh(self.lin(x.flatten(0, 1)))
        return h[h.sum(1) > 0]


class _KeepRows(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList([nn.Sequential(nn.Linear(D, D), nn.Tanh()), _Rows(),
                                nn.Sequential(nn.Linear(D, D), nn.Tanh())])

    def forward(self, x):
        for block in self.l:
            x = block(x)
        return x


@pytest.mark.parametrize("capture", ["auto", "blocks"])
def test_rows_kept_by_their_values_are_refused(capture):
    """Note [Sizes that follow the data] in torch_exec/profiler.py: the plan, made from the first batch's sizes,
    went 5 679 B over 1.1 x the least budget on a batch that kept more rows (review rv21a)."""
    torch.manual_seed(0)
    wrapped = te.auto_checkpoint(_KeepRows(), "60%", backend="cpu", capture=capture)
    with pytest.raises(te.DataDependentShapeError, match=r"runs aten\.index\.Tensor at .*test_capture_refusals\.py:\d+"):
        wrapped(torch.randn(4, 8, D)).pow(2).mean().backward()


# ---------------------------------------------------------------------------- torch.Generators export cannot keep
class GenBlock(Block):
    """A block adding noise from a generator: ``way="own"`` seeds its own in the forward (the fix the
    torch.manual_seed refusal named), ``"fresh"`` makes one at each call."""

    def __init__(self, way: str):
        super().__init__()
        self.way, self.gen = way, torch.Generator()

    def forward(self, x):
        if self.way == "own":
            self.gen.manual_seed(1234)
            gen = self.gen
        else:
            gen = torch.Generator().manual_seed(9)
        return super().forward(x + 0.5 * torch.randn(x.shape, generator=gen))


@pytest.mark.parametrize("way", ["own", "fresh"])
def test_a_generator_seeded_or_made_in_the_forward_takes_the_block_fallback(way):
    # export dropped the seeding (own) or kept the generator made at capture as a constant (fresh): every step's
    # gradients off plain autograd's, silently (review rv21d, bench/repros/rv21d_auto_own_generator_seeded_in_forward.py)
    torch.manual_seed(0)
    model, x = nn.Sequential(*[GenBlock(way) for _ in range(6)]), torch.randn(16, 8, D)
    reference = copy.deepcopy(model)
    match = r"seeds its torch\.Generator 0\.gen, 1\.gen" if way == "own" else r"none of its modules holds"
    match += r".*capture='blocks'"
    if way == "fresh" and not export_takes_generators():  # torch 2.11's export refuses the draw itself
        match = r"argument of type: <class 'torch\._C\.Generator'>"
    with pytest.raises(te.CaptureError, match=match):
        te.auto_checkpoint(copy.deepcopy(model), "100%", backend="cpu", capture="export")(x)
    wrapped = te.auto_checkpoint(model, _least(model, x), backend="cpu")
    for step in range(2):
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        loss = wrapped(x * (1 + step)).pow(2).mean()
        loss.backward()
        want = reference(x * (1 + step)).pow(2).mean()
        want.backward()
        torch.testing.assert_close(loss, want)
        _assert_grads_equal(model, reference)
    assert all(torch.equal(a.gen.get_state(), b.gen.get_state()) for a, b in zip(model, reference))
    assert wrapped.capture.method == "blocks" and _recomputes(wrapped)


class GenArgument(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(4))

    def forward(self, x, gen):
        for block in self.l:
            x = block(x + 0.3 * torch.randn(x.shape, generator=gen))
        return x


@pytest.mark.parametrize("capture", ["auto", "export", "blocks"])
def test_a_generator_argument_is_refused_naming_it(capture):
    # neither capture records it: export drew on from it, silently (review rv21d,
    # bench/repros/rv21d_auto_generator_argument_unseen.py)
    torch.manual_seed(0)
    model, gen = GenArgument(), torch.Generator().manual_seed(5)
    before = gen.get_state()
    with pytest.raises(te.CaptureError, match=r"called with a torch\.Generator \(keyword 'gen'\).*model\.gen = gen"):
        te.auto_checkpoint(model, "60%", backend="cpu", capture=capture)(torch.randn(4, 8, D), gen=gen)
    assert torch.equal(before, gen.get_state())


class Lazy(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.LazyLinear(D)
        self.l = nn.ModuleList(nn.Sequential(Block(), nn.Dropout(0.3)) for _ in range(4))

    def forward(self, x):
        x = self.inp(x)
        for block in self.l:
            x = block(x)
        return x


def test_a_lazy_module_materialises_as_at_plain_autograds_first_call():
    # preparing materialised the weights from the probe's seed and put the RNG state back (review rv21d,
    # bench/repros/rv21d_auto_lazy_module_init_draws.py)
    got = []
    for wrap in (False, True):
        torch.manual_seed(0)
        model = Lazy()
        run = te.auto_checkpoint(model, "60%", backend="cpu") if wrap else model
        torch.manual_seed(9)
        x = torch.randn(16, 8, D)
        if wrap:
            with pytest.warns(UserWarning, match=r"inp hold parameters not materialised yet"):
                loss = run(x).pow(2).mean()
        else:
            loss = run(x).pow(2).mean()
        loss.backward()
        weight, state = model.inp.weight.detach().clone(), torch.get_rng_state()
        model.zero_grad(set_to_none=True)
        second = run(x).pow(2).mean()
        second.backward()
        got.append((loss.detach(), weight, state, second.detach(), [p.grad for p in model.parameters()],
                    torch.get_rng_state()))
    (plain, wrapped) = got
    torch.testing.assert_close(wrapped[0], plain[0], rtol=0, atol=0)
    assert torch.equal(wrapped[1], plain[1]) and torch.equal(wrapped[2], plain[2])
    torch.testing.assert_close(wrapped[3], plain[3])
    for a, b in zip(wrapped[4], plain[4]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert torch.equal(wrapped[5], plain[5])
    with pytest.raises(te.CaptureError, match=r"inp hold parameters not materialised yet.*call the model once"):
        te.auto_checkpoint(Lazy(), "60%", backend="cpu", sample=(torch.randn(16, 8, D),))


class _EvalHead(Lazy):
    """Lazy, with a lazy head only evaluation calls (``evaluate``): the training forward never materialises it."""

    def __init__(self):
        super().__init__()
        self.eval_head = nn.LazyLinear(3)

    def evaluate(self, x):
        return self.eval_head(self(x))


def test_a_lazy_module_the_training_forward_never_calls_is_left_out():
    # every step after the first raised torch's "Attempted to use an uninitialized parameter" (review rv21r,
    # bench/repros/rv21r_auto_unused_lazy_module_fails.py): its parameters are left out of the wrapper's steps
    from torch.nn.parameter import is_lazy
    got = []
    for wrap in (False, True):
        torch.manual_seed(0)
        model = _EvalHead()
        run = te.auto_checkpoint(model, "60%", backend="cpu") if wrap else model
        torch.manual_seed(9)
        steps = []
        for step in range(3):
            model.zero_grad(set_to_none=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loss = run(torch.randn(16, 8, D) * (1 + step)).pow(2).mean()
            loss.backward()
            steps.append((loss.detach(), [p.grad.clone() for n, p in model.named_parameters()
                                          if not n.startswith("eval_head")]))
        got.append((steps, [n for n, _ in model.named_parameters()]))
        assert is_lazy(model.eval_head.weight)
    (plain, wrapped) = got
    assert wrapped[1] == plain[1]  # the lazy head's parameters are back, in their order
    for (la, ga), (lb, gb) in zip(wrapped[0], plain[0], strict=True):
        torch.testing.assert_close(la, lb)
        for a, b in zip(ga, gb, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # an evaluation materialises the head as the model's own call does
        assert model.evaluate(torch.randn(16, 8, D)).shape == (16, 8, 3)
    assert not is_lazy(model.eval_head.weight)


def test_a_lazy_module_left_out_and_called_later_is_refused_by_name():
    class Late(_EvalHead):
        def __init__(self):
            super().__init__()
            self.use_head = False

        def forward(self, x):
            h = super().forward(x)
            return self.eval_head(h) if self.use_head else h

    torch.manual_seed(0)
    model = Late()
    run = te.auto_checkpoint(model, "60%", backend="cpu")
    x = torch.randn(16, 8, D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(x).pow(2).mean().backward()
        run(x).pow(2).mean().backward()
    model.use_head = True
    with pytest.raises(te.CaptureError, match=r"eval_head, a lazy module .* call it once"):
        run(x)
    from torch.nn.parameter import is_lazy
    assert is_lazy(model.eval_head.weight) and type(model.eval_head) is nn.LazyLinear  # left as it was


@pytest.mark.parametrize("how", ["sample", "first call"])
def test_a_lazy_head_the_forward_never_calls_does_not_stop_preparing(how):
    """The model called once before wrapping, as the refusal asks, leaves an evaluation-only head lazy: ``sample=``
    was still refused with that advice, and the first call ran as plain autograd outside the budget (review rv22b,
    bench/repros/rv22b_auto_lazy_eval_head_prepare_refused.py). A forward without grad, the lazy tensors taken out
    and guarded, tells that the forward never calls it: preparing goes on, leaving it out."""
    from torch.nn.parameter import is_lazy
    torch.manual_seed(0)
    model = _EvalHead()
    x = torch.randn(16, 8, D)
    model(x).pow(2).mean().backward()  # the model's own first call materialises what its forward calls
    ref = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "runs as plain autograd, outside the budget"
        warnings.filterwarnings("ignore", category=te.CPUTimingWarning)
        run = te.auto_checkpoint(model, "60%", backend="cpu", sample=x if how == "sample" else None)
        run.measure_memory(1)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)  # the same dropout masks as the reference's
        run(x).pow(2).mean().backward()
    records = run.memory_report()
    assert len(records) == 1 and records[0].within_budget and records[0].budget is not None, records
    ref.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    ref(x).pow(2).mean().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        if not name.startswith("eval_head"):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert is_lazy(model.eval_head.weight)  # left as it was
