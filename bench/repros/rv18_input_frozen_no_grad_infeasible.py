"""A forward under grad mode in which nothing needs a gradient (every parameter frozen, the input without
requires_grad: feature extraction without torch.no_grad()) is profiled and then refused with an
InfeasibleBudgetError whose cause and remedy are wrong ("a boundary where no backward saves the tensor ... Cut the
stages where an op saves its input ... or wrap the model with auto_checkpoint"; auto_checkpoint says the same).
The same call under torch.no_grad() runs the model directly. Expected: no refusal (there is no backward: run the
model as under no_grad), or one error naming the actual situation (nothing requires grad).
Fix: torch_exec/executor.py CheckpointedSequential.forward (and auto.py's forward): treat 'no tensor requires grad'
as the no-grad path.
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_frozen_no_grad_infeasible.py
Fixed in session 18: the wrappers run plainly where nothing requires grad (torch_exec._util.nothing_requires_grad); exits 0."""
import sys, warnings
from _rv18 import mlp  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
import torch
import torch_exec

def model():
    m = mlp(64, 256)
    for p in m.parameters():
        p.requires_grad_(False)
    return m
x = torch.randn(64, 64)
bad = False
with torch.no_grad():
    print("under no_grad:", tuple(torch_exec.CheckpointedSequential(model(), budget="60%", backend="cpu")(x).shape))
print("plain model under grad mode:", tuple(model()(x).shape))
for name, wrap in (("CheckpointedSequential", lambda m: torch_exec.CheckpointedSequential(m, budget="60%", backend="cpu")),
                   ("auto_checkpoint", lambda m: torch_exec.auto_checkpoint(m, "60%", backend="cpu"))):
    try:
        out = wrap(model())(x)
        print(f"{name}: ran, output requires_grad={out.requires_grad}")
    except Exception as e:
        print(f"{name}: {type(e).__name__}: {e}"); bad = True
sys.exit(1 if bad else 0)
