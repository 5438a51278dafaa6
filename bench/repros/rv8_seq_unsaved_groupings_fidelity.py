"""Blocks whose first op saves nothing of the input (a dropout, a bias added) under CheckpointedSequential, at
budgets 100 / 70 / 50 / 35 % of plain autograd's peak: which grouping the wrapper ran (the profile's stages
merged at boundaries no backward saves, or kept: Note [Two groupings of unsaved boundaries] in
torch_exec/executor.py), its least budget, and the measured peak against the prediction and the budget.
Before, every budget below 100 % was refused for such blocks (rv7_train_seq_unsaved_boundaries.py).
Fails where a measured step exceeds its budget or its prediction, or where no budget below 100 % plans."""
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from gpusolve.errors import InfeasibleBudgetError
from torch_exec.meter import measure_peak

D = 64


class Blk(nn.Module):
    def __init__(self, first):
        super().__init__()
        self.first = first
        self.a, self.b, self.n = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), nn.LayerNorm(D)
        self.drop = nn.Dropout(0.1)
        self.bias = nn.Parameter(torch.zeros(D))

    def forward(self, h):
        if self.first == "dropout":
            h = self.drop(h)
        elif self.first == "bias":
            h = h + self.bias
        return h + self.b(torch.relu(self.a(self.n(h))))


def stages(first):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, D), *[Blk(first) for _ in range(6)], nn.Linear(D, 5))


g = torch.Generator().manual_seed(0)
x, y = torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)
bad = False
below_100 = {}
for first in ("none", "dropout", "bias"):
    for budget in ("100%", "70%", "50%", "35%"):
        w = te.CheckpointedSequential(stages(first), budget=budget, backend="cpu")
        try:
            plan = w.prepare(x)
        except InfeasibleBudgetError as e:
            print(f"{first:8s} {budget:>5s}: infeasible, least {e.min_bytes} B")
            continue
        below_100[first] = below_100.get(first, 0) + (budget != "100%")
        for p in w.parameters():
            p.grad = torch.zeros_like(p)

        def step():
            F.cross_entropy(w(x), y).backward()
        step()
        _, reading = measure_peak(step)
        held = reading.peak <= plan.budget_bytes and reading.peak <= plan.predicted_peak_bytes
        bad |= not held
        print(f"{first:8s} {budget:>5s}: {w.chain.n} stages ({w.chain.provenance['merged_unsaved']} merged unsaved), "
              f"least {w.min_budget_bytes} B; budget {plan.budget_bytes} B, predicted {plan.predicted_peak_bytes} B, "
              f"measured {reading.peak} B = {reading.peak / plan.predicted_peak_bytes:.3f} of predicted; "
              f"overhead {plan.overhead:.3f}{'' if held else '  OVER'}")
bad |= any(below_100.get(first, 0) == 0 for first in ("none", "dropout", "bias"))
print("BUG: a budget or prediction exceeded, or nothing below 100 % plans" if bad else "ok")
sys.exit(1 if bad else 0)
