"""Note [Dense layers without the copy] (torch_exec/split.py) and the bundled DenseNet profiles' excess.

``TVDenseLayer`` restates torchvision's ``_DenseLayer`` (``memory_efficient=False``): it concatenates its
list input itself, so on one tensor its ``torch.cat`` is a copy of the input. Called that way inside a
chain stage, no backward saves the stage's input, and the profile fuses whole dense blocks.
"""
from __future__ import annotations

import copy
import json
from collections import OrderedDict

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import torch_exec as te  # noqa: E402
from conftest import PROFILES  # noqa: E402
from gpusolve import Chain, store_all_peak_bytes  # noqa: E402
from gpusolve.schedule import OpKind, segments_policy  # noqa: E402
from torch_exec.split import DenseStage, split_model  # noqa: E402

DT = torch.float64


class TVDenseLayer(nn.Module):
    """torchvision.models.densenet._DenseLayer, restated (torchvision is not a test dependency)."""

    def __init__(self, cin, growth, bn_size=2, drop_rate=0.0, memory_efficient=False):
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)
        self.drop_rate, self.memory_efficient = float(drop_rate), memory_efficient

    def bn_function(self, inputs):
        return self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))

    def forward(self, input):
        prev = [input] if isinstance(input, torch.Tensor) else input
        new = self.conv2(self.relu2(self.norm2(self.bn_function(prev))))
        if self.drop_rate > 0:
            new = F.dropout(new, p=self.drop_rate, training=self.training)
        return new


class TVDenseNet(nn.Module):
    """torchvision's DenseNet layout (features with dense blocks and transitions, a Linear classifier)."""

    def __init__(self, growth=4, blocks=(3, 2), init=8, classes=5, drop_rate=0.0):
        super().__init__()
        feats = OrderedDict(conv0=nn.Conv2d(3, init, 3, padding=1, bias=False), norm0=nn.BatchNorm2d(init),
                            relu0=nn.ReLU(inplace=True), pool0=nn.MaxPool2d(3, 2, 1))
        c = init
        for b, n in enumerate(blocks):
            block = nn.ModuleDict()
            for i in range(n):
                block[f"denselayer{i + 1}"] = TVDenseLayer(c, growth, drop_rate=drop_rate)
                c += growth
            feats[f"denseblock{b + 1}"] = block
            if b < len(blocks) - 1:
                feats[f"transition{b + 1}"] = nn.Sequential(OrderedDict(
                    norm=nn.BatchNorm2d(c), relu=nn.ReLU(inplace=True), conv=nn.Conv2d(c, c // 2, 1, bias=False),
                    pool=nn.AvgPool2d(2, 2)))
                c //= 2
        feats["norm5"] = nn.BatchNorm2d(c)
        self.features = nn.Sequential(feats)
        self.classifier = nn.Linear(c, classes)


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


def test_bundled_densenet_excess_is_the_boundaries_no_backward_saves():
    """bench/densenet_copy.py's finding: the bundled DenseNet profiles' model tape exceeds the measured
    retained bytes by the tensors that no backward saves, to within 0.5 %."""
    profiles = {p.stem: json.loads(p.read_text()) for p in PROFILES if p.stem.startswith("densenet")}
    for name, unsaved in (("densenet121_b64", lambda st, s: "denselayer" in st[s + 1]["name"]),
                          ("densenet121_fine_b32", lambda st, s: st[s + 1]["name"].split(".")[-1].startswith("relu")
                           and st[s + 1]["x"] > 0)):
        data = profiles[name]
        st = data["stages"]
        excess = sum(s["xbar"] for s in st) - data["reference"]["retained_after_forward_bytes"]
        explained = sum(st[s]["x"] for s in range(len(st) - 1) if unsaved(st, s))
        assert abs(excess - explained) <= 0.005 * excess, name
        model = store_all_peak_bytes(Chain.from_profile(data))
        assert model > 1.25 * data["reference"]["store_all_peak_bytes"]  # documented, conservative
