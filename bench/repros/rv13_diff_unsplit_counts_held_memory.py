"""Review of 8e25cd8 (Note [Allocator blocks learned]): the rounding a measured CUDA step hands its learner
(torch_exec.meter.unsplit_bytes, read at the closing mark) is allocated-peak minus requested-peak in absolute
terms since the meter's start, so it counts the rounding of memory held *before* the step (the input batch,
parameters, optimizer state in cached blocks handed over unsplit), which the step's excess (measured above the
meter's first mark) never contains. A step whose own allocations are exact, over its budget by a profile
shortfall, then has that shortfall learned as "allocator blocks" and the warning says the allocator held 1 MiB
beyond the bytes asked for.

CUDA's counters are faked on the CPU (tests/test_torch_gpu.py FakeCudaCounters). Exits 1 while the rounding
handed over counts what was held before the step, 0 once it is the step's own.
"""
import sys
import warnings
from types import SimpleNamespace

import torch


class FakeCudaCounters:
    def __init__(self):
        self.allocated = self.peak = self.requested = self.requested_peak = 0
        torch.cuda.synchronize = lambda device=None: None
        torch.cuda.memory_allocated = lambda device=None: self.allocated
        torch.cuda.max_memory_allocated = lambda device=None: self.peak
        torch.cuda.reset_peak_memory_stats = lambda device=None: self.reset()
        torch.cuda.memory_stats = lambda device=None: {
            "allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.peak,
            "requested_bytes.all.current": self.requested, "requested_bytes.all.peak": self.requested_peak}

    def reset(self):
        self.peak, self.requested_peak = self.allocated, self.requested

    def alloc(self, nbytes, asked=None):
        self.allocated += nbytes
        self.requested += nbytes if asked is None else asked
        self.peak = max(self.peak, self.allocated)
        self.requested_peak = max(self.requested_peak, self.requested)

    def free(self, nbytes, asked=None):
        self.allocated -= nbytes
        self.requested -= nbytes if asked is None else asked


def main() -> int:
    from torch_exec.executor import learn_from_step
    from torch_exec.report import MemoryBudgetWarning, StepMeter
    counters = FakeCudaCounters()
    MiB = 1 << 20
    # before the step: the input batch (9 MiB asked) served a cached 10 MiB block unsplit; held through the step
    counters.alloc(10 * MiB, 9 * MiB)
    meter = StepMeter(cuda_steps=1)
    plan = SimpleNamespace(backend="cpu", predicted_peak_bytes=600_000)
    readings = []
    meter.begin(torch.device("cuda", 0), [], plan, budget=700_000, plain=False)
    counters.alloc(100)                      # the model's output: exact
    meter.turn_start(lambda *reading: readings.append(reading))
    meter.turn_end(())
    counters.alloc(799_900)                  # the backward: exact blocks (every request split), 100 kB over budget
    counters.free(799_900)
    meter.end()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MemoryBudgetWarning)
        meter.finalize()
    record = meter.records[0]
    [(peak, kept, grads, over, excess, unsplit, slack)] = readings
    own = 0  # the step's own allocations were all exact
    print(f"step measured {record.beyond_param_grads} B against a budget of 700000 B: excess {excess} B")
    print(f"rounding handed to the learner: {unsplit} B; the step's own allocations' rounding: {own} B "
          f"(the {unsplit} B are the input batch's block, allocated before the step)")
    entry = SimpleNamespace(caller_reserve=0, caller_turn=0, grad_reserve=0, blocks_reserve=0, replan_due=False,
                            regrouped=None, device=torch.device("cuda", 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learn_from_step(entry, peak, kept, grads, over, excess, unsplit, slack)
    print(f"learned: blocks_reserve = {entry.blocks_reserve} B (caller_reserve {entry.caller_reserve} B)")
    for w in caught:
        print("warning:", str(w.message)[:260])
    return 1 if unsplit > own else 0


if __name__ == "__main__":
    sys.exit(main())
