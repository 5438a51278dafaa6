"""A model that returns its (grad-requiring) input beside the loss: budget="100%" with caller_keeps="loss"
raises InfeasibleBudgetError (least budget above plain autograd's measured peak); with the default
caller_keeps, min_budget_bytes is above plain autograd's peak too. The input crossing to the output
leaves 0 valid cuts (one stage)."""
from _setup import M, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
x = torch.randn(32, 64, requires_grad=True); y = torch.randint(0, 128, (32,))
for ck in ("output", "loss"):
    w = te.auto_checkpoint(M(classes=128, return_input=True), "100%", backend="cpu", caller_keeps=ck)
    try:
        w.prepare(x, y)
        e = w.executor._last
        print(f"caller_keeps={ck}: ok; notes={w.capture.notes}; min_budget_bytes={w.executor.min_budget_bytes} "
              f"plain_peak={te.executor.plain_peak_bytes(e)}")
        w.measure_memory(1); loss, _ = w(x, y); loss.backward(); r = w.memory_report()[-1]
        print(f"   step: budget={r.budget} predicted={r.predicted_peak} beyond={r.beyond_param_grads} within={r.within_budget}")
    except Exception as err:
        print(f"caller_keeps={ck}: {type(err).__name__}: {err}")
