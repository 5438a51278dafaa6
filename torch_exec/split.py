"""Cut common networks into stage lists (``nn.Sequential`` of stages) for profiling and execution.

Duck-typed on the torchvision model classes (no torchvision import here):
- VGG: every layer of ``features``, ``avgpool``, flatten, every layer of ``classifier``;
- ResNet: ``conv1``, ``bn1``, ``relu``, ``maxpool``, each block of ``layer1..4``, head (avgpool+flatten+fc);
- DenseNet: each op of ``features`` outside dense blocks, each dense layer as ``x -> cat(x, layer(x))``
  (Note [Dense layers without the copy]),
  head (ReLU + adaptive avgpool + flatten + classifier).
With ``targets`` the last stage is the cross-entropy loss against them.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as M


# Note [Dense layers without the copy]
# torchvision's ``_DenseLayer`` takes the list of earlier features and concatenates it itself
# (``bn_function``: ``norm1(torch.cat(inputs, 1))``). Called on the one tensor a chain stage holds,
# that ``cat`` of a single tensor is a copy: ``norm1`` saves the copy, so no backward saves the stage's
# input. The profiler then sees every boundary inside a dense block saved by no backward, and
# ``Chain.from_profile`` rightly fuses the whole block into one stage (Note [Tensors no backward
# saves]): DenseNet-121's chain would have 7 stages, and every dense layer would allocate a copy of
# its input. ``DenseStage`` therefore runs such a layer's ops on its input itself: ``norm1`` saves
# ``x``, the boundaries stay, and the values are the copy's, bit for bit. It does so only for a class
# named ``_DenseLayer`` (torchvision's; a subclass may change ``forward``) whose six ops have the
# expected types (BatchNorm first: an in-place ReLU on the input itself would overwrite it), that is
# not ``memory_efficient`` (it checkpoints inside) and while no hook, the layer's own or a global
# module hook, would miss the call; any other layer is called as it is. Measured on the bundled
# profile, where the copy explains the model's store-all excess over the measured peak to 0.4 %
# (bench/results/densenet_copy.md).
_DENSE_LAYER_OPS = {"norm1": nn.modules.batchnorm._BatchNorm, "relu1": nn.ReLU, "conv1": nn.Conv2d,
                    "norm2": nn.modules.batchnorm._BatchNorm, "relu2": nn.ReLU, "conv2": nn.Conv2d}


def _module_hooks(module: nn.Module) -> bool:
    """Whether a call of ``module`` would run a hook of its own or a global module hook."""
    own = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks)
    shared = (M._global_forward_hooks, M._global_forward_pre_hooks, M._global_backward_hooks,
              M._global_backward_pre_hooks)
    return any(bool(hooks) for hooks in own + shared)


class DenseStage(nn.Module):
    """A DenseNet dense layer as a chain stage: ``x -> cat(x, layer(x))`` (torchvision's layers run
    without their input copy, Note [Dense layers without the copy])."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    @property
    def direct(self) -> bool:
        """Whether the next call runs the layer's ops without its input copy."""
        layer = self.layer
        return (type(layer).__name__ == "_DenseLayer"
                and all(isinstance(getattr(layer, op, None), kind) for op, kind in _DENSE_LAYER_OPS.items())
                and not getattr(layer, "memory_efficient", False) and not _module_hooks(layer))

    def new_features(self, x):
        layer = self.layer
        if not self.direct:
            return layer(x)
        new = layer.conv2(layer.relu2(layer.norm2(layer.conv1(layer.relu1(layer.norm1(x))))))
        drop = float(getattr(layer, "drop_rate", 0.0))
        if drop > 0:
            new = F.dropout(new, p=drop, training=layer.training)
        return new

    def forward(self, x):
        return torch.cat([x, self.new_features(x)], 1)


