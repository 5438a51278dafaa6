"""Note [Dense layers without the copy] (torch_exec/split.py), Note [Running concatenation]
(torch_exec/auto.py) and the bundled DenseNet profiles' excess.

``examples/models.py``'s ``TVDenseLayer`` restates torchvision's ``_DenseLayer`` (``memory_efficient=False``):
it concatenates its list input itself, so on one tensor its ``torch.cat`` is a copy of the input. Called
that way inside a chain stage, no backward saves the stage's input, and the profile fuses whole dense
blocks. ``TVDenseNet`` is torchvision's layout and forward (torchvision is not a test dependency).
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from models import TVDenseLayer, TVDenseNet  # noqa: E402  (examples/models.py)

import torch_exec as te  # noqa: E402
from gpusolve import store_all_peak_bytes  # noqa: E402
from gpusolve.schedule import OpKind, segments_policy  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from _torch_helpers import measured_step  # noqa: E402
from torch_exec.split import DenseStage, split_model  # noqa: E402

DT = torch.float64


def _step(fn, layer, x):
    x = x.detach().requires_grad_()
    out = fn(x)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return out.detach(), x.grad, [p.grad for p in layer.parameters()]


@pytest.mark.parametrize("drop_rate", [0.0, 0.3])
def test_dense_stage_equals_calling_the_layer_bit_for_bit(drop_rate):
    torch.manual_seed(0)
    layer = TVDenseLayer(6, 3, drop_rate=drop_rate).to(DT)
    stage = DenseStage(layer)
    assert stage.direct
    x = torch.randn(2, 6, 5, 5, dtype=DT)
    twin = copy.deepcopy(layer)
    torch.manual_seed(1)
    got = _step(stage, layer, x)
    torch.manual_seed(1)
    want = _step(lambda t: torch.cat([t, twin(t)], 1), twin, x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for a, b in zip(got[2], want[2]):
        assert torch.equal(a, b)
    for a, b in zip(layer.buffers(), twin.buffers()):  # BatchNorm statistics updated alike
        assert torch.equal(a, b)


def test_dense_stage_calls_a_layer_with_hooks_of_its_own():
    layer = TVDenseLayer(4, 2).to(DT)
    seen = []
    layer.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    x = torch.randn(1, 4, 3, 3, dtype=DT)
    DenseStage(layer)(x)
    assert len(seen) == 1 and seen[0] is x


class Doubled(TVDenseLayer):
    def forward(self, input):
        return 2 * super().forward(input)


def _without_norm1():
    layer = TVDenseLayer(4, 2)
    layer.norm1 = nn.Identity()  # relu1 is in place: run directly it would overwrite the stage input
    return layer


@pytest.mark.parametrize("make", [lambda: Doubled(4, 2), _without_norm1], ids=["subclass-forward", "no-batchnorm"])
def test_dense_stage_calls_layers_that_differ_from_torchvisions(make):
    torch.manual_seed(0)
    layer = make().to(DT)
    stage = DenseStage(layer)
    assert not stage.direct
    x = torch.randn(1, 4, 3, 3, dtype=DT)
    want = torch.cat([x, copy.deepcopy(layer)(x.clone())], 1)
    assert torch.equal(stage(x), want)


def test_dense_stage_calls_the_layer_while_a_backward_or_global_hook_watches():
    from torch.nn.modules.module import register_module_forward_hook
    layer = TVDenseLayer(4, 2).to(DT)
    stage = DenseStage(layer)
    x = torch.randn(1, 4, 3, 3, dtype=DT, requires_grad=True)
    calls = []
    handle = layer.register_full_backward_hook(lambda mod, gin, gout: calls.append("backward"))
    assert not stage.direct
    stage(x).sum().backward()
    handle.remove()
    handle = register_module_forward_hook(lambda mod, args, out: calls.append(type(mod).__name__))
    try:
        assert not stage.direct
        stage(x)
    finally:
        handle.remove()
    assert stage.direct
    assert calls[0] == "backward" and "_DenseLayer" in calls


def test_dense_stage_calls_layers_it_does_not_recognise():
    assert not DenseStage(TVDenseLayer(4, 2, memory_efficient=True)).direct  # it checkpoints inside
    assert not DenseStage(nn.Conv2d(4, 2, 3, padding=1)).direct
    layer = nn.Conv2d(4, 2, 3, padding=1)
    x = torch.randn(1, 4, 3, 3)
    assert torch.equal(DenseStage(layer)(x), torch.cat([x, layer(x)], 1))


@pytest.fixture(scope="module")
def profiled():
    torch.manual_seed(0)
    model = TVDenseNet().to(DT)
    targets = torch.tensor([0, 3, 1])
    stages = split_model(model, targets=targets)
    x = torch.randn(3, 3, 16, 16, dtype=DT)
    data = te.profile_dict(stages, x, passes=1, warmup=1)
    return stages, x, data


def test_profile_keeps_every_dense_boundary(profiled):
    """Each dense stage's backward saves its input (norm1 reads x itself), so no dense boundary is
    fused away; with the copy every dense block became one stage (5 stages instead of 10 here)."""
    _, _, data = profiled
    dense = [(s, st) for s, st in enumerate(data["stages"]) if "denselayer" in st["name"]]
    assert len(dense) == 5
    for s, st in dense:
        assert st["in_saved_bytes"] == data["stages"][s - 1]["x_nbytes"] > 0, st["name"]
    chain = te.chain_from_profile(data)
    assert sum("denselayer" in name for name in chain.names) == 5
    assert all(name.count("denselayer") <= 1 for name in chain.names)
    measured = data["reference"]["store_all_peak_bytes"]
    assert abs(store_all_peak_bytes(chain) - measured) <= 0.01 * measured


def test_checkpointed_dense_stages_train_like_plain_autograd(profiled):
    stages, x, _ = profiled
    ref = copy.deepcopy(stages)
    wrapped = te.CheckpointedSequential(stages, budget="1GiB", backend="cpu", profile_passes=1,
                                        schedule_fn=lambda chain: segments_policy([3, 6], chain.n))
    ref(x).backward()
    wrapped(x).backward()
    forwards = [op for op in wrapped.plan.schedule if op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE)]
    assert len(forwards) > wrapped.chain.n  # dense stages run again during backward
    for (name, p), q in zip(ref.named_parameters(), stages.parameters()):
        assert torch.equal(q.grad, p.grad), name


# ---------------------------------------------------------------------------- auto_checkpoint on dense connectivity
def _auto(model, x):
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu", sample=(x,))
    return wrapped, wrapped.executor.chain


def test_measured_peak_of_dense_stages_holds_the_budget(profiled):
    """The direct path changes what each dense stage allocates: the CPU allocator's measured peak of a
    step planned between the minimum and plain autograd's peak stays within the budget."""
    stages, x, _ = profiled
    wrapped = te.CheckpointedSequential(stages, budget="1GiB", backend="cpu", profile_passes=1)
    wrapped.prepare(x)
    lo, hi = wrapped.min_budget_bytes, plain_peak_bytes(wrapped._last)
    budget = int(lo + 0.3 * (hi - lo))
    wrapped.replan(budget)
    assert sum(op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE) for op in wrapped.plan.schedule) > wrapped.chain.n
    reading = measured_step(wrapped, lambda: wrapped(x).backward())
    assert reading.peak <= budget, (reading.peak, budget)


