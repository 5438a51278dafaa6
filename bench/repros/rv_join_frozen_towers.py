"""A two-tower (CLIP-style) linear probe: both towers' backbones frozen, their projections trained
(a review, 2026-11-27). auto_checkpoint holds every intermediate of the frozen backbones as "side data"
through the step, and counts it in "plain autograd's peak": budgets that plain autograd itself fits are
refused, and the step measures several times plain autograd's peak."""
import copy
import sys
from pathlib import Path

from _setup import te, torch
from torch_exec.meter import MemoryMeter

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from models import FrozenTwoTower, bert_probe, plain_step_peak  # noqa: E402


torch.manual_seed(0)
args = (torch.randn(256, 768), torch.randint(0, 100, (256, 8)))
model = FrozenTwoTower()
reference = copy.deepcopy(model)
plain = plain_step_peak(reference, args)
print(f"plain autograd (the model itself): step peak {plain} B")

wrapped = te.auto_checkpoint(model, "100%")
wrapped.prepare(*args)
print(f"auto_checkpoint: {type(wrapped.executor).__name__}; "
      + "; ".join(n for n in wrapped.capture.notes if "held through each step" in n or "join" in n))
print(f"  '100%' resolves to {wrapped.plan.budget_bytes} B ({wrapped.plan.budget_bytes / plain:.2f} x plain autograd's "
      f"step peak); min_budget_bytes {wrapped.executor.min_budget_bytes} B")
for budget in (plain, 2 * plain):
    try:
        wrapped.replan(budget)
        print(f"  budget {budget} B: planned, predicted {wrapped.plan.predicted_peak_bytes} B")
    except Exception as exc:  # noqa: BLE001
        print(f"  budget {budget} B: {type(exc).__name__}: {str(exc).splitlines()[0]}")
wrapped.replan("100%")
wrapped.capture.side.values = []   # as before a first step: nothing left from an earlier one
measured = plain_step_peak(wrapped, args)
inputs = {t.untyped_storage().data_ptr() for t in args}
held = sum(t.untyped_storage().nbytes() for t in wrapped.capture.side.values
           if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs)
print(f"  a step at '100%', measured around the call: {measured} B ({measured / plain:.2f} x plain autograd's)")
print(f"  side values (the inputs' storages left out) still held after the step ended: {held} B")
model.zero_grad(set_to_none=True)
reference.zero_grad(set_to_none=True)
reference(*args).backward()
wrapped(*args).backward()
diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), reference.parameters())
           if p.grad is not None)
print(f"  max abs gradient difference against plain autograd: {diff}")

# The same on the README's own frozen example (examples/models.py's bert_probe, bench/repros/frozen_probe.py)
model, batch = bert_probe()
reference = copy.deepcopy(model)
for m in (model, reference):
    for p in m.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
with MemoryMeter("cpu") as meter:
    start = meter.mark()
    reference(**batch).loss.backward()
    end = meter.mark()
plain = meter.between(start, end).peak
wrapped = te.auto_checkpoint(model, "100%", caller_keeps="loss")
wrapped.prepare(**batch)
print(f"bert_probe: plain autograd's step peak {plain} B; '100%' resolves to {wrapped.plan.budget_bytes} B "
      f"({wrapped.plan.budget_bytes / plain:.2f} x); "
      + "; ".join(n for n in wrapped.capture.notes if "held through each step" in n))
