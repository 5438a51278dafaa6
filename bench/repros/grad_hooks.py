"""Parameter gradient hooks that allocate (p.register_hook(lambda g: g.clamp(-c, c) * 1.0), registered BEFORE
prepare) push the measured peak beyond parameter gradients over the budget, at every budget fraction,
including plain autograd's own peak (f=1). The profiler suspends parameter hooks (ModelSnapshot)."""
from _setup import M, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
m = M(); x = torch.randn(32, 64); y = torch.randint(0, 10, (32,))
for p in m.parameters():
    p.register_hook(lambda g: g.clamp(-0.01, 0.01) * 1.0)     # per-parameter gradient clipping hook
w = te.auto_checkpoint(m, "100%", backend="cpu")
w.prepare(x, y)
ex = w.executor; least = ex.min_budget_bytes; plain = te.executor.plain_peak_bytes(ex._last)
for f in (0.0, 0.3, 1.0):
    for regime in ("none", "zeros"):
        w.replan(int(least + f * (plain - least)))
        for p in m.parameters(): p.grad = None if regime == "none" else torch.zeros_like(p)
        w.measure_memory(1)
        w(x, y).backward()
        r = w.memory_report()[-1]
        print(f"f={f} grads={regime:5s} budget={r.budget} predicted={r.predicted_peak} measured_beyond_grads={r.beyond_param_grads} "
              f"over_by={r.beyond_param_grads - r.budget} within={r.within_budget}")