def test_running_concatenation_gives_a_cut_between_dense_layers():
    """Without the rewrite every earlier feature map crosses each point of a block: the 5 dense layers
    of TVDenseNet(blocks=(3, 2)) sit inside 2 stages and the least budget is most of plain autograd's
    peak; with it, each dense layer gets a cut (bench/results/densenet_copy.md, part 3)."""
    torch.manual_seed(0)
    model = TVDenseNet(blocks=(3, 2)).to(DT)
    x = torch.randn(4, 3, 16, 16, dtype=DT)
    wrapped, chain = _auto(model, x)
    assert any("5 concatenation(s) extend the one before" in note for note in wrapped.capture.notes)
    dense_stages = [name for name in chain.names if "denselayer" in name or "denseblock" in name]
    assert len(dense_stages) >= 5, chain.names
    assert wrapped.executor.min_budget_bytes < 0.7 * plain_peak_bytes(wrapped.executor._last)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_running_concatenation_trains_like_plain_autograd_bit_for_bit(dtype):
    torch.manual_seed(0)
    model = TVDenseNet(blocks=(4, 3), drop_rate=0.2).to(dtype)
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 16, 16, dtype=dtype)
    y = torch.randint(0, 10, (4,))
    wrapped, chain = _auto(model, x)
    lo, hi = wrapped.executor.min_budget_bytes, plain_peak_bytes(wrapped.executor._last)
    wrapped.replan(int(lo + 0.3 * (hi - lo)))
    assert sum(op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE) for op in wrapped.plan.schedule) > chain.n
    for step in range(2):
        torch.manual_seed(step)
        loss = F.cross_entropy(wrapped(x), y)
        loss.backward()
        torch.manual_seed(step)
        ref_loss = F.cross_entropy(reference(x), y)
        ref_loss.backward()
        assert torch.equal(loss, ref_loss)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(p.grad, q.grad), name
    for (name, a), (_, b) in zip(model.named_buffers(), reference.named_buffers()):
        assert torch.equal(a, b), name


