"""rv22b: a model with an evaluation-only lazy head, called once (a training step) before it is wrapped, as the
refusal asks, is still refused by ``prepare`` and ``sample=``, and its first wrapped step still runs as plain
autograd outside the budget, with a warning that names that very remedy.

Setup: 4 x (Linear(32, 32), Tanh), a Linear(32, 4) head, and ``eval_head = nn.LazyLinear(3)`` that the forward calls
only with ``evaluate=True``; the model run once with grad (``m(x).sum().backward()``, x 64 x 32), then
``auto_checkpoint(copy, "90%", backend="cpu", sample=x)``, and ``w = auto_checkpoint(m, "90%", backend="cpu")``,
``w.prepare(x)``, ``w.measure_memory(2)``, two steps.

Observed (CPU, torch 2.13): s22_rev2 (b9aa889): ``sample=`` and ``prepare`` raise CaptureError "eval_head hold
parameters not materialised yet (lazy modules), which a model's first call draws at their place in the forward;
call the model once (a training step) before preparing it" (Note [Lazy modules] documents the refusal, not that
its remedy fails here); the first step warns "this call runs as plain autograd,
outside the budget ... (call the model once before wrapping it to keep this step in budget)" and is not measured
(1 record, of the second step). Nothing else the user can do but materialise the head by hand; the next steps train
without it (Note [Lazy modules], the session's change).

Cause: torch_exec/auto.py ``prepare`` (and ``sample=``) and ``forward``'s first call read any lazy module as one the
model's first call has still to materialise (``_lazy_modules``); the session's change leaves out only those the
first call *with the wrapper* left lazy (``_lazy_left = None`` after that plain call, ``_lazy_tensors``), so a
module the training forward never calls blocks preparing and costs one step outside the budget whatever the user
does before wrapping.

Expected: a lazy module the model's training forward does not call (found as that first call finds it, e.g. one
the capture's forward does not materialise) is left out at ``prepare``/``sample=`` and at the first call as at
the later ones, or the refusal and the warning name the remedy that works (materialise the head: one forward through
it). Exits 1 while ``prepare`` refuses after the model's own call with the remedy already followed ("call the
model once").

Run: python bench/repros/rv22b_auto_lazy_eval_head_prepare_refused.py   (~2 s)
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy
import sys
import warnings

from _setup import nn, te, torch

D = 32


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(4))
        self.head = nn.Linear(D, 4)
        self.eval_head = nn.LazyLinear(3)  # evaluation only

    def forward(self, x, evaluate=False):
        for block in self.body:
            x = block(x)
        return self.eval_head(x) if evaluate else self.head(x)


torch.manual_seed(0)
m = Net()
x = torch.randn(64, D)
m(x).sum().backward()  # the model called once (a training step) before wrapping, as the refusal asks
m.zero_grad(set_to_none=True)
try:
    te.auto_checkpoint(copy.deepcopy(m), "90%", backend="cpu", sample=x)
    print("auto_checkpoint(sample=x): prepared")
except te.CaptureError as err:
    print(f"auto_checkpoint(sample=x): CaptureError: {str(err)[:200]}")
w = te.auto_checkpoint(m, "90%", backend="cpu")
refused = False
try:
    w.prepare(x)
    print("prepare(x): prepared")
except te.CaptureError as err:
    refused = "call the model once" in str(err)
    print(f"prepare(x): CaptureError: {str(err)[:200]}")
w.measure_memory(2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        w(x).sum().backward()
plain = [str(c.message) for c in caught if "outside the budget" in str(c.message)]
records = list(w.memory_report())
print(f"first step: {'ran as plain autograd outside the budget (warned)' if plain else 'planned'}; "
      f"{len(records)} memory record(s) for 2 measured steps: "
      + "; ".join(f"step {r.step}: {r.beyond_param_grads} B, budget {r.budget}" for r in records))
sys.exit(1 if refused else 0)
