"""rv22: auto_checkpoint raises AttributeError ('JoinEntry' object has no attribute 'sizes_key') where a capture cut as
one chain looks for a covering profile among its siblings and one of them is a join.

Setup: auto_checkpoint(model, "60%", backend="cpu") over a two-tower model (two towers of 4 x (Linear 32 -> 32, tanh));
``forward(a, b)`` meets the towers at a loss, ``(t1(a) - t2(b)).square().mean()``, for batches of 8 rows and more,
and below 8 rows compares tower 1 with ``b`` itself (``(t1(a) - b).square().mean()``: one chain).  A step on two
8 x 16 x 32 inputs (captured as a join network, CheckpointedJoin), then a step on their first 6 rows (a new
signature, covered by the first: the same model state, smaller sizes).

Observed (CPU, torch 2.13): s22_rev (f537eb3): the second call raises ``AttributeError: 'JoinEntry' object has no
attribute 'sizes_key'`` from torch_exec/executor.py ``_size_cover``; with ``reuse_within=None`` it trains.

Cause: ``_PlannedModule._size_cover`` walks the entries of every sibling whose model signature covers this one's
(auto_checkpoint's ``siblings``, which hold every capture's executor, CheckpointedJoin's among them) and reads
``entry.sizes_key``, a field of the chain's Entry only; torch_exec/join.py's JoinEntry has none (a join's
``reuse_within`` is None, but the chain's walk does not ask).

Expected: the 6-row call profiled (a join's profiles are not a chain's: skipped) and trained.  Exits 1 while it
raises.

Run: python bench/repros/rv22_auto_join_sibling_sizes_key_error.py
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys

from _setup import nn, te, torch

D = 32


class TwoTowers(nn.Module):
    def __init__(self):
        super().__init__()
        self.t1 = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(D, D), nn.Tanh())])
        self.t2 = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(D, D), nn.Tanh())])

    def forward(self, a, b):
        if a.shape[0] >= 8:
            return (self.t1(a) - self.t2(b)).square().mean()
        return (self.t1(a) - b).square().mean()


torch.manual_seed(0)
a, b = torch.randn(8, 16, D), torch.randn(8, 16, D)
failed = {}
for reuse in (2, None):
    torch.manual_seed(0)
    w = te.auto_checkpoint(TwoTowers(), "60%", backend="cpu", reuse_within=reuse)
    w(a, b).backward()
    first = type(w.executor).__name__
    try:
        w(a[:6], b[:6]).backward()
        failed[reuse] = False
        print(f"reuse_within={reuse}: 8 rows captured as {first}; 6 rows: {type(w.executor).__name__}, trained")
    except AttributeError as err:
        failed[reuse] = True
        print(f"reuse_within={reuse}: 8 rows captured as {first}; 6 rows: AttributeError: {err}")
sys.exit(1 if failed[2] else 0)
