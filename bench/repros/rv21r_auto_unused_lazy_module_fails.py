"""rv21r: a lazy module the training forward never calls (an eval-only head) makes auto_checkpoint raise torch's
internal "uninitialized parameter" ValueError at every step after the first.

Setup: auto_checkpoint(budget="90%") over a model of 4 x (LazyLinear(32), Tanh) and an ``eval_head =
LazyLinear(3)`` its training forward does not call; input 8 x 16, loss ``body(x).pow(2).mean()``, 3 steps.

Observed (CPU, torch 2.13): s21_r: step 0 runs (plain autograd, with the lazy-module warning), steps 1 and 2 raise
ValueError "Attempted to use an uninitialized parameter in <method 'detach' of 'torch._C.TensorBase' objects>".
83aea4b: all three steps raised it.  Note [Lazy modules] in torch_exec/auto.py says "the check is made until the
first call with grad, once (a lazy module the forward never calls stays lazy)", as if that case then ran.

Cause (a guess): after the first call ``_lazy_checked`` is True and the capture's snapshots
(``U.ModelSnapshot``: ``p.detach().clone()`` over ``params_of``) touch every parameter, the never-materialised one
included.

Expected: the steps train (lazy parameters left out of the snapshots, the profile and the signature), or one clear
CaptureError naming ``eval_head``.  Exits 1 while a step raises the ValueError.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")


class Model(nn.Module):
    def __init__(s):
        super().__init__()
        s.body = nn.Sequential(*[nn.Sequential(nn.LazyLinear(32), nn.Tanh()) for _ in range(4)])
        s.eval_head = nn.LazyLinear(3)

    def forward(s, x):
        return s.body(x).pow(2).mean()


torch.manual_seed(0)
w = te.auto_checkpoint(Model(), budget="90%")
x = torch.randn(8, 16)
bad = 0
for step in range(3):
    try:
        w(x).backward()
        print(f"step {step}: ran")
    except ValueError as e:
        print(f"step {step}: ValueError: {str(e)[:110]}...")
        bad += 1
sys.exit(1 if bad else 0)
