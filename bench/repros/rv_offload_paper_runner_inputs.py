"""PaperOffloadRunner.of(...) plans for its sample; it ran any input on that plan (one requiring grad that the
sample did not: its gradient uncounted; a larger batch), and resolved "100%" of the profiled chain's store-all
peak, without the caller's loss and seed its planning instance reserves, so "100%" was infeasible."""
import copy

from _setup import nn, te, torch
from torch_exec.meter import measure_peak
from torch_exec.paper_offload import PaperOffloadRunner

DT = torch.float64


class LossStage(nn.Module):
    def forward(self, y):
        return (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).square().sum()


torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), nn.ReLU(), nn.Conv2d(2, 2, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(2, 2, 3, padding=1), nn.Flatten(), nn.Linear(128, 3), LossStage()).to(DT)
x = torch.randn(2, 3, 8, 8, dtype=DT)  # the sample: no requires_grad
m = copy.deepcopy(model)
wrapped = te.CheckpointedSequential(m, budget=None, backend="cpu", profile_passes=1, profile_warmup=0)
runner = PaperOffloadRunner.of(wrapped, x, 30160, "1GB/s")
budget = runner.plan.budget_bytes
for p in m.parameters():
    p.grad = torch.zeros_like(p)
for name, xo in (("the sample's signature", x.clone()), ("an input requiring grad", x.clone().requires_grad_()),
                 ("a batch of 8 (the sample's: 2)", torch.randn(8, 3, 8, 8, dtype=DT))):
    try:
        for _ in range(2):
            _, reading = measure_peak(lambda: runner(xo).backward())  # noqa: B023
        over = reading.peak - budget
        print(f"{name}: measured peak {reading.peak} B, budget {budget} B"
              f"{f' (over by {over} B)' if over > 0 else ' (held)'}")
    except ValueError as err:
        print(f"{name}: ValueError: {str(err)[:110]}")
try:
    r = PaperOffloadRunner.of(wrapped, x, "100%", "1GB/s")
    print(f'PaperOffloadRunner.of(..., "100%"): budget {r.plan.budget_bytes} B, {r.plan.method}, '
          f"predicted peak {r.plan.predicted_peak_bytes} B")
except Exception as err:  # noqa: BLE001
    print(f'PaperOffloadRunner.of(..., "100%"): {type(err).__name__}: {str(err)[:150]}')
