"""CheckpointedSequential with tuple states under float16 autocast on the CPU: measured peak beyond
parameter gradients exceeds the budget at the least budget (loss computed inside the model)."""
import os

from _setup import nn, te, torch  # the tree under test: GS_ROOT
D = 64
DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "none": None}[os.environ.get("DT", "fp16")]

class TupleStage(nn.Module):     # tensor or (a, b) in, (relu(a(x)), tanh(b(x))) out
    def __init__(s): super().__init__(); s.a = nn.Linear(D, D); s.b = nn.Linear(D, D)
    def forward(s, h):
        x = h if isinstance(h, torch.Tensor) else h[0] + h[1]
        return torch.relu(s.a(x)), torch.tanh(s.b(x))
class Merge(nn.Module):
    def forward(s, h): return h[0] * h[1]
class Loss(nn.Module):
    def forward(s, h): return h.float().square().mean()

torch.manual_seed(0)
stages = nn.Sequential(TupleStage(), TupleStage(), TupleStage(), Merge(), nn.Linear(D, D), Loss())
x = torch.randn(32, D)
w = te.CheckpointedSequential(stages, budget="100%", backend="cpu")
with torch.autocast("cpu", dtype=DT, enabled=DT is not None):
    w.prepare(x)
least, plain = w.min_budget_bytes, te.executor.plain_peak_bytes(w._last)
for f in (0.0, 0.3, 0.6, 1.0):
    w.replan(int(least + f * (plain - least)))
    for p in w.parameters(): p.grad = torch.zeros_like(p)
    w.measure_memory(1)
    with torch.autocast("cpu", dtype=DT, enabled=DT is not None):
        loss = w(x)
    loss.backward()
    r = w.memory_report()[-1]
    print(f"f={f} budget={r.budget} predicted={r.predicted_peak} measured_beyond_grads={r.beyond_param_grads} "
          f"over_by={r.beyond_param_grads - r.budget} within={r.within_budget}  plain={w._last.plain}")
if os.environ.get("SHOW"): w.replan(least); print(w.plan.summary()); print(w._last.chain)
