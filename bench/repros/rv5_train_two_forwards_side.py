"""Two calls of the wrapper before one backward (a Siamese/contrastive pair of views, R-Drop, two micro-batches
summed): the captured program's side values (data made from the inputs: a mask, position ids; under the block
fallback the blocks' other arguments) live on the capture, one slot per input signature (auto.py's _Side /
_substituted's box), and the second call overwrites them. When the backward recomputes a stage of the first
call, that stage reads the second call's mask: the first call's gradients are computed with the wrong data.
The losses are right, the gradients are not, no warning. Plain autograd keeps each call's own tensors."""
import copy
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT

D = 32


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, h, keep):
        return torch.tanh(self.lin(h)) * keep


class Masked(nn.Module):
    """Six blocks, each multiplying by a mask made from the input ``mask`` (side data: no gradient)."""

    def __init__(self, L=6):
        super().__init__()
        self.blocks = nn.ModuleList(Blk() for _ in range(L))
        self.head = nn.Linear(D, 1)

    def forward(self, x, mask):
        keep = (mask > 0).float()
        h = x
        for b in self.blocks:
            h = b(h, keep)
        return self.head(h).mean()


bad = False
for capture, budget in (("export", "40%"), ("blocks", "55%")):
    torch.manual_seed(0)
    ref = Masked()
    model = copy.deepcopy(ref)
    w = te.auto_checkpoint(model, budget, backend="cpu", capture=capture)
    x1, x2 = torch.randn(64, D), torch.randn(64, D)
    m1, m2 = (torch.rand(64, D) > 0.5).long(), torch.ones(64, D, dtype=torch.long)
    w.prepare(x1, m1)
    loss = w(x1, m1) + w(x2, m2)      # two views / two micro-batches, one backward
    loss.backward()
    expected = ref(x1, m1) + ref(x2, m2)
    expected.backward()
    diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    scale = max(q.grad.abs().max().item() for q in ref.blocks[0].parameters())
    print(f"capture={capture} budget {budget}: loss observed {loss.item():.6f} expected {expected.item():.6f}; "
          f"max |grad - plain grad| {diff:.3e} (largest plain grad of blocks.0: {scale:.3e})")
    bad |= diff > 1e-6 * scale
# the same step, one call then its backward: exact (the mask is the call's own)
print("BUG: gradients differ from plain autograd" if bad else "ok")
sys.exit(1 if bad else 0)
