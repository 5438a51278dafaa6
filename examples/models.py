"""Models that are not nn.Sequential, as users write them: what ``examples/train.py`` trains and the
any-model tests (``tests/test_auto.py``) check ``auto_checkpoint`` on."""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from torch_exec.split import Block


# ---------------------------------------------------------------------------- torchvision-style ResNet
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's layout: forward calls ``self.relu`` and ``torch.flatten``."""

    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, width))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ---------------------------------------------------------------------------- DenseNet-style
class DenseLayer(nn.Module):
    """Concatenates inside the module: ``x -> cat(x, f(x))``."""

    def __init__(self, cin: int, growth: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(cin)
        self.conv = nn.Conv2d(cin, growth, 3, 1, 1, bias=False)

    def forward(self, x):
        return torch.cat([x, self.conv(F.relu(self.bn(x)))], 1)


class DenseNet(nn.Module):
    def __init__(self, growth: int = 4, layers: int = 4, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        c = 8
        blocks = []
        for _ in range(layers):
            blocks.append(DenseLayer(c, growth))
            c += growth
        self.block = nn.Sequential(*blocks)
        self.norm = nn.BatchNorm2d(c)
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        x = self.block(self.stem(x))
        x = F.adaptive_avg_pool2d(F.relu(self.norm(x)), 1)
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------------------- torchvision's DenseNet, restated
class _DenseLayer(nn.Module):
    """torchvision.models.densenet._DenseLayer, restated under its own name (``DenseStage`` recognises
    the class by it): it concatenates the list of earlier feature maps itself, so on one tensor its
    ``torch.cat`` is a copy; ``memory_efficient`` checkpoints that concatenation and ``conv1``."""

    def __init__(self, cin: int, growth: int, bn_size: int = 2, drop_rate: float = 0.0,
                 memory_efficient: bool = False):
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
        if self.memory_efficient and any(t.requires_grad for t in prev):
            bottleneck = checkpoint(lambda *inputs: self.bn_function(list(inputs)), *prev, use_reentrant=False)
        else:
            bottleneck = self.bn_function(prev)
        new = self.conv2(self.relu2(self.norm2(bottleneck)))
        if self.drop_rate > 0:
            new = F.dropout(new, p=self.drop_rate, training=self.training)
        return new


TVDenseLayer = _DenseLayer


class TVDenseBlock(nn.ModuleDict):
    """torchvision's _DenseBlock: every layer reads the list of all earlier feature maps."""

    def forward(self, init):
        features = [init]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class TVDenseNet(nn.Module):
    """torchvision's DenseNet layout (``features`` with stem, dense blocks, transitions and ``norm5``; a
    Linear ``classifier``; the same forward), small by default; DenseNet-121 is
    ``TVDenseNet(growth=32, blocks=(6, 12, 24, 16), init=64, classes=1000, bn_size=4)`` (torchvision's
    stem is a 7x7 stride-2 convolution; here a 3x3 one keeps small inputs usable)."""

    def __init__(self, growth: int = 4, blocks=(3, 2), init: int = 8, classes: int = 10, drop_rate: float = 0.0,
                 bn_size: int = 2):
        super().__init__()
        feats = OrderedDict(conv0=nn.Conv2d(3, init, 3, padding=1, bias=False), norm0=nn.BatchNorm2d(init),
                            relu0=nn.ReLU(inplace=True), pool0=nn.MaxPool2d(3, 2, 1))
        c = init
        for b, n in enumerate(blocks):
            block = TVDenseBlock()
            for i in range(n):
                block[f"denselayer{i + 1}"] = TVDenseLayer(c, growth, bn_size, drop_rate)
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
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1))


# ---------------------------------------------------------------------------- transformer with a ModuleList
class Transformer(nn.Module):
    """Token ids in; ``{"logits", "loss"}`` out (the loss when ``targets`` are given)."""

    def __init__(self, vocab: int = 97, width: int = 32, heads: int = 4, layers: int = 3, context: int = 64):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))  # GPT-2's pre-norm block
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids, targets=None):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        out = {"logits": logits}
        if targets is not None:
            out["loss"] = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return out


class GatedTransformer(Transformer):
    """Data-dependent Python control flow (torch.export cannot capture it): the blocks' ModuleList is the chain."""

    def forward(self, ids, targets=None):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None]
        if x.abs().max() > 1e6:  # data-dependent
            x = x / 2
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class Tangled(nn.Module):
    """Data-dependent control flow and no list of chained blocks: no chain can be found."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        y = self.a(x)
        if y.sum() > 0:
            y = self.b(y)
        return y.square().mean()


def gpt2(layers: int = 2, width: int = 32, heads: int = 4, vocab: int = 101, context: int = 64):
    """transformers' GPT2LMHeadModel from a small config with random weights (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging
    logging.set_verbosity_error()
    cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=context,
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def make(name: str, batch: int = 4, seed: int = 0):
    """(model, args, kwargs, loss_of(output)) for a test model by name."""
    torch.manual_seed(seed)
    if name == "resnet":
        model = ResNet()
        x = torch.randn(batch, 3, 32, 32)
        y = torch.randint(0, 10, (batch,))
        return model, (x,), {}, lambda out: F.cross_entropy(out, y)
    if name == "densenet":
        model = DenseNet()
        x = torch.randn(batch, 3, 16, 16)
        y = torch.randint(0, 10, (batch,))
        return model, (x,), {}, lambda out: F.cross_entropy(out, y)
    if name == "tvdensenet":
        model = TVDenseNet()
        x = torch.randn(batch, 3, 16, 16)
        y = torch.randint(0, 10, (batch,))
        return model, (x,), {}, lambda out: F.cross_entropy(out, y)
    if name == "transformer":
        model = Transformer()
        ids = torch.randint(0, 97, (batch, 24))
        return model, (ids,), {"targets": ids}, lambda out: out["loss"]
    if name == "gated":
        model = GatedTransformer()
        ids = torch.randint(0, 97, (batch, 24))
        return model, (ids,), {"targets": ids}, lambda out: out
    if name == "gpt2":
        model = gpt2()
        ids = torch.randint(0, 101, (batch, 24))
        return model, (ids,), {"labels": ids, "use_cache": False}, lambda out: out.loss
    raise KeyError(f"unknown test model {name!r}; one of resnet, densenet, tvdensenet, transformer, gated, gpt2")


NAMES = ("resnet", "densenet", "tvdensenet", "transformer", "gpt2")