class WritesIntoAFeature(nn.Module):
    """A concatenation that must not be rewritten: the shared feature map changes in between, through a
    view (export rewires a whole-tensor write's later uses to its result, but not a view's)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(2, 2, 1), nn.Conv2d(2, 2, 1), nn.Conv2d(4, 2, 1)

    def forward(self, x):
        f0 = self.a(x)
        first = torch.cat([f0], 1)
        g = self.b(first)
        f0[:, :1].mul_(2.0)
        return self.c(torch.cat([f0, g], 1)).sum() + first.sum()


def test_running_concatenation_skips_a_list_written_in_between():
    torch.manual_seed(0)
    model = WritesIntoAFeature().to(DT)
    x = torch.randn(2, 2, 4, 4, dtype=DT)
    wrapped, _ = _auto(model, x)
    assert not any("concatenation" in note for note in wrapped.capture.notes)
    assert torch.equal(wrapped(x), model(x))


class EditedUnderNoGrad(nn.Module):
    """A shared feature map edited through a view inside ``no_grad`` (export puts the edit in a
    sub-graph) between two concatenations; with ``autocast`` the same through an autocast region."""

    def __init__(self, region="no_grad"):
        super().__init__()
        self.l, self.l2, self.region = nn.Linear(2, 2), nn.Linear(2, 1), region

    def forward(self, x):
        a, b = self.l(x), self.l2(x)
        first = torch.cat([a, b], 1)
        region = torch.no_grad() if self.region == "no_grad" else torch.autocast("cpu", enabled=False)
        with region:
            a[:, :1].mul_(2)
        both = torch.cat([a, b, x], 1)
        return (both * both).sum() + first.sum()


class PromotesDifferently(nn.Module):
    """cat([int64, f16]) is f16 (2049 -> 2048), cat([int64, f16, f32]) is f32 (2049 exact)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1)

    def forward(self, x, ids):
        h = self.lin(x)
        half = h.half()
        first = torch.cat([ids, half], 1)
        both = torch.cat([ids, half, h], 1)
        return both[:, 0].sum() + first[:, 1].float().sum()


class ForeachWrite(nn.Module):
    """A shared tensor written by an op that takes a list of tensors to write into."""

    def __init__(self):
        super().__init__()
        self.l, self.l2 = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        a, b = self.l(x), self.l2(x)
        first = torch.cat([a, b], 1)
        torch._foreach_mul_([a[:, :], b], 2.0)
        both = torch.cat([a, b, x], 1)
        return (both * both).sum() + first.sum()


@pytest.mark.parametrize("make", [lambda: EditedUnderNoGrad("no_grad"), lambda: EditedUnderNoGrad("autocast"),
                                  PromotesDifferently, ForeachWrite],
                         ids=["no_grad-region", "autocast-region", "dtype-promotion", "foreach-write"])
def test_running_concatenation_keeps_the_models_values(make):
    """Each of these was rewritten into a different result before the rewrite learned to skip it
    (helper review: plain 19.333 vs 17.185; 72050.09 vs inf)."""
    torch.manual_seed(0)
    model = make()
    reference = copy.deepcopy(model)
    args = (torch.randn(4, 2),) if not isinstance(model, PromotesDifferently) else \
        (torch.randn(2, 1), torch.tensor([[2049], [70000]]))
    wrapped = te.auto_checkpoint(model, "1GiB", backend="cpu", sample=args)
    loss, ref = wrapped(*args), reference(*args)
    assert torch.equal(loss, ref)
    loss.backward()
    ref.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad), name
