"""auto_checkpoint(model, budget, offload=...).replan(offload=...) changes the link of the input signatures seen so
far only: the next new signature (the last, smaller batch of an epoch) is captured with the link given at
construction (a review, 2026-11-28).

AutoCheckpointed.replan (torch_exec/auto.py) passes offload= on to each existing capture's executor
(CheckpointedSequential.replan) but leaves self._executor_kwargs["offload"] as it was, and _capture_for builds
every later executor from self._executor_kwargs. (The budget does not have this problem: replan sets
self.budget, which new captures read.)

Observed (bench/repros/_setup.py's M: 8 x Linear(96)+ReLU, head, cross-entropy; budget "55%", CPU):
- made with offload="inf", batch 48 trained (5 checkpoints offloaded), then replan(offload=None): the batch-48
  executor has offload None and no OFFLOAD op; the next batch of 32 gets an executor with
  offload=Link(inf, inf) and a plan with 6 OFFLOAD ops, though offloading was turned off;
- made without offload, replan(offload="inf") at batch 48: the batch of 32 is planned without a link (offload
  None, no OFFLOAD op), while batch 48's plan offloads.
Expected: a new signature uses the link replan() last set, as every signature seen before does. Exits 1 while
the fault shows."""
import sys

from _setup import M, te, torch
from gpusolve.schedule import OpKind


def offloads(wrapper):
    return sum(op.kind is OpKind.OFFLOAD for op in wrapper.plan.schedule)


torch.manual_seed(1)
big = (torch.randn(48, 96), torch.randint(0, 10, (48,)))
small = (torch.randn(32, 96), torch.randint(0, 10, (32,)))
bad = 0
for made_with, replanned in (("inf", None), (None, "inf")):
    torch.manual_seed(0)
    w = te.auto_checkpoint(M(D=96, L=8), "55%", offload=made_with, backend="cpu")
    w(*big).backward()
    before = offloads(w)
    w.replan(offload=replanned)
    after = (w.executor.offload, offloads(w))
    w(*small).backward()
    new = (w.executor.offload, offloads(w))
    print(f"made with offload={made_with!r}: batch 48 {before} OFFLOAD ops; after replan(offload={replanned!r}) "
          f"batch 48: offload={after[0]!r}, {after[1]} OFFLOAD ops; new batch 32: offload={new[0]!r}, "
          f"{new[1]} OFFLOAD ops")
    if (new[0] is None) != (replanned is None):
        print(f"  BUG: the new signature's executor was made with offload={new[0]!r}, not the replanned "
              f"{replanned!r}")
        bad += 1
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
