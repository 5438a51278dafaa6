"""torchvision's RAFT (raft_small, random weights, one pair of 128 x 128 frames, 3 flow updates) wrapped with
``auto_checkpoint(model, "100%", backend="cpu")``: at a budget plain autograd fits, the step runs as plain autograd
(CheckpointedSequential._plain_step), and a step asked for with ``model.measure_memory(1)`` whose loss reads the
model's last flow prediction only (RAFT returns the list of every update's prediction) is never recorded:
``memory_report()`` stays empty, no warning says why, and the measurement stays pending from step to step (each next
call gives it up and arms it again), so a CPU profiler session records between every two steps from then on.

Observed (CPU, torch 2.13, torchvision 0.28): 0 records after 4 measured steps, a profiler recording between steps
(``torch._C._autograd._profiler_enabled()`` True); the same step with a loss over every prediction is recorded, and so
is the same loss at "60%" (a checkpointing plan, whose step ends in the chain's own backward).
Cause: torch_exec/report.py, StepMeter.end_with_backward_of, hooks ``outputs[0]`` only (``outputs[0].register_hook``):
the first output (the first update's upsampled flow) gets no gradient in that backward, so the hook never fires and
:meth:`StepMeter.end` is never queued; StepMeter.finalize then takes the step for a forward without a backward and
puts the measurement back (``_undo_start``), to be started again by the next call. Any model whose first output the
loss does not reach (a model returning ``(embedding, logits)`` trained on the logits) does the same; on CUDA the
first 3 steps are measured by default, so there every step would stay "measured", resetting the peak counters.
Fix: end on the first gradient any output receives, e.g. ``torch.autograd.graph.register_multi_grad_hook(outputs,
hook, mode="any")`` queuing ``self.end`` (which already ignores a second call).
Expected: one record per measured step. Exits 1 while the measured steps go unrecorded."""
import sys
import types

from _setup import te, torch  # the tree under test: GS_ROOT

try:
    from torchvision.models.optical_flow import raft_small
except Exception:  # noqa: BLE001 - PyPI's torchvision beside a CPU torch cannot register its C++ operators
    for name in [k for k in sys.modules if k.startswith("torchvision")]:
        del sys.modules[name]
    for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
        sys.modules[name] = types.ModuleType(name)  # RAFT needs none of them
    from torchvision.models.optical_flow import raft_small

torch.manual_seed(0)
model = raft_small(weights=None).train()
a, b = torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128)
w = te.auto_checkpoint(model, "100%", backend="cpu")
w.prepare(a, b, 3)
for p in w.parameters():
    p.grad = torch.zeros_like(p)
print("plan:", w.plan.notes[-1][:90])


def step_last_only():
    flows = w(a, b, 3)
    flows[-1].pow(2).mean().backward()  # the loss reads the last prediction only


w.measure_memory(1)
for _ in range(4):
    step_last_only()
recording = bool(torch._C._autograd._profiler_enabled())  # before memory_report(), which gives the pending step up
recorded = len(w.memory_report())
print(f"loss on the last prediction, 4 steps after measure_memory(1): {recorded} record(s); a profiler records "
      f"between steps: {recording}")

w.measure_memory(1)
flows = w(a, b, 3)
sum(f.pow(2).mean() for f in flows).backward()
flows = None
step_last_only()  # the next call records the ended step
print(f"loss over every prediction: {len(w.memory_report()) - recorded} record(s) of 1 step")
bug = recorded == 0
print("BUG: a measured plain-autograd step whose loss skips the first output is never recorded" if bug else "ok")
sys.exit(1 if bug else 0)
