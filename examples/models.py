"""Models that are not nn.Sequential, as users write them: what ``examples/train.py`` trains and the
any-model tests (``tests/test_auto.py``) check ``auto_checkpoint`` on."""
from __future__ import annotations

import math
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


# ---------------------------------------------------------------------------- join networks
def clip_loss(a, b, scale: float = 1 / 0.07):
    """CLIP's contrastive loss between two batches of embeddings (row i of ``a`` pairs with row i of ``b``)."""
    logits = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T * scale
    target = torch.arange(a.shape[0], device=a.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


class TextTower(nn.Module):
    """Token ids and a padding mask in, one embedding per sequence out (masked mean of GPT-2 blocks)."""

    def __init__(self, vocab: int = 97, width: int = 32, heads: int = 4, layers: int = 3, context: int = 64,
                 dim: int = 16):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.proj = nn.Linear(width, dim, bias=False)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None]
        for block in self.blocks:
            x = block(x)
        m = mask[..., None].to(x.dtype)
        return self.proj((self.ln(x) * m).sum(1) / m.sum(1))


class TwoTower(nn.Module):
    """CLIP-style: an image tower and a text tower meeting at a contrastive loss (a join of 2 branches).
    ``forward(images, ids, mask)`` returns the loss, or with ``embeddings=True`` a dict of the loss and
    both towers' embeddings."""

    def __init__(self, width: int = 8, dim: int = 16, embeddings: bool = False):
        super().__init__()
        self.image = ResNet(width=width, classes=dim)
        self.text = TextTower(dim=dim)
        self.embeddings = embeddings

    def forward(self, images, ids, mask):
        a, b = self.image(images), self.text(ids, mask)
        loss = clip_loss(a, b)
        if self.embeddings:
            return {"loss": loss, "image_embeds": a, "text_embeds": b}
        return loss


class TypedTextTower(TextTower):
    """A BERT-style text tower: token ids and token-type (segment) ids meet at its embedding, so its two
    inputs form one branch of a two-tower join (Note [Join detection], merged groups)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tte = nn.Embedding(2, self.wte.embedding_dim)

    def forward(self, ids, types, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None] + self.tte(types)
        for block in self.blocks:
            x = block(x)
        m = mask[..., None].to(x.dtype)
        return self.proj((self.ln(x) * m).sum(1) / m.sum(1))


class TwoTowerTyped(nn.Module):
    """:class:`TwoTower` with a :class:`TypedTextTower`: ``forward(images, ids, types, mask)`` returns the loss."""

    def __init__(self, width: int = 8, dim: int = 16, text_width: int = 32, text_layers: int = 3):
        super().__init__()
        self.image = ResNet(width=width, classes=dim)
        self.text = TypedTextTower(dim=dim, width=text_width, layers=text_layers)

    def forward(self, images, ids, types, mask):
        return clip_loss(self.image(images), self.text(ids, types, mask))


class Encoder(nn.Module):
    """A small convolutional encoder with BatchNorm and dropout (a Siamese network's shared branch)."""

    def __init__(self, width: int = 8, dim: int = 16, p: float = 0.1):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, 2 * width, 3, 2, 1), nn.BatchNorm2d(2 * width), nn.ReLU(),
                                  nn.Conv2d(2 * width, 2 * width, 3, 1, 1), nn.ReLU(), nn.Dropout(p),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, dim))

    def forward(self, x):
        return self.body(x)


class Siamese(nn.Module):
    """One encoder applied to both images of each pair (shared weights and BatchNorm statistics),
    meeting at a contrastive loss with the pairs' labels (1: same, 0: different)."""

    def __init__(self, width: int = 8, dim: int = 16, margin: float = 1.0):
        super().__init__()
        self.encoder = Encoder(width, dim)
        self.margin = margin

    def forward(self, x1, x2, same):
        d = F.pairwise_distance(self.encoder(x1), self.encoder(x2))
        return (same * d.pow(2) + (1 - same) * F.relu(self.margin - d).pow(2)).mean()


class Triplet(nn.Module):
    """Anchor, positive and negative through one encoder (a join of 3 branches) to a triplet loss."""

    def __init__(self, width: int = 8, dim: int = 16):
        super().__init__()
        self.encoder = Encoder(width, dim, p=0.0)
        self.loss = nn.TripletMarginLoss()

    def forward(self, anchor, positive, negative):
        return self.loss(self.encoder(anchor), self.encoder(positive), self.encoder(negative))


def gpt2(layers: int = 2, width: int = 32, heads: int = 4, vocab: int = 101, context: int = 64):
    """transformers' GPT2LMHeadModel from a small config with random weights (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging
    logging.set_verbosity_error()
    cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=context,
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


class GeluNew(nn.Module):
    """transformers' NewGELUActivation: its multiplications save three Python numbers (0-dim float64),
    which autograd keeps without calling the saved-tensor hooks."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class _KeepOnCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.kept = x.exp()  # held by the node, not through save_for_backward: no pack hook sees it
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2 + 0 * ctx.kept


