"""Non-trainable state kept in an ``nn.Parameter(..., requires_grad=False)`` and updated in place in
``forward`` (an EMA centre / codebook, a common spelling of a buffer; also ``nn.Embedding(max_norm=...)``,
which renormalises its weight in place): auto_checkpoint trains silently wrong. Note [Recomputing from the
step's buffers] swaps only ``_buffers`` for clones (``U.scratch_buffers``), so a recomputed stage updates
the parameter a second time and its re-run computes with the updated value: gradients off plain autograd's
and the state ends each step elsewhere. On the first call (no ``prepare``) the probe/capture runs update it
several more times (``_capture_for`` snapshots with ``values=False``: "nothing here changes them"), so even
the first loss differs. The same model with ``register_buffer`` is bit-exact; at "100%" it is bit-exact.
Expected: plain autograd's gradients and state (or a refusal naming the parameter)."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


class Centre(nn.Module):
    def __init__(self, as_buffer):
        super().__init__()
        if as_buffer:
            self.register_buffer("c", torch.zeros(D))
        else:
            self.c = nn.Parameter(torch.zeros(D), requires_grad=False)

    def forward(self, h):
        if self.training:
            with torch.no_grad():
                self.c.mul_(0.9).add_(0.1 * h.mean(0))
        return h - self.c


class Blk(nn.Module):
    def __init__(self, as_buffer):
        super().__init__()
        self.a, self.b, self.n = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), Centre(as_buffer)

    def forward(self, h):
        return self.n(torch.tanh(self.b(torch.relu(self.a(h))))) + h


class Net(nn.Module):
    def __init__(self, as_buffer, L=6):
        super().__init__()
        self.inp, self.head = nn.Linear(16, D), nn.Linear(D, 5)
        self.blocks = nn.ModuleList(Blk(as_buffer) for _ in range(L))

    def forward(self, x, y):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return F.cross_entropy(self.head(h), y)


bad = False
for as_buffer, prepare in ((False, True), (False, False), (True, True)):
    torch.manual_seed(0)
    ref = Net(as_buffer)
    w = te.auto_checkpoint(copy.deepcopy(ref), "40%", backend="cpu", capture="export")
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)
    try:
        if prepare:
            w.prepare(x, y)
        else:
            w(x, y)
    except RuntimeError as e:  # a refusal naming the parameter write resolves it too
        print(f"{'buffer' if as_buffer else 'frozen Parameter'}: refused: {str(e)[:140]}")
        bad |= as_buffer or "writes" not in str(e)
        continue
    if not prepare:  # that first call was a step: start both again
        torch.manual_seed(0)
        ref = Net(as_buffer)
        w = te.auto_checkpoint(copy.deepcopy(ref), "40%", backend="cpu", capture="export")
    for step in range(2):
        la = ref(x, y)
        la.backward()
        lb = w(x, y)
        lb.backward()
        gd = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), w.parameters())
                 if p.grad is not None)
        cd = max((a.n.c - b.n.c).abs().max().item() for a, b in zip(ref.blocks, w.blocks))
        print(f"{'buffer' if as_buffer else 'frozen Parameter'}, {'prepare()' if prepare else 'first call'}, "
              f"step {step}: |loss diff| {abs(la.item() - lb.item()):.3e}, max |grad - plain grad| {gd:.3e}, "
              f"max |state - plain state| {cd:.3e} (plan overhead {w.plan.overhead:.3f})")
        bad |= gd > 0 or cd > 0
        ref.zero_grad()
        w.zero_grad()
print("BUG: gradients / state differ from plain autograd" if bad else "ok")
sys.exit(1 if bad else 0)
