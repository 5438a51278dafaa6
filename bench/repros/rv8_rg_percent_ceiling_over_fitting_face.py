"""A percentage budget, two input signatures (batch 64, then batch 16), six residual blocks that begin with a
dropout (Note [Two groupings of unsaved boundaries] in torch_exec/executor.py). At "70%" the batch-16 signature
resolves to 118719 B. Its kept-boundaries grouping plans within that (predicted 118336 B, the wrapper's
min_budget_bytes is 106048 B), but the merged grouping, planned first, is below its own least (179712 B) and
falls back to the largest budget of another signature (_percent_ceiling: 405529 B), warning a FallbackWarning
("below its least budget 179712 B"); that fallback plan is faster, so it is the one kept: the step's plan has
budget_bytes 405529 B and a prediction of 179712 B, and the step measured 169288 B, 43 % above the 118719 B the
percentage resolved to.
Observed: plan.budget_bytes 405529 B > resolved 118719 B, a FallbackWarning, measured 169288 B > 118719 B.
Expected: the fallback to another signature's budget only where no grouping fits the signature's own budget:
the kept-boundaries plan (within 118719 B), no warning."""
import sys
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from torch_exec.executor import entry_budget_bytes
from torch_exec.meter import measure_peak

D = 64


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.n = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), nn.LayerNorm(D)
        self.drop = nn.Dropout(0.1)

    def forward(self, h):
        h = self.drop(h)
        return h + self.b(torch.relu(self.a(self.n(h))))


torch.manual_seed(0)
seq = nn.Sequential(nn.Linear(16, D), *[Blk() for _ in range(6)], nn.Linear(D, 5))
w = te.CheckpointedSequential(seq, budget="70%", backend="cpu")
x64, x16, y16 = torch.randn(64, 16), torch.randn(16, 16), torch.randint(0, 5, (16,))
p64 = w.prepare(x64)
print(f"batch 64: budget {p64.budget_bytes} B, predicted {p64.predicted_peak_bytes} B, {w.chain.n} stages")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    p16 = w.prepare(x16)
resolved = entry_budget_bytes("70%", w._last)
fallback = [str(m.message) for m in caught if "largest budget another input signature" in str(m.message)]
other = w._last.regrouped
print(f"batch 16: resolved budget {resolved} B, wrapper's least {w.min_budget_bytes} B; kept plan: {w.chain.n} stages, "
      f"budget {p16.budget_bytes} B, predicted {p16.predicted_peak_bytes} B; other grouping ({other.chain.n} stages): "
      + (f"budget {other.plan.budget_bytes} B, predicted {other.plan.predicted_peak_bytes} B" if other.plan is not None
         else "no plan (below its least)"))
print(f"fallback warnings: {len(fallback)}" + (f" ({fallback[0][:140]}...)" if fallback else ""))
for p in w.parameters():
    p.grad = torch.zeros_like(p)


def step():
    F.cross_entropy(w(x16), y16).backward()


step()
_, reading = measure_peak(step)
print(f"batch 16 step measured {reading.peak} B against the resolved budget {resolved} B")
bad = p16.budget_bytes > resolved or bool(fallback) or reading.peak > resolved
print("BUG: planned above the signature's own budget although a grouping fits it" if bad else "ok")
sys.exit(1 if bad else 0)
