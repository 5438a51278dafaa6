"""rv5_user_nested_aux with the auxiliary losses kept in an underscored list attribute (self._aux.append(...),
a common spelling for a private list): the probe skips every attribute whose name starts with "_" unless the
forward replaces it (meant for nn.Module's own _parameters/_buffers/_modules/hook dicts), so this trains
silently wrong under the block fallback: blocks run as stages store their losses without gradient, and the
router weights of those blocks get no gradient. `self._aux = [loss]` (replaced) and `self.aux.append(loss)`
(no underscore) are refused with a CaptureError; this one is not."""
import copy
import sys
import warnings

from _setup import te, torch
from torch import nn

warnings.simplefilter("ignore")
D = 64


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.l, s.g, s._aux = nn.Linear(D, D), nn.Linear(D, 4), []

    def forward(s, x):
        s._aux.append(s.g(x.detach()).pow(2).mean())  # e.g. a router z-loss on the tokens it sees
        return x + torch.tanh(s.l(x))


class M(nn.Module):
    def __init__(s):
        super().__init__()
        s.b = nn.ModuleList([Block() for _ in range(6)])

    def forward(s, x):
        for b in s.b:
            if x.abs().max().item() < 1e6:  # data-dependent control flow: torch.export fails -> block fallback
                x = b(x)
        return x


def aux(m):
    return sum(b._aux.pop() for b in m.b)


torch.manual_seed(0)
ref = M()
model = copy.deepcopy(ref)
bad = 0
try:
    w = te.auto_checkpoint(model, "85%", backend="cpu")
    torch.manual_seed(1)
    x = torch.randn(32, D)
    l1 = w(x).square().mean() + aux(model)
    l1.backward()
    l2 = ref(x).square().mean() + aux(ref)
    l2.backward()
    print(f"loss observed {l1.item():.6f} expected {l2.item():.6f}; {w.capture.notes[0][:60]}")
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        if p.grad is None or not torch.allclose(p.grad, q.grad):
            bad += 1
            print(f"   {n}.grad observed", "None" if p.grad is None else f"max|diff| {(p.grad - q.grad).abs().max():.4f}",
                  "(expected plain autograd's)")
except te.CaptureError as err:
    print(f"CaptureError (expected): {str(err)[:160]}")
print(f"{bad} parameters with a wrong gradient, no error or warning" if bad else "ok")
sys.exit(1 if bad else 0)
