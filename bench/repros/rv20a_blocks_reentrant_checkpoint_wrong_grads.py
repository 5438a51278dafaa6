"""A hand-written model that already checkpoints one of its blocks with reentrant ``torch.utils.checkpoint``
(``use_reentrant=True``), as older code bases and transformers' ``gradient_checkpointing_enable()`` on older
versions do: 3 residual blocks (Linear 16 -> 16, tanh) in an ``nn.ModuleList``, the LAST one called through
``checkpoint(block, x, use_reentrant=True)``; ``auto_checkpoint(model, "100%", backend="cpu")``, one step, loss
``out.sum()``, compared with the same model (deepcopy) trained by plain autograd.

Observed (CPU, torch 2.13): torch.export is refused with a warning that names the cause and the fix ("the model runs
custom autograd Functions whose backward torch.export would drop ... torch.utils.checkpoint.CheckpointFunction ...
auto_checkpoint plans the recomputation itself: call the layers without torch.utils.checkpoint"), and the block
fallback then trains anyway: capture.method 'blocks', the plan "schedule given, not solved" (plain autograd's
budget), every parameter's gradient wrong, without an error: l.0.a.weight max diff 4.063 (largest |g| 8.069),
l.0.a.bias 2.828 (6.810), l.1.a.weight 2.430 (4.937); at the least budget (11904 B) the same numbers.
With the FIRST block checkpointed instead (its input needs no grad), plain autograd trains (the block's parameters
get no gradient, PyTorch's known reentrant pitfall; the later blocks do), and the wrapper's output requires no grad:
``loss.backward()`` raises "element 0 of tensors does not require grad and does not have a grad_fn".
With the middle block checkpointed, the gradients equal plain autograd's. With ``use_reentrant=False`` export
captures the model and the gradients equal plain autograd's.

Cause: torch_exec/auto.py ``_capture_export`` refuses ``CHECKPOINT_FUNCTION`` (Note [Custom autograd Functions])
but the refusal is a CaptureError that sends the model to the block fallback (Note [Block fallback]), whose
interception of the block calls (the model's own call of a block returns the chain's result) is not compatible
with CheckpointFunction: its forward calls the block under no_grad, and its backward recomputes the block (which
the fallback again answers with the chain's value) and back-propagates that, so the last block's gradient and
everything before it are computed from the wrong graph.

Expected: either the gradients of plain autograd, or ONE clear CaptureError naming reentrant torch.utils.checkpoint
and the fix (call the blocks without it / use_reentrant=False), as the export warning already says. Exits 1 while a
step trains with gradients off plain autograd's (rtol 1e-5, atol 1e-6) or the wrapper's backward raises where plain
autograd's does not.

Run: GS_ROOT=<tree> python bench/repros/rv20a_blocks_reentrant_checkpoint_wrong_grads.py   (~5 s)"""
import copy
import sys

import torch.utils.checkpoint as tuc
from _setup import nn, te, torch

D = 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, D)

    def forward(self, x):
        return x + torch.tanh(self.a(x))


class Net(nn.Module):
    def __init__(self, checkpointed):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(3))
        self.checkpointed = checkpointed

    def forward(self, x):
        for i, block in enumerate(self.l):
            x = tuc.checkpoint(block, x, use_reentrant=True) if i == self.checkpointed else block(x)
        return x


bad = False
for which in (2, 0, 1):
    torch.manual_seed(0)
    base = Net(which)
    ref, mod = copy.deepcopy(base), copy.deepcopy(base)
    x = torch.randn(4, D)
    ref(x).sum().backward()
    wrapped = te.auto_checkpoint(mod, "100%", backend="cpu")
    try:
        out = wrapped(x)
        out.sum().backward()
    except te.CaptureError as err:  # one clear refusal (the expected fix) is fine
        print(f"block {which} checkpointed: refused: {str(err)[:150]}")
        continue
    except RuntimeError as err:
        bad = True
        print(f"block {which} checkpointed: the wrapper's step raised {type(err).__name__}: {str(err)[:120]}")
        continue
    diffs = []
    for (name, p), q in zip(ref.named_parameters(), mod.parameters()):
        if (p.grad is None) != (q.grad is None):
            diffs.append(f"{name}: grad None ref={p.grad is None} wrapper={q.grad is None}")
        elif p.grad is not None and not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6):
            diffs.append(f"{name}: max diff {(p.grad - q.grad).abs().max().item():.3e} "
                         f"(largest |g| {p.grad.abs().max().item():.3e})")
    method = wrapped.capture.method if wrapped.capture is not None else None
    print(f"block {which} checkpointed ({method}): " + ("; ".join(diffs[:3]) if diffs else "gradients equal"))
    bad |= bool(diffs)

print("BUG: a block under reentrant torch.utils.checkpoint trains with wrong gradients or raises in the wrapper"
      if bad else "ok")
sys.exit(1 if bad else 0)
