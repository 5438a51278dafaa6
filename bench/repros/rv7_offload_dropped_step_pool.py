"""A forward whose backward never comes (a validation pass with grad enabled: `model(x).sum().item()`) under a
CheckpointedSequential(..., offload=...) plan loses the plan's host buffers for good (a review, 2026-11-28).

The dropped step's StepCopies took its buffers from the plan's pool at its offloads and is garbage-collected
with its graph without ever giving them back (torch_exec/offload.py: only StepCopies.close(), called at the end
of a backward, returns them; Note [Pinned buffers once per plan] says such a step "just keeps its buffers until
it is garbage-collected" but the pool never sees them again). So every later training step finds the pool empty
and allocates all its host buffers anew (pinned host allocations on CUDA, every step, where the plan promises
them once per plan), and on the CPU its memory reading goes wrong: StepMeter.note_host_buffer takes each new
buffer off the step's peak, though it only replaces the dropped step's buffers, which were freed inside the
same step record (the dropped forward opens it: calls=2).

Observed (8 x Linear(96)+ReLU, batch 48, budget "55%" = 113836 B, offload="inf", 6 checkpoints swapped, CPU):
- without the dropped forwards: the pool allocates its 6 buffers once (110592 B), every step reads 94472 B
  beyond parameter gradients (predicted 96384 B);
- with one dropped forward after each step: host buffers allocated 6, 12, 18, 24 after steps 1-4 (the pool
  holds 0 B between steps), and steps 2-4 read 55296 B (measured peak 94472 B, calls 2): 39176 B below what the
  same step reads without the dropped forward, and 43 % below the plan's prediction.
(The solver swaps 5 or 6 checkpoints from one run to the next, as the CPU timings profiled vary; the figures
above are of a 6-swap run, a 5-swap run reads the same.)
Gradients stay equal to plain autograd's.
Expected: a step that is dropped gives its host buffers back to the pool (as PaperOffloadRunner's steps do since
rv5_offload_paper_runner_dropped_step_leak), the pool's allocations stay at the plan's buffers, and each step
reads what it reads without the dropped forward. Exits 1 while the fault shows."""
import sys

from _setup import nn, te, torch


def make():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(96, 96), nn.ReLU()) for _ in range(8)], nn.Linear(96, 10))


torch.manual_seed(1)
batches = [torch.randn(48, 96) for _ in range(4)]
checks = [torch.randn(48, 96) for _ in range(4)]
results = {}
ref = make()
for drop in (False, True):
    model = make()
    w = te.CheckpointedSequential(model, budget="55%", offload="inf", backend="cpu")
    w.prepare(batches[0])
    w.measure_memory(4)
    allocations = []
    for x, v in zip(batches, checks):
        w(x).square().mean().backward()
        if drop:
            _ = w(v).sum().item()   # a validation forward with grad enabled: its graph is dropped, no backward
        allocations.append(w._last.copies.allocations)
    if drop:
        for x in batches:
            ref(x).square().mean().backward()
        diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    report = w.memory_report()
    results[drop] = (allocations, [r.beyond_param_grads for r in report], report[-1].predicted_peak)
    print(f"{'with' if drop else 'without'} a dropped forward after each step: swaps {w.plan.swaps}, host buffers "
          f"allocated after each step {allocations}, pool holds {w._last.copies.host_bytes()} B between steps")
    print(f"    readings beyond parameter gradients {[r.beyond_param_grads for r in report]} B (measured peaks "
          f"{[r.measured_peak for r in report]}, calls {[r.calls for r in report]}), predicted "
          f"{report[-1].predicted_peak} B, budget {report[-1].budget} B")
print(f"largest gradient difference to plain autograd (with the dropped forwards): {diff}")

bad = 0
allocs, readings, _ = results[True]
if allocs[-1] > allocs[0]:
    print(f"BUG: the pool lost the dropped steps' buffers: {allocs[-1] - allocs[0]} host buffers allocated again")
    bad += 1
clean = results[False][1]
if readings[1:] != clean[1:]:
    print(f"BUG: steps 2-4 read {readings[1:]} B after a dropped forward, {clean[1:]} B without it")
    bad += 1
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
