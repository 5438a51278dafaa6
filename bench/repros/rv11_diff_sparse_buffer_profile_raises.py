"""A model with a sparse buffer (a graph convolution's fixed normalised adjacency, kept as a sparse COO buffer as
PyTorch Geometric-style GCNs do) can no longer be profiled: the first call (or prepare) raises NotImplementedError
"Could not run 'aten::equal' with arguments from the 'SparseCPU' backend" (a review of 6adbcd3, 2026-11-28).

6adbcd3 (Note [Buffers written behind their versions], torch_exec/profiler.py) compares every buffer's values after
each stage of the no-grad pass with ``torch.equal`` (then ``torch.allclose``); neither runs on sparse (COO, CSR)
tensors. Before, only the version counters were compared.
Observed (six GCN layers (Linear 32 -> 32, torch.sparse.mm with a 200 x 200 sparse adjacency buffer, ReLU) and a
head, CheckpointedSequential(model, "100%", backend="cpu"); this script): d97ccc3 profiles and trains (plain
autograd fits); 6514efb raises NotImplementedError at prepare(), and at the least budget alike.
Cause: torch_exec/profiler.py _buffers_changed calls torch.equal on every buffer, whatever its layout.
Expected: buffers of a layout torch.equal does not take (``b.layout is not torch.strided``) are left to their
version counters (or compared through ``_indices()``/``_values()`` after coalescing, or ``to_dense()``); the
model profiles as before. Exits 1 while profiling raises."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")


class GCNLayer(nn.Module):
    def __init__(self, adj, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.register_buffer("adj", adj)

    def forward(self, x):
        return torch.relu(torch.sparse.mm(self.adj, self.lin(x)))


torch.manual_seed(0)
n, d = 200, 32
dense = (torch.rand(n, n) < 0.05).float() + torch.eye(n)
adj = (dense / dense.sum(1, keepdim=True)).to_sparse()
x = torch.randn(n, d)
bad = False
for budget in ("100%", "least"):
    model = nn.Sequential(*[GCNLayer(adj, d) for _ in range(6)], nn.Linear(d, 4))
    w = te.CheckpointedSequential(model, budget="100%", backend="cpu")
    try:
        w.prepare(x)
        if budget == "least":
            w.replan(w.min_budget_bytes)
        w(x).sum().backward()
        print(f"{budget}: profiled and trained (plan backend {w.plan.backend})")
    except NotImplementedError as err:
        bad = True
        print(f"{budget}: {type(err).__name__}: {str(err)[:100]}")
print("BUG: a model with a sparse buffer cannot be profiled" if bad else "ok")
sys.exit(1 if bad else 0)
