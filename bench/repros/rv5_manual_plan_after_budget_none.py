"""replan(None) switches the wrapper to plain autograd, but .plan and .plans keep the old budget's
checkpointing plan (its budget, predicted peak and recomputation) after the next steps, which run
plain autograd; and measure_memory() armed under budget=None never measures a step and says nothing
(memory_report() stays empty, the steps stay armed), so the plain baseline cannot be read this way."""
import sys
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
D = 64
seq = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(D, D), nn.Tanh())], nn.Linear(D, 10))
x, y = torch.randn(32, D), torch.randint(0, 10, (32,))
w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
w.prepare(x)
w.replan(w.min_budget_bytes)
print(f"at the least budget: extra_repr '{w.extra_repr()}'; .plan budget {w.plan.budget_bytes} B, predicted "
      f"{w.plan.predicted_peak_bytes} B, recomputed stages {sum(w._last.recomputed)}")
w.replan(None)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    w.measure_memory(2)
    for _ in range(2):
        F.cross_entropy(w(x), y).backward()
    report = w.memory_report()
stale = w.plan is not None
print(f"after replan(None) and 2 steps: extra_repr '{w.extra_repr()}'; .plan "
      f"{'None' if w.plan is None else f'budget {w.plan.budget_bytes} B, predicted {w.plan.predicted_peak_bytes} B'}; "
      f".plans {[(p.budget_bytes, p.predicted_peak_bytes) for p in w.plans.values()]}")
print(f"measure_memory(2) under budget=None: {len(report)} records, {w._meter.armed} steps still armed, "
      f"warnings {[str(c.message)[:80] for c in caught]}")
said = any("not measured" in str(c.message) for c in caught)
sys.exit(1 if stale or not (report or said) else 0)  # measured, or said it is not
