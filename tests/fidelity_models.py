"""Small models of six styles for the fidelity tests (CPU): each an ``nn.Sequential`` whose last
stage is the loss, and a sample input. ``bench/fidelity.py`` measures other (larger) models, so
these tests do not become the definition of what works."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torch_exec.split import CrossEntropyStage


class Bottleneck(nn.Module):
    def __init__(self, c, mid, stride=1):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.down = None if stride == 1 else nn.Sequential(nn.Conv2d(c, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.b1(self.c1(x)))
        out = self.relu(self.b2(self.c2(out)))
        return self.relu(self.b3(self.c3(out)) + identity)


def resnet(batch=4, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 24, 3, padding=1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True),
        Bottleneck(24, 12), Bottleneck(24, 12), Bottleneck(24, 12, 2), Bottleneck(24, 12),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10), CrossEntropyStage(torch.randint(0, 10, (batch,))))
    return model, torch.randn(batch, 3, 32, 32)


class DenseLayer(nn.Module):
    """``x -> cat(x, layer(x))``: the layer's output is saved by no backward (cat only slices)."""

    def __init__(self, c, growth):
        super().__init__()
        self.n1, self.c1 = nn.BatchNorm2d(c), nn.Conv2d(c, 4 * growth, 1, bias=False)
        self.n2, self.c2 = nn.BatchNorm2d(4 * growth), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x):
        h = self.c1(F.relu(self.n1(x)))
        return torch.cat([x, self.c2(F.relu(self.n2(h)))], 1)


def densenet(batch=4, seed=0):
    torch.manual_seed(seed)
    layers, c = [nn.Conv2d(3, 16, 3, padding=1, bias=False)], 16
    for block in range(2):
        for _ in range(4):
            layers.append(DenseLayer(c, 8))
            c += 8
        if block == 0:
            layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
            c //= 2
    layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10),
               CrossEntropyStage(torch.randint(0, 10, (batch,)))]
    return nn.Sequential(*layers), torch.randn(batch, 3, 32, 32)


def vgg(batch=8, seed=0):
    """VGG-style with in-place ReLUs (each fused with the conv before it) and dropout; deep at full
    resolution, so that activations outweigh a CPU convolution's backward workspace."""
    torch.manual_seed(seed)
    layers, c = [], 3
    for v in (8,) * 8 + ("M",) + (16,) * 4 + ("M", 32, 32, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
            c = v
    layers += [nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * c, 64), nn.ReLU(inplace=True), nn.Dropout(0.5),
               nn.Linear(64, 10), CrossEntropyStage(torch.randint(0, 10, (batch,)))]
    return nn.Sequential(*layers), torch.randn(batch, 3, 32, 32)


class Block(nn.Module):
    """Pre-norm transformer block with causal attention and dropout."""

    def __init__(self, width, heads, p=0.1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, dropout=p, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(p))

    def forward(self, x):
        a = self.ln1(x)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
        x = x + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Embed(nn.Module):
    def __init__(self, vocab, width, context, p=0.1):
        super().__init__()
        self.tok, self.pos, self.drop = nn.Embedding(vocab, width), nn.Embedding(context, width), nn.Dropout(p)

    def forward(self, idx):
        return self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)))


class LMHead(nn.Module):
    def __init__(self, width, vocab):
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, x):
        return self.fc(self.ln(x))


def transformer(batch=4, context=48, width=48, vocab=300, layers=4, seed=0):
    torch.manual_seed(seed)
    targets = torch.randint(0, vocab, (batch, context))
    model = nn.Sequential(Embed(vocab, width, context), *[Block(width, 4) for _ in range(layers)],
                          LMHead(width, vocab), CrossEntropyStage(targets))
    return model, torch.randint(0, vocab, (batch, context))


class Widen(nn.Module):
    """A wide tensor that its own backward keeps (ReLU saves its output)."""

    def __init__(self, width, wide):
        super().__init__()
        self.fc = nn.Linear(width, wide)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Narrow(nn.Module):
    """Returns a new narrow tensor and passes on the wide one it read (Note [Outputs passed through])."""

    def __init__(self, wide, width):
        super().__init__()
        self.fc = nn.Linear(wide, width)

    def forward(self, h):
        return self.fc(h), h


class Merge(nn.Module):
    """Consumes the pair: the narrow tensor plus a slice of the wide one."""

    def forward(self, pair):
        s, h = pair
        return torch.tanh(s + h[:, :s.shape[1]])


def passthrough(batch=16, width=32, wide=512, layers=8, classes=10, seed=0):
    """Stages whose output holds a tensor an earlier stage made: a checkpoint of it holds that too."""
    torch.manual_seed(seed)
    targets = torch.randint(0, classes, (batch,))
    blocks = [m for _ in range(layers) for m in (Widen(width, wide), Narrow(wide, width), Merge())]
    model = nn.Sequential(*blocks, nn.Linear(width, classes), CrossEntropyStage(targets))
    return model, torch.randn(batch, width)


def inplace_input(batch=512, width=64, layers=6, classes=10, seed=0):
    """An in-place first stage: the executor clones the input for it, and the clone is a_1."""
    torch.manual_seed(seed)
    targets = torch.randint(0, classes, (batch,))
    body = [m for _ in range(layers) for m in (nn.Linear(width, width), nn.Tanh())]
    model = nn.Sequential(nn.ReLU(inplace=True), *body, nn.Linear(width, classes), CrossEntropyStage(targets))
    return model, torch.randn(batch, width)


MODELS = {"resnet": resnet, "densenet": densenet, "vgg": vgg, "transformer": transformer,
          "passthrough": passthrough, "inplace_input": inplace_input}