class CtxKeep(nn.Module):
    """A custom Function that keeps a tensor on its ctx (no saved-tensor hook sees it)."""

    def forward(self, x):
        return _KeepOnCtx.apply(x)


def activation_mlp(act, seed: int = 0) -> nn.Sequential:
    """Linear 4 -> 64, six (``act()``, Linear 64 -> 64), Linear 64 -> 3, in float64: the MLPs of Note [Kept
    past the hooks] in torch_exec/paper_offload.py (``act``: :class:`GeluNew` or :class:`CtxKeep`)."""
    torch.manual_seed(seed)
    layers = [nn.Linear(4, 64)]
    for _ in range(6):
        layers += [act(), nn.Linear(64, 64)]
    return nn.Sequential(*layers, nn.Linear(64, 3)).double()


def bert_probe(seed: int = 0):
    """A linear probe: transformers' BertForSequenceClassification (2 layers, width 128, 3 labels, random
    weights) with its embeddings and encoder frozen, and a batch of 2 x 32 tokens (``(model, batch)``)."""
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(seed)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, num_labels=3)).train()
    for p in [*model.bert.encoder.parameters(), *model.bert.embeddings.parameters()]:
        p.requires_grad_(False)
    return model, dict(input_ids=torch.randint(0, 1000, (2, 32)), labels=torch.tensor([0, 2]))


class _ProbeTower(nn.Module):
    def __init__(self, d_in: int, width: int, depth: int, dim: int):
        super().__init__()
        layers = []
        for i in range(depth):
            layers += [nn.Linear(d_in if i == 0 else width, width), nn.ReLU()]
        self.backbone = nn.Sequential(*layers)
        self.proj = nn.Linear(width, dim)

    def forward(self, x):
        return self.proj(self.backbone(x))


class FrozenTwoTower(nn.Module):
    """A two-tower (CLIP-style) linear probe: an image MLP and a text tower (embedding, MLP), both
    backbones frozen, their projections trained; ``(images (B, 768), ids (B, 8)) -> loss``."""

    def __init__(self):
        super().__init__()
        self.image = _ProbeTower(768, 512, 6, 32)
        self.text = nn.Sequential(nn.Embedding(100, 64), nn.Flatten(), _ProbeTower(64 * 8, 256, 4, 32))
        for tower in (self.image.backbone, self.text[0], self.text[2].backbone):
            tower.requires_grad_(False)

    def forward(self, images, ids):
        a = F.normalize(self.image(images), dim=1)
        b = F.normalize(self.text(ids), dim=1)
        return F.cross_entropy(a @ b.T / 0.07, torch.arange(a.shape[0], device=a.device))


def plain_step_peak(model: nn.Module, args: tuple) -> int:
    """Plain autograd's whole step on ``model(*args)`` (a loss), its peak of allocated bytes measured
    around the call with parameter gradients allocated before (the CPU allocator, or the device's)."""
    from torch_exec.meter import MemoryMeter
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    device = next(t.device for t in args if isinstance(t, torch.Tensor))
    with MemoryMeter(device) as meter:
        start = meter.mark()
        model(*args).backward()
        end = meter.mark()
    return meter.between(start, end).peak


class _WideBlock(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, h):
        return h + self.down(torch.tanh(self.up(h)))


class _TiedHead(nn.Module):
    """Logits from the input embedding's weight (tied, as GPT-2's head), and their cross-entropy."""

    def __init__(self, embedding: nn.Embedding, targets: torch.Tensor):
        super().__init__()
        self.embedding = embedding
        self.register_buffer("targets", targets)

    def forward(self, h):
        return F.cross_entropy(h @ self.embedding.weight.T, self.targets)


def tied_lm(vocab: int = 2000, width: int = 128, hidden: int = 2048, blocks: int = 6, tokens: int = 32,
            seed: int = 0) -> nn.Sequential:
    """A language model whose output head reads the input embedding's weight (tied, as GPT-2's), ending in
    its loss over ``tokens`` fixed targets: ``model(ids).backward()``. At these sizes the tied weight
    (vocab x width) outweighs a block's tape, so plain autograd's buffer of its summed gradient (from the
    head's backward to the embedding's) decides the peak (Note [Shared leaves split tape runs] in
    torch_exec/executor.py)."""
    torch.manual_seed(seed)
    embedding = nn.Embedding(vocab, width)
    head = _TiedHead(embedding, torch.randint(0, vocab, (tokens,)))
    return nn.Sequential(embedding, *[_WideBlock(width, hidden) for _ in range(blocks)], head)


class _Pre(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.lin(x))


class _AuxAndBranch(nn.Module):
    """An auxiliary head (a large weight gradient) made first, then a small branch b1."""

    def __init__(self, width: int, hidden: int, aux: int, branch: int):
        super().__init__()
        self.fc1, self.fc2, self.b1 = nn.Linear(width, hidden), nn.Linear(hidden, aux), nn.Linear(width, branch)

    def forward(self, h):
        aux = self.fc2(torch.relu(self.fc1(h)))
        return h, torch.relu(self.b1(h)), aux


