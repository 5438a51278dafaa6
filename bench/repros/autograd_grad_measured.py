"""torch.autograd.grad(loss, params) raises 'not used in the graph' on a step armed with measure_memory()
(under a checkpointing plan), and works on the same step unmeasured. README: autograd.grad(loss, params)
behaves as in plain autograd; the meter's own post-accumulate-grad hooks make _tap_params skip every param."""
from _setup import M, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
m = M(); x = torch.randn(32, 64); y = torch.randint(0, 10, (32,))
w = te.auto_checkpoint(m, "100%", backend="cpu")
w.prepare(x, y)
w.replan(w.executor.min_budget_bytes)            # a checkpointing plan
print("plain autograd in plan:", w.executor._last.plain)
g = torch.autograd.grad(w(x, y), list(m.parameters())); print("unmeasured step: ok,", len(g), "grads")
w.measure_memory(1)
try:
    g = torch.autograd.grad(w(x, y), list(m.parameters())); print("measured step: ok")
except RuntimeError as e:
    print("measured step: RuntimeError:", e)
