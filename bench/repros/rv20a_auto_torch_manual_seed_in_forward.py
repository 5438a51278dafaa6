"""A model whose forward seeds torch's global generator itself before drawing (a fixed random projection or fixed
noise made in the forward, as random-feature / LSH attention code does: ``torch.manual_seed(1234); x = x + 0.1 *
torch.randn_like(x)``), between 6 residual blocks (Linear 32 -> 64, tanh, Linear 64 -> 32) each followed by
``nn.Dropout(0.2)``; input 4 x 16 x 32, loss ``out.pow(2).mean()``; ``auto_checkpoint(model, budget, backend="cpu")``
at "100%" and "60%", 2 steps, each call preceded by the same ``torch.manual_seed(50 + step)`` as plain autograd's.

Observed (CPU, torch 2.13): torch.export captures the model; at both budgets and both steps the loss differs from
plain autograd's, all 24 parameter gradients differ, and torch's RNG state after the step differs from plain
autograd's, without an error or a warning: step 0 loss 5.8121438 against 5.6366115, step 1 5.8596239 against
6.1948371 (the same at both budgets), 24 of 24 gradients off, RNG state after each step not equal. The same blocks as ``CheckpointedSequential`` stages (the
seeding in a stage's forward) train with plain autograd's losses, gradients and RNG state.

Cause: torch.export keeps the graph's operations; ``torch.manual_seed`` is a Python side effect on the global
generator, not an operation, so the captured graph's ``randn_like`` (and every dropout after it) draws from whatever
state the generator is in, not from the seed the forward set. torch_exec/auto.py's probe (Note [Probing the model])
checks forwards that seed Python's or NumPy's generator (``np.random.seed`` before a fixed permutation, as BigBird
does) but not torch's own ``manual_seed`` (nor ``torch.random.fork_rng``/``set_rng_state``) in the forward.

Expected: plain autograd's losses, gradients and RNG state (replay the seeding: a graph op, or capture="blocks"), or
ONE clear CaptureError naming ``torch.manual_seed`` in the forward and the fix (a ``torch.Generator`` of the module's
own, seeded in the forward: Note [Generators of the model's own]). Exits 1 while a step's loss differs from plain
autograd's without an error.

Run: GS_ROOT=<tree> python bench/repros/rv20a_auto_torch_manual_seed_in_forward.py   (~8 s)"""
import copy
import sys

from _setup import nn, te, torch

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class Seeded(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(6))
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        for i, block in enumerate(self.l):
            x = self.drop(block(x))
            if i == 2:
                torch.manual_seed(1234)
                x = x + 0.1 * torch.randn_like(x)
        return x


torch.manual_seed(0)
base = Seeded()
bad = False
for budget in ("100%", "60%"):
    ref, mod = copy.deepcopy(base), copy.deepcopy(base)
    wrapped = te.auto_checkpoint(mod, budget, backend="cpu")
    for step in range(2):
        x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(step))
        torch.manual_seed(50 + step)
        l1 = ref(x).pow(2).mean()
        l1.backward()
        rng1 = torch.get_rng_state()
        torch.manual_seed(50 + step)
        try:
            l2 = wrapped(x).pow(2).mean()
            l2.backward()
        except te.CaptureError as err:
            print(f"{budget}: refused: {str(err)[:160]}")
            break
        rng2 = torch.get_rng_state()
        off = sum(not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6) for p, q in zip(ref.parameters(), mod.parameters()))
        print(f"{budget} step {step} ({wrapped.capture.method}): loss {l2.item():.8g} (plain autograd {l1.item():.8g}); "
              f"{off} of {len(list(mod.parameters()))} gradients differ; RNG state after the step equal: "
              f"{torch.equal(rng1, rng2)}")
        bad |= abs(l1.item() - l2.item()) > 1e-6 * abs(l1.item())
        ref.zero_grad()
        mod.zero_grad()

print("BUG: torch.manual_seed in the forward is not replayed by the captured graph; the step trains on other noise"
      if bad else "ok")
sys.exit(1 if bad else 0)