class _PassOn(nn.Module):
    """Passes b1 on unchanged beside a wide branch b2."""

    def __init__(self, repeat: int):
        super().__init__()
        self.repeat = repeat

    def forward(self, state):
        h, b1, aux = state
        return b1, torch.tanh(h.repeat(1, self.repeat)), aux


class _Cat(nn.Module):
    """The cat of b1 and b2: its gradient is one buffer, and b1's gradient a slice of it."""

    def __init__(self, channels: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(channels))

    def forward(self, state):
        b1, b2, aux = state
        return torch.cat([b1, b2], 1) * self.w, aux


class _TwoLosses(nn.Module):
    def forward(self, state):
        z, aux = state
        return z.square().mean() + aux.square().mean()


CAT_SLICE = dict(width=64, hidden=4096, aux=8, branch=16)


def cat_slice(repeat: int = 128, seed: int = 0) -> nn.Sequential:
    """Five stages whose states are tuples, ending in their loss, ``model(x).backward()`` with ``x`` of width
    ``CAT_SLICE["width"]``: a small branch b1 passed on unchanged to a later ``cat`` beside a wide branch
    (``repeat`` x the width), and an auxiliary head carried to the loss, as an inception block's branch and
    GoogLeNet's auxiliary heads are. b1's gradient is a slice of the cat's, which keeps the whole buffer
    allocated until b1's own backward (Note [Gradients that are views] in gpusolve/chain.py)."""
    torch.manual_seed(seed)
    d = CAT_SLICE["width"]
    return nn.Sequential(_Pre(d), _AuxAndBranch(d, CAT_SLICE["hidden"], CAT_SLICE["aux"], CAT_SLICE["branch"]),
                         _PassOn(repeat), _Cat(CAT_SLICE["branch"] + d * repeat), _TwoLosses())


class WithCrossEntropy(nn.Module):
    """A classifier and its loss as one model, ``(x, y) -> loss``: the loss's own memory (cross-entropy
    saves its log-softmax) is then the model's, inside the budget, instead of the caller's."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return F.cross_entropy(self.model(x), y)


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
    if name in ("two_tower", "two_tower_embeddings"):
        model = TwoTower(embeddings=name == "two_tower_embeddings")
        images = torch.randn(batch, 3, 32, 32)
        ids = torch.randint(0, 97, (batch, 24))
        mask = torch.ones(batch, 24, dtype=torch.long)
        mask[:, 20:] = 0
        loss_of = (lambda out: out["loss"]) if model.embeddings else (lambda out: out)
        return model, (images, ids, mask), {}, loss_of
    if name == "two_tower_typed":
        model = TwoTowerTyped()
        ids = torch.randint(0, 97, (batch, 24))
        mask = torch.ones(batch, 24, dtype=torch.long)
        mask[:, 20:] = 0
        args = (torch.randn(batch, 3, 32, 32), ids, torch.randint(0, 2, (batch, 24)), mask)
        return model, args, {}, lambda out: out
    if name == "siamese":
        model = Siamese()
        same = (torch.arange(batch) % 2).float()
        return model, (torch.randn(batch, 3, 16, 16), torch.randn(batch, 3, 16, 16), same), {}, lambda out: out
    if name == "triplet":
        model = Triplet()
        return model, tuple(torch.randn(batch, 3, 16, 16) for _ in range(3)), {}, lambda out: out
    if name.endswith("_loss") and name[:-5] in ("resnet", "densenet", "tvdensenet"):
        model, (x,), _, _ = make(name[:-5], batch, seed)
        y = torch.randint(0, 10, (batch,))
        return WithCrossEntropy(model), (x, y), {}, lambda out: out
    raise KeyError(f"unknown test model {name!r}; one of resnet, densenet, tvdensenet (each also with _loss: the "
                   f"loss inside the model), transformer, gated, gpt2, two_tower, two_tower_embeddings, two_tower_typed, "
                   f"siamese, triplet")



class SpectralResidual(nn.Module):
    """6 x ``x = relu(spectral_norm(Linear(32, 32))(x)) + x``: a forward pre-hook doing a power iteration on its
    buffers in every forward and recomputation (review rv20a; tests/test_caller_turn.py, bench/caller_turn_trace.py)."""

    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(nn.utils.spectral_norm(nn.Linear(32, 32)) for _ in range(6))

    def forward(self, x):
        for layer in self.l:
            x = torch.relu(layer(x)) + x
        return x


class ConvResidual(nn.Module):
    """5 residual Conv2d(16, 16, 3) -> BatchNorm2d -> ReLU blocks (review rv20a runs it in channels_last)."""

    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
                               for _ in range(5))

    def forward(self, x):
        for block in self.l:
            x = block(x) + x
        return x

NAMES = ("resnet", "densenet", "tvdensenet", "transformer", "gpt2")
