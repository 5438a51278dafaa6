"""A measured step with two calls of the wrapper before one backward (two micro-batches summed, two views of a
batch, R-Drop: the README's "Several calls before one backward"): ``model.measure_memory(1)`` then
``((model(x1, y1) + model(x2, y2)) / 2).backward()`` records nothing and says nothing. The meter's ``begin``
(torch_exec/report.py, StepMeter) runs ``finalize()`` first, which drops a pending measurement whose backward has
not come ("forward without backward: nothing to record"): the second call throws away the first call's
measurement, and the arming was already spent on it, so the second call is not measured either. The next
ordinary step is not measured either (the request is gone), and ``memory_report()`` looks as if the step had
never been asked for. That step is the one that needs watching: it holds both calls' checkpoints at once.

Observed (CPU, torch 2.13, "50%" of plain autograd's peak, an MLP of 6 residual blocks with dropout): budget
288388 B, predicted 281928 B. A one-call step armed the same way is recorded (271816 B beyond parameter
gradients, within). After ``measure_memory(1)`` and the two-call step, ``memory_report()`` still has 1 record, no
warning of any kind is raised, and the next (unarmed) step adds none. Measured with
``torch_exec.meter.measure_peak`` around the same two-call step (unarmed, ``.grad`` already allocated): 479124 B,
1.66 x the budget (an earlier run of the same step: 463252 B; plain autograd's: 1106724 B).
Expected: the step is measured (its record shows what it held against the budget), or a warning says it was not
measured and why; not a silently dropped measurement."""
import sys
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import measure_peak

D = 64


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.n = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), nn.LayerNorm(D)
        self.d = nn.Dropout(0.1)

    def forward(self, h):
        return h + self.d(self.b(torch.relu(self.a(self.n(h)))))


class Net(nn.Module):
    def __init__(self, L=6):
        super().__init__()
        self.inp, self.head = nn.Linear(16, D), nn.Linear(D, 5)
        self.blocks = nn.ModuleList(Blk() for _ in range(L))

    def forward(self, x, y):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return F.cross_entropy(self.head(h), y)


torch.manual_seed(0)
w = te.auto_checkpoint(Net(), "50%", backend="cpu")
g = torch.Generator().manual_seed(0)
x1, y1 = torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)
x2, y2 = torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)
w.prepare(x1, y1)
print(f"budget {w.plan.budget_bytes} B, predicted {w.plan.predicted_peak_bytes} B")


def two_calls():
    ((w(x1, y1) + w(x2, y2)) / 2).backward()


w.measure_memory(1)
w(x1, y1).backward()
n1 = len(w.memory_report())
print(f"one call per step, armed: {n1} record(s); last: beyond param grads {w.memory_report()[-1].beyond_param_grads} B")

_, reading = measure_peak(two_calls)  # unarmed: nothing else measures this step
print(f"two calls before one backward, measured outside: peak {reading.peak} B "
      f"({reading.peak / w.plan.budget_bytes:.2f} x the budget)")

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    w.measure_memory(1)
    two_calls()
    n2 = len(w.memory_report())
    w(x1, y1).backward()  # the next step, not armed
    n3 = len(w.memory_report())
said = [f"{type(c.message).__name__}: {str(c.message)[:160]}" for c in caught
        if "measur" in str(c.message) or type(c.message).__name__ == "MemoryBudgetWarning"]
print(f"two calls before one backward, armed: {n2} record(s) after it, {n3} after the next step; warnings: {said}")
if n2 > n1:
    r = w.memory_report()[-1]
    print(f"  its record: beyond param grads {r.beyond_param_grads} B, within {r.within_budget}")
bad = n2 == n1 and not said
print("BUG: the armed step was silently not measured" if bad else "ok")
sys.exit(1 if bad else 0)
