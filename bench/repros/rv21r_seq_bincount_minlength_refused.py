"""rv21r: a stage counting tokens per expert with ``torch.bincount(idx, minlength=E)`` (a fixed-size result: E
counts, as MoE load-balancing losses compute them) is now refused.

Setup: CheckpointedSequential(budget="90%") over Lin, Route, Lin, Route, Lin (D=32, 16 tokens, E=4): Route takes
the top-1 expert of a gate, ``counts = torch.bincount(idx, minlength=E)`` (idx < E always: E counts), and scales
the hidden state by ``counts[idx] / len(idx)`` (a load term), all sizes fixed.

Observed (CPU, s21_r): DataDependentShapeError "stage 2 (1) runs aten.bincount.default ...".  At 83aea4b it trained.

Cause: torch_exec/profiler.py ``_size_follows_values`` counts every op tagged ``dynamic_output_shape`` but index,
one_hot and repeat_interleave as data dependent; bincount's size is ``max(minlength, max(idx) + 1)``, fixed where
the values stay below minlength (as expert ids do).

Expected: trains as before (bincount with minlength treated as one_hot with num_classes is, or the refusal limited
to results larger than the profiled one could become).  Exits 1 while it is refused.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")
D, E = 32, 4


class Lin(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)

    def forward(s, x):
        return torch.tanh(s.l(x))


class Route(nn.Module):
    def __init__(s):
        super().__init__()
        s.g, s.l = nn.Linear(D, E), nn.Linear(D, D)

    def forward(s, x):
        idx = s.g(x).argmax(-1)
        counts = torch.bincount(idx, minlength=E)
        return torch.tanh(s.l(x)) * (counts[idx].to(x.dtype) / idx.numel())[:, None]


torch.manual_seed(0)
net = nn.Sequential(Lin(), Route(), Lin(), Route(), Lin())
try:
    te.CheckpointedSequential(net, budget="90%")(torch.randn(16, D)).sum().backward()
except Exception as e:  # noqa: BLE001
    print(f"refused: {type(e).__name__}: {str(e)[:160]}...")
    sys.exit(1)
print("trained")
sys.exit(0)
