"""Note [Two groupings of unsaved boundaries] (torch_exec/executor.py) says "A schedule_fn is given the profile's
own grouping". Six residual blocks that begin with a dropout: a wrapper made with schedule_fn gives it the
merged chain (2 stages). A wrapper planned at "60%" keeps the kept-boundaries face as the signature's entry;
replan(schedule_fn=fn) then plans only that face (_plan_entry skips the other face under a schedule_fn but not
the entry's own grouping), so fn gets the 8-stage chain with the boundaries over-counted: the same store-all
schedule predicts 713024 B instead of 589440 B, and min_budget_bytes reads 218944 B (the kept face's) where the
wrapper made with schedule_fn reads 579328 B. Which chain a schedule_fn sees depends on the budget the wrapper
had before. Observed: chain.n 2 vs 8, predicted 589440 vs 713024 B. Expected: the profile's own grouping (2
stages) both ways."""
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from gpusolve.baselines import store_all

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
x = torch.randn(64, 16)
seen = []


def fn(chain):
    seen.append(chain.n)
    return store_all(chain)


made = te.CheckpointedSequential(seq, budget="100%", backend="cpu", schedule_fn=fn)
made.prepare(x)
later = te.CheckpointedSequential(seq, budget="60%", backend="cpu")
later.prepare(x)
before = later.chain.n
later.replan(schedule_fn=fn)
print(f"made with schedule_fn: fn got {seen[0]} stages, predicted {made.plan.predicted_peak_bytes} B, "
      f"min_budget_bytes {made.min_budget_bytes} B")
print(f"planned at 60% ({before} stages run), then replan(schedule_fn=fn): fn got {seen[1]} stages, predicted "
      f"{later.plan.predicted_peak_bytes} B, min_budget_bytes {later.min_budget_bytes} B")
bad = seen[0] != seen[1]
print("BUG: the schedule_fn was given the kept-boundaries chain, not the profile's own grouping" if bad else "ok")
sys.exit(1 if bad else 0)
