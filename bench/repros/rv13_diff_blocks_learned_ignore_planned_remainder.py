"""Review of 8e25cd8 (Note [Allocator blocks learned]): every CUDA plan already reserves one unsplit block,
ALLOCATOR_REMAINDER = 1 MiB (executor_chain -> caller_chain, torch_exec/executor.py ~696; Note [Allocator blocks]),
and counts each tensor in 512-byte granules. learn_allocator_blocks caps what it learns by the whole rounding
the step read (``unsplit``), not by what of it the plan did not already reserve: a step whose rounding (800 kB)
fits inside the 1 MiB the plan reserved, over its budget by a 500 kB profile shortfall, learns the 500 kB as
"cached blocks the CUDA allocator handed over unsplit", and the warning no longer names re-profiling. With
rounding above the remainder the split the warning prints ("the other N B are the profile's") is off by 1 MiB.

Exits 1 while the learned reserve exceeds what the reading shows beyond the planned remainder, 0 once fixed.
"""
import sys
import warnings
from types import SimpleNamespace

import torch

from torch_exec._util import ALLOCATOR_REMAINDER
from torch_exec.executor import learn_from_step


def learn(unsplit, excess):
    entry = SimpleNamespace(caller_reserve=0, caller_turn=0, grad_reserve=0, blocks_reserve=0, replan_due=False,
                            regrouped=None, device=torch.device("cuda", 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # peak/kept/grads/over of a caller's turn that used nothing (a plain loss on a planned a_N)
        learn_from_step(entry, 0, 0, 0, -10**6, excess, unsplit)
    return entry.blocks_reserve, [str(w.message) for w in caught]


def main() -> int:
    bad = False
    for unsplit, excess in ((800_000, 500_000), (1_500_000, 2_000_000)):
        learned, msgs = learn(unsplit, excess)
        beyond = max(0, unsplit - ALLOCATOR_REMAINDER)  # what the reading shows beyond the plan's reserved block
        expected = min(excess, beyond)
        print(f"rounding read {unsplit} B, plan reserves {ALLOCATOR_REMAINDER} B of it, step over by {excess} B: "
              f"learned {learned} B as allocator blocks (beyond the planned remainder: {expected} B)")
        for m in msgs:
            i = m.find("the next steps")
            print("   warning: ..." + m[i:i + 120])
        bad |= learned > expected
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
