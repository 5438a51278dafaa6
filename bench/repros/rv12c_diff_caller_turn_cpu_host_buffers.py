"""The caller's turn (Note [The caller's turn] in torch_exec/executor.py) learns a reserve from a measured step
that held its budget, on the CPU path of an offloading plan: the turn's level against the budget counts the
plan's "host" buffers, which that step's own record leaves out (Note [Gradients set during the step] in
torch_exec/report.py: on the CPU they are the same memory as the "device", allocated in the plan's first
measured step). 8d78b68 learned only from a step over its budget; now a step within it reserves what the loss
used and re-plans, with a warning that "the step went ... B over the budget" while the record says it held.

Here: CheckpointedSequential of 8 x (Linear(256), ReLU) on the CPU, offload="12GB/s", budget 60 % of plain
autograd's peak (the plan offloads 5 checkpoints), the caller's loss outside the model (an MSE against a target),
one measured step: its record reads 918532 B against a 1022976 B budget, yet the turn is taken as 156684 B over,
131084 B is reserved, and the next call raises InfeasibleBudgetError at the budget that just held.
Cause: torch_exec/report.py StepMeter._learn_turn: ``over = reading.start + peak - room`` reads the raw meter
level, which includes the host buffers allocated before the turn (``sets.host``, the marks of
``note_host_buffer``), where the record's figure subtracts them (``_GradientsSet.peak_beyond``).
Expected: no reserve learned and no warning from a step the memory report shows within its budget. Exits 1 while
one is learned."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT
from gpusolve.errors import InfeasibleBudgetError

torch.manual_seed(0)
D = 256
model = te.CheckpointedSequential([nn.Sequential(nn.Linear(D, D), nn.ReLU()) for _ in range(8)], "60%",
                                  backend="cpu", offload="12GB/s", profile_passes=1)
x, target = torch.randn(128, D), torch.randn(128, D)
model.prepare(x)
plan = model.plan
print(f"budget {plan.budget_bytes} B, predicted {plan.predicted_peak_bytes} B, swaps {plan.swaps}")
model.measure_memory(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, target)
    del out
    loss.backward()
    del loss
    try:
        model(x).sum().backward()  # the next call records the step (and re-plans with what it learned)
    except InfeasibleBudgetError as err:
        print(f"the next call raised: {str(err)[:300]}")
r = model.memory_report()[0]
print(f"measured step: {r.beyond_param_grads} B against budget {r.budget} B, within budget: {r.within_budget}")
entry = model._last
learned = [str(w.message) for w in caught if "the code between the model's forward" in str(w.message)]
for text in learned:
    print("warning:", text[:260])
print(f"caller_reserve {entry.caller_reserve} B")
bad = r.within_budget and (entry.caller_reserve > 0 or learned)
print("BUG: a step within its budget taught a caller's reserve (the host buffers counted in the turn's level)"
      if bad else "ok")
sys.exit(1 if bad else 0)
