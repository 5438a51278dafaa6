"""A model with parametrized weights (``torch.nn.utils.parametrizations.weight_norm``; the same for
``spectral_norm``, ``orthogonal`` or any ``register_parametrization``) trained with PyTorch's documented
``with torch.nn.utils.parametrize.cached(): loss = model(x, y)`` (each parametrized weight computed once per
forward: RNN kernels, shared weights). When the wrapper's first call of an input signature (the probe and the
torch.export capture, auto.py) runs inside ``cached()``, the parametrized weights are taken from
parametrize's cache as plain tensors, not as functions of ``original0``/``original1``, and the captured
graph keeps them as constants:

- that step's ``original0``/``original1`` get no gradient (None) while plain autograd gives them one;
- every later step, also outside ``cached()`` and with the wrapper's parameters set equal to the plain model's
  before each step, runs the weight-normed layers with the weights of the first call: other losses, and
  ``original0``/``original1`` never get a gradient again. Also at budget "100%" (plain autograd's peak).
  Nothing warns.

Observed (CPU, torch 2.13, "45%"; the same at "100%"): step 0 (cached) loss 1.6745632 / 1.6745632, 12 of the
12 weight-norm parameters without a gradient; steps 1-3 (not cached, both models' parameters set alike, moved by
+0.05 each step) losses 4.970 / 3.400, 19.77 / 7.25, 58.60 / 13.83, the weight-norm parameters still without a
gradient at every step.
Expected: plain autograd's losses and gradients (compute the parametrizations inside the capture, e.g. capture
with parametrize's cache disabled), or a CaptureError naming ``parametrize.cached()``."""
import contextlib
import copy
import sys

import torch.nn.utils.parametrize as P
from torch.nn.utils.parametrizations import weight_norm

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 96


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.n, self.a, self.b = nn.LayerNorm(D), weight_norm(nn.Linear(D, 2 * D)), nn.Linear(2 * D, D)

    def forward(self, h):
        return h + self.b(F.gelu(self.a(self.n(h))))


class Net(nn.Module):
    def __init__(self, L=6):
        super().__init__()
        self.inp, self.head = nn.Linear(16, D), nn.Linear(D, 5)
        self.blocks = nn.ModuleList(Blk() for _ in range(L))

    def forward(self, x, y):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return F.cross_entropy(self.head(h), y)


budget = sys.argv[1] if len(sys.argv) > 1 else "45%"
torch.manual_seed(0)
ref = Net()
w = te.auto_checkpoint(copy.deepcopy(ref), budget, backend="cpu")
g = torch.Generator().manual_seed(1)
batches = [(torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)) for _ in range(4)]
names = [n for n, _ in ref.named_parameters()]
bad = False
for step, (x, y) in enumerate(batches):
    cached = step == 0  # the first call (probe, capture, profile) inside cached(); later steps without it
    with P.cached() if cached else contextlib.nullcontext():
        la = ref(x, y)
        la.backward()
    with P.cached() if cached else contextlib.nullcontext():
        lb = w(x, y)
        lb.backward()
    wn = [n for n in names if "parametrizations" in n]
    none = [n for n, q in zip(names, w.parameters()) if q.grad is None and n in wn]
    gd = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), w.parameters())
             if q.grad is not None)
    print(f"step {step} ({'inside cached()' if cached else 'no cache'}): loss {la.item():.7f} / {lb.item():.7f}, "
          f"{len(none)} of {len(wn)} weight-norm parameters without a gradient, max |grad - plain grad| of the "
          f"rest {gd:.3e}")
    bad |= abs(la.item() - lb.item()) > 1e-5 or bool(none) or gd > 1e-5
    with torch.no_grad():  # the same update for both models, so each step starts from equal parameters
        for p, q in zip(ref.parameters(), w.parameters()):
            q.copy_(p.add_(0.05))
    ref.zero_grad()
    w.zero_grad()
print("BUG: a capture inside parametrize.cached() bakes the parametrized weights into the graph" if bad else "ok")
sys.exit(1 if bad else 0)
