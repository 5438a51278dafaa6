"""caller_keeps="loss", six residual blocks that begin with a dropout and a head returning (loss, logits)
(Note [Two groupings of unsaved boundaries] in torch_exec/executor.py). Step 1 runs at "60%" (the kept-boundaries
grouping); replan("100%") comes before its backward (the merged grouping becomes the signature's entry); the
backward finds the caller held the logits, warns and records it (learn_output_holds) on the face the step ran,
which is no longer the signature's entry. replan("60%") then plans the kept-boundaries face again from the
merged face's out_dropped (_plan_entry copies it over what that face learned): step 2 counts the logits as
dropped again, warns a second time and measures 451784 B, above its prediction 414024 B and its budget
424555 B. Controls: the same steps without the replan in flight, or blocks without a dropout (one grouping),
count the logits on step 2: no second warning, measured within the prediction (392072 <= 413512 B;
360968 <= 361480 B).
Observed: a second MemoryBudgetWarning; step 2 measured 451784 B, above its prediction 414024 B and its budget
424555 B. Expected: what a backward learned stays learned (both faces), step 2 within budget, one warning."""
import sys
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import measure_peak

D, C = 64, 256


class Blk(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.dropout = dropout
        self.a, self.b, self.n = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), nn.LayerNorm(D)
        self.drop = nn.Dropout(0.1)

    def forward(self, h):
        if self.dropout:
            h = self.drop(h)
        return h + self.b(torch.relu(self.a(self.n(h))))


class Head(nn.Module):
    def __init__(self, y):
        super().__init__()
        self.lin = nn.Linear(D, C)
        self.register_buffer("y", y)

    def forward(self, h):
        logits = self.lin(h)
        return F.cross_entropy(logits, self.y), logits


def held_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, sum("caller held" in str(m.message) for m in caught)


def run(dropout, in_flight):
    torch.manual_seed(0)
    x, y = torch.randn(64, 16), torch.randint(0, C, (64,))
    seq = nn.Sequential(nn.Linear(16, D), *[Blk(dropout) for _ in range(6)], Head(y))
    w = te.CheckpointedSequential(seq, budget="60%", backend="cpu", caller_keeps="loss")
    w.prepare(x)
    n1 = w.chain.n
    loss, logits = w(x)  # the caller holds the logits through the backward
    if in_flight:
        w.replan("100%")
    _, first = held_warnings(lambda: loss.backward())
    del loss, logits
    w.replan("100%")
    w.replan("60%")
    kept = []

    def step():
        loss, logits = w(x)
        kept.append(logits)
        loss.backward()
    (_, reading), second = held_warnings(lambda: measure_peak(step))
    plan = w.plan
    print(f"{'dropout' if dropout else 'plain  '} blocks, replan {'in flight' if in_flight else 'after    '}: step 1 "
          f"{n1} stages, {first} warning(s); step 2 {w.chain.n} stages, {second} warning(s), measured {reading.peak} B, "
          f"predicted {plan.predicted_peak_bytes} B, budget {plan.budget_bytes} B")
    return second > 0 or reading.peak > plan.predicted_peak_bytes or reading.peak > plan.budget_bytes


bad = [run(dropout, in_flight) for dropout in (True, False) for in_flight in (False, True)]
print("BUG: what the in-flight step's backward learned was lost" if any(bad) else "ok")
sys.exit(1 if any(bad) else 0)