class Head(nn.Module):
    """ReLU (optional) + adaptive average pool + flatten + linear classifier."""

    def __init__(self, fc: nn.Module, avgpool: nn.Module | None = None, relu: bool = False):
        super().__init__()
        self.fc = fc
        self.avgpool = avgpool if avgpool is not None else nn.AdaptiveAvgPool2d((1, 1))
        self.relu = relu

    def forward(self, x):
        if self.relu:
            x = F.relu(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


class CrossEntropyStage(nn.Module):
    """The loss as the chain's last stage; ``targets`` is a plain attribute (set it per batch)."""

    def __init__(self, targets: torch.Tensor | None = None):
        super().__init__()
        self.targets = targets

    def forward(self, logits):
        if logits.dim() == 3:  # (batch, tokens, vocab)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.targets.reshape(-1))
        return F.cross_entropy(logits, self.targets)


def split_model(model: nn.Module, targets: torch.Tensor | None = None) -> nn.Sequential:
    """Stages of a torchvision VGG / ResNet / DenseNet (or any ``nn.Sequential``), plus the loss."""
    items: list[tuple[str, nn.Module]] = []
    if isinstance(model, nn.Sequential):
        items = _flatten(model, "")
    elif hasattr(model, "layer1") and hasattr(model, "fc"):
        missing = [a for a in ("conv1", "bn1", "relu", "maxpool", "layer2", "layer3", "layer4", "avgpool")
                   if not hasattr(model, a)]
        if missing:
            raise TypeError(f"{type(model).__name__} looks like a ResNet but has no {', '.join(missing)}: split_model cuts "
                            f"torchvision's layout only; use torch_exec.auto_checkpoint(model, budget) for any model")
        for name in ("conv1", "bn1", "relu", "maxpool"):
            items.append((name, getattr(model, name)))
        for layer in ("layer1", "layer2", "layer3", "layer4"):
            for idx, block in enumerate(getattr(model, layer)):
                items.append((f"{layer}.{idx}", block))
        items.append(("head", Head(model.fc, model.avgpool)))
    elif hasattr(model, "features") and hasattr(model, "classifier") and not isinstance(model.classifier, nn.Sequential):
        for name, child in model.features.named_children():
            if name.startswith("denseblock"):
                for lname, layer in child.named_children():
                    items.append((f"{name}.{lname}", DenseStage(layer)))
            else:
                items.append((name, child))
        items.append(("head", Head(model.classifier, relu=True)))
    elif hasattr(model, "features") and hasattr(model, "classifier"):
        items = _flatten(model.features, "features.")
        items.append(("avgpool", model.avgpool))
        items.append(("flatten", nn.Flatten(1)))
        items += _flatten(model.classifier, "classifier.")
    else:
        raise TypeError(f"split_model does not know how to cut {type(model).__name__} into stages; use "
                        f"torch_exec.auto_checkpoint(model, budget) for any model, or pass a list of stages")
    if targets is not None:
        items.append(("loss", CrossEntropyStage(targets)))
    return nn.Sequential(OrderedDict((name.replace(".", "_"), module) for name, module in items))


def _flatten(seq: nn.Sequential, prefix: str) -> list[tuple[str, nn.Module]]:
    out = []
    for name, child in seq.named_children():
        if isinstance(child, nn.Sequential):
            out += _flatten(child, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", child))
    return out


# ---------------------------------------------------------------------------- a GPT-2-like stack
class Embedding(nn.Module):
    def __init__(self, vocab: int, width: int, context: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.wte(tokens) + self.wpe(pos)[None]


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a 4x GELU MLP (GPT-2 layout)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class LMHead(nn.Module):
    def __init__(self, width: int, vocab: int):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.lm = nn.Linear(width, vocab, bias=False)

    def forward(self, x):
        return self.lm(self.ln(x))


# ---------------------------------------------------------------------------- transformers' GPT-2
class HFEmbedding(nn.Module):
    """GPT-2's token and position embeddings and their dropout (``model.transformer``'s first ops)."""

    def __init__(self, transformer: nn.Module):
        super().__init__()
        self.wte, self.wpe, self.drop = transformer.wte, transformer.wpe, transformer.drop

    def forward(self, ids):
        return self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))[None])


class HFBlock(nn.Module):
    """One ``GPT2Block`` on the hidden states alone (no mask, no cache); its hidden states out."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x):
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


class CausalLMLoss(nn.Module):
    """Final norm, LM head and the model's own next-token loss for ``labels`` (``model.loss_function``,
    as ``GPT2LMHeadModel.forward`` computes it)."""

    def __init__(self, model: nn.Module, labels: torch.Tensor | None = None):
        super().__init__()
        self.ln_f, self.lm_head = model.transformer.ln_f, model.lm_head
        self.loss_function, self.vocab_size = model.loss_function, model.config.vocab_size
        self.labels = labels

    def forward(self, x):
        return self.loss_function(self.lm_head(self.ln_f(x)), self.labels, vocab_size=self.vocab_size)


def gpt2_hf_stages(model: nn.Module, labels: torch.Tensor) -> nn.Sequential:
    """transformers' ``GPT2LMHeadModel`` as a chain: embeddings, each block, then norm + head + loss.

    The stages run the model's own modules, so ``stages(ids)`` is ``model(ids, labels=labels,
    use_cache=False).loss`` bit for bit, gradients included (no attention mask: every sequence is full
    length; no key/value cache, which training does not use). A block alone builds no causal mask, so the model
    must use an attention that is causal without one (``sdpa``, transformers' default); eager
    attention would silently attend to later tokens and is refused."""
    config = getattr(model, "config", None)
    if not hasattr(model, "loss_function"):
        raise ValueError("gpt2_hf_stages needs transformers >= 4.46 (the model's loss_function)")
    attention = getattr(config, "_attn_implementation", None)
    if attention not in ("sdpa", "flash_attention_2", "flash_attention_3"):
        raise ValueError(f"gpt2_hf_stages: the model's attention is {attention!r}; a block run alone is causal only "
                         f"with 'sdpa' (the default) or flash attention: load it with attn_implementation='sdpa'")
    items = [("embed", HFEmbedding(model.transformer))]
    items += [(f"h{i}", HFBlock(block)) for i, block in enumerate(model.transformer.h)]
    items.append(("loss", CausalLMLoss(model, labels)))
    return nn.Sequential(OrderedDict(items))


def gpt2_stages(layers: int = 12, width: int = 768, heads: int = 12, vocab: int = 50257, context: int = 1024,
                targets: torch.Tensor | None = None) -> nn.Sequential:
    """A GPT-2-small-like stack in plain torch: embedding, ``layers`` blocks, final norm + LM head, loss."""
    items = [("embed", Embedding(vocab, width, context))]
    items += [(f"block{i}", Block(width, heads)) for i in range(layers)]
    items.append(("head", LMHead(width, vocab)))
    if targets is not None:
        items.append(("loss", CrossEntropyStage(targets)))
    return nn.Sequential(OrderedDict(items))
