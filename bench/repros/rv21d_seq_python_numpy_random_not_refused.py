"""CheckpointedSequential stages that draw from Python's ``random`` or NumPy's global generator: stochastic depth
written as ``if self.training and random.random() < 0.4: return h`` (timm/torchvision-style drop path with a Python
decision), and noise made with ``np.random.randn``. 10 residual blocks (Linear 32 -> 64, tanh, Linear 64 -> 32),
input 8 x 4 x 32 (x1, x2, x3 at steps 0-2), loss ``out.pow(2).mean()``, SGD lr 0.05, 3 steps from
``random.seed(123); np.random.seed(123); torch.manual_seed(123)``, against plain autograd;
``CheckpointedSequential(blocks, budget, backend="cpu")`` at "60%" and the least that fits.

auto_checkpoint refuses both with a CaptureError naming the fix ("draw with torch instead", Note [Probing the model]
in torch_exec/auto.py); CheckpointedSequential runs the stages' own code, and refuses nothing.

Observed (CPU, torch 2.13), no error, no warning about it:
  random: plain autograd losses 1.486937, 4.893959, 10.756628; CheckpointedSequential 60%: 1.817525, 5.02494,
          10.738823, gradients 2.75e-01 off; 50.6% (near the least): 1.817525, 5.389324, 10.363249, 1.74e-01 off;
  numpy:  plain autograd losses 3.15527, 6.383576, 10.466165; CheckpointedSequential 60%: 3.561152, 6.393015,
          10.869582, gradients 1.40e-01 off; 30%: 3.561152, 6.564719, 10.494452, 1.58e-01 off.
auto_checkpoint(..., "60%") on the same blocks raises "the model's forward draws from Python's random [NumPy's
global generator (np.random)], which neither capture can replay ...; draw with torch instead".
(One run: past step 0 the figures vary from run to run, as the plan follows measured times.)

Cause (a guess): the executor records and replays torch's generators only (torch_exec/_util.py ``RngState``,
torch_exec/executor.py ``Runtime.run_stage``); a recomputed stage draws Python's or NumPy's next numbers: the drop
path's recomputation decides again (other blocks skipped than in the forward), the noise differs, and profiling's
runs move both generators (step 0 already differs). The probe that refuses this (``_probe_model``:
``_python_rng_state`` / ``_moved_python_rngs`` in torch_exec/auto.py) runs for auto_checkpoint only; the profiler
(torch_exec/profiler.py), which runs every stage, does not look.

Expected: plain autograd's losses, gradients and generator states (record and replay Python's and NumPy's state
for such stages), or ONE clear error at the first call naming the stage and the fix (draw with torch), as
auto_checkpoint gives. Exits 1 while a loss or a gradient differs from plain autograd's without an error.

Run: GS_ROOT=<tree> python bench/repros/rv21d_seq_python_numpy_random_not_refused.py   (~20 s)"""
import copy
import random
import re
import sys

import numpy as np

from _setup import nn, te, torch
from gpusolve import InfeasibleBudgetError

D = 32


class Block(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.kind = kind

    def forward(self, h):
        if self.kind == "random" and self.training and random.random() < 0.4:
            return h  # drop path: the block skipped
        z = torch.tanh(self.a(h))
        if self.kind == "numpy":
            z = z + 0.5 * torch.from_numpy(np.random.randn(*z.shape).astype("float32"))
        return h + self.b(z)


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def train(model, run):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    out = []
    for step in range(3):
        loss = run(X * (1 + step)).pow(2).mean()
        loss.backward()
        # a parameter that got no gradient is read as a zero gradient
        out.append((loss.item(), [torch.zeros_like(p) if p.grad is None else p.grad.clone()
                                  for p in model.parameters()]))
        opt.step()
        opt.zero_grad()
    return out


bad = False
for kind in ("random", "numpy"):
    torch.manual_seed(0)
    base = nn.Sequential(*[Block(kind) for _ in range(10)])
    ref = copy.deepcopy(base)
    plain = train(ref, ref)
    print(f"{kind}: plain autograd losses {[round(s[0], 6) for s in plain]}")
    for budget in ("60%", "30%"):
        model = copy.deepcopy(base)
        try:
            try:
                got = train(model, te.CheckpointedSequential(model, budget=budget, backend="cpu"))
            except InfeasibleBudgetError as err:  # the least that fits
                budget = f"{float(re.search(r'needs at least ([0-9.]+)%', str(err)).group(1)) + 0.5:.1f}%"
                model = copy.deepcopy(base)
                got = train(model, te.CheckpointedSequential(model, budget=budget, backend="cpu"))
        except (te.CaptureError, RuntimeError, ValueError) as err:
            print(f"  {budget}: refused: {type(err).__name__}: {str(err)[:300]}")
            continue
        gd = max((a - b).abs().max().item() for (_, ga), (_, gb) in zip(plain, got) for a, b in zip(ga, gb))
        print(f"  CheckpointedSequential {budget}: losses {[round(s[0], 6) for s in got]}, "
              f"max |grad - plain grad| {gd:.2e}")
        bad |= gd > 1e-6 or any(abs(a[0] - b[0]) > 1e-6 for a, b in zip(plain, got))
print("BUG: Python's / NumPy's random in a stage is neither replayed nor refused" if bad else "ok")
sys.exit(1 if bad else 0)
