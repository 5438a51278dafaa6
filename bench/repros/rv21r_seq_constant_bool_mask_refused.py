"""rv21r: a stage that indexes with a constant boolean buffer (fixed sizes) is now refused.

Setup: CheckpointedSequential(budget="90%") over Lin, Pick, Lin, Pick, Lin (D=32, batch 16): Pick keeps the even
features with a boolean buffer made at construction (``h[:, self.keep]``, ``keep = arange(D) % 2 == 0``) and
concatenates the pick twice; the kept count is the same for every batch.

Observed (CPU, s21_r): DataDependentShapeError "stage 2 (1) runs aten.index.Tensor ... whose result's size
follows the values of its input".  At 83aea4b it trained.

Cause: torch_exec/profiler.py ``_size_follows_values``: aten.index with any bool/uint8 index counts as data
dependent, also where the mask is the module's buffer (or any tensor not computed from the stage's input), whose
values, and so the result's size, do not change between batches.

Expected: a mask that is a buffer / parameter / constant of the model (e.g. its storage among the stages'
buffers, or not reached from the input) is not refused.  Exits 1 while it is refused.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy, sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")
D = 32


class Lin(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)

    def forward(s, x):
        return torch.tanh(s.l(x))


class Pick(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)
        s.register_buffer("keep", torch.arange(D) % 2 == 0)

    def forward(s, x):
        h = torch.tanh(s.l(x))
        return torch.cat([h[:, s.keep], h[:, s.keep]], 1)


torch.manual_seed(0)
net = nn.Sequential(Lin(), Pick(), Lin(), Pick(), Lin())
ref = copy.deepcopy(net)
x = torch.randn(16, D)
try:
    te.CheckpointedSequential(net, budget="90%")(x).sum().backward()
except Exception as e:  # noqa: BLE001
    print(f"refused: {type(e).__name__}: {str(e)[:160]}...")
    sys.exit(1)
ref(x).sum().backward()
d = max((p.grad - q.grad).abs().max().item() for p, q in zip(net.parameters(), ref.parameters()))
print(f"trained; grad max abs diff vs plain autograd {d:.3g}")
sys.exit(1 if d > 1e-6 else 0)
