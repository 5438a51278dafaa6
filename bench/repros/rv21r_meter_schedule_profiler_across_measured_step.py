"""rv21r: a user's torch.profiler with a schedule, stepped across measured CPU steps, raises in the user's
``prof.step()`` (before and after today's Note [Another profiler ended the session]).

Setup: CheckpointedSequential(budget="80%") over 6 x (Linear(16, 16), Tanh), input 8 x 16, one step, then
``measure_memory(3)`` and 6 steps inside ``with torch.profiler.profile(schedule=schedule(wait=1, warmup=1, active=2,
repeat=1)) as prof:``, ``prof.step()`` after each (the usual training-loop profiler).

Observed (CPU, torch 2.13): RuntimeError "Profiler is already enabled on this thread." out of the loop (from
``prof.step()`` -> ``_transit_action`` -> ``start_trace``: the warm-up -> active transition), a
MemoryBudgetWarning "a measured step's record was lost: a profiler started on this thread before it was
recorde...", torch's "disableProfiler called but no active profiling session found", 0 memory reports, no trace;
the same at 83aea4b and s21_r.

Cause (a guess): a measured step's CPU meter keeps its profiler session open until the wrapper's next call
(torch_exec/meter.py, Note [One profiler per thread]); the schedule's warm-up starts its own session at
``prof.step()`` into the active phase while it is open, and torch allows one per thread.  room_for_a_cpu_meter only sees a profiler that
already records, and a schedule's profiler records nothing during ``wait``.

Expected: the user's loop runs (the meter gives way, or stops before the step returns), its trace holds the active
steps; the measurement may be lost with the warning.  Exits 1 while the loop raises.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, warnings
import torch, torch.nn as nn
from torch.profiler import profile, schedule
torch.set_num_threads(1)
import torch_exec as te

torch.manual_seed(0)
w = te.CheckpointedSequential(nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(6)]),
                              budget="80%")
x = torch.randn(8, 16)
w(x).sum().backward()
w.measure_memory(3)
err = None
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    try:
        with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=1)) as prof:
            for _ in range(6):
                w(x).sum().backward()
                prof.step()
    except RuntimeError as e:
        err = e
print(f"loop: {'raised ' + repr(str(err)) if err else 'ran'}; warnings: "
      f"{sorted(set(str(m.message)[:80] for m in ws if 'CPU' not in str(m.message)[:40]))}; "
      f"reports: {len(w.memory_report())}")
sys.exit(1 if err else 0)
