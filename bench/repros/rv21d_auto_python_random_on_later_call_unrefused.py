"""A forward that draws from Python's ``random`` on some calls only, decided by its data: a feature augmentation
applied where the activations are large (``if z.abs().mean() > 0.5 and random.random() < 0.5: z = z.flip(-1)``).
10 residual blocks (Linear 32 -> 64, tanh, the augmentation, Linear 64 -> 32), input 8 x 4 x 32 scaled by 0.01, 3, 4
at steps 0, 1, 2 (the first call draws nothing), loss ``out.pow(2).mean()``, SGD lr 0.05, 3 steps from
``random.seed(123); torch.manual_seed(123)``; ``auto_checkpoint(nn.Sequential(*blocks), budget, backend="cpu")`` (the
branch on data makes export fail: the block fallback runs) at "60%" and "30%", against plain autograd.

auto_checkpoint refuses a forward that draws from Python's random with a CaptureError naming the fix (draw with
torch): it does when the first call draws (inputs x1, x2, x3: "the model's forward draws from Python's random, which
neither capture can replay ...").

Observed (CPU, torch 2.13), no error, no warning about it: step 0 and step 1's loss equal plain autograd's (0.155341,
11.956633); step 2: 17.981457 at 60% and 17.256874 at 31.2% (the least that fits) against 16.724277; the largest
parameter-gradient difference 3.80e-01 and 3.77e-01; Python's random state after the steps differs. (One run; past
step 0 the figures vary from run to run, as the plan follows measured times.)

Cause (a guess): the refusal is the probe's (torch_exec/auto.py ``_probe_model``, Note [Probing the model]), which
runs once per input signature, on the first call; a later call of the same signature that draws from Python's
random is not looked at, and its blocks' recomputations draw again (the executor replays torch's generators only).

Expected: the same CaptureError at the call that draws (e.g. compare Python's and NumPy's generator states around
each forward), or plain autograd's losses and gradients. Exits 1 while a loss or a gradient differs without an error.

Run: GS_ROOT=<tree> python bench/repros/rv21d_auto_python_random_on_later_call_unrefused.py   (~20 s)"""
import copy
import random
import re
import sys

from _setup import nn, te, torch
from gpusolve import InfeasibleBudgetError

D = 32
SCALES = (0.01, 3.0, 4.0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, h):
        z = torch.tanh(self.a(h))
        if z.abs().mean() > 0.5 and random.random() < 0.5:  # augmentation only on large activations
            z = z.flip(-1)
        return h + self.b(z)


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def train(model, run):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    random.seed(123)
    torch.manual_seed(123)
    out = []
    for step in range(3):
        loss = run(X * SCALES[step]).pow(2).mean()
        loss.backward()
        out.append((loss.item(), [p.grad.clone() for p in model.parameters()], random.getstate()))
        opt.step()
        opt.zero_grad()
    return out


torch.manual_seed(0)
base = nn.Sequential(*[Block() for _ in range(10)])
ref = copy.deepcopy(base)
plain = train(ref, ref)
print(f"plain autograd: losses {[round(s[0], 6) for s in plain]}")
bad = False
for budget in ("60%", "30%"):
    model = copy.deepcopy(base)
    try:
        try:
            got = train(model, te.auto_checkpoint(model, budget, backend="cpu"))
        except InfeasibleBudgetError as err:  # the least that fits
            budget = f"{float(re.search(r'needs at least ([0-9.]+)%', str(err)).group(1)) + 0.5:.1f}%"
            model = copy.deepcopy(base)
            got = train(model, te.auto_checkpoint(model, budget, backend="cpu"))
    except te.CaptureError as err:
        print(f"{budget}: refused: {str(err)[:200]}")
        continue
    gd = max((a - b).abs().max().item() for (_, ga, _), (_, gb, _) in zip(plain, got) for a, b in zip(ga, gb))
    same = all(a[2] == b[2] for a, b in zip(plain, got))
    print(f"auto_checkpoint {budget}: losses {[round(s[0], 6) for s in got]}, max |grad - plain grad| {gd:.2e}, "
          f"Python's random state after each step as plain autograd's: {same}")
    bad |= gd > 1e-6 or any(abs(a[0] - b[0]) > 1e-6 for a, b in zip(plain, got))
print("BUG: Python's random drawn on a later call is neither refused nor replayed" if bad else "ok")
sys.exit(1 if bad else 0)
