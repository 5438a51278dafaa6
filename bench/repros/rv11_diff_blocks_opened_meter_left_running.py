"""auto_checkpoint's block fallback, CPU, a step asked for with ``measure_memory()``: a call that raises in the
model's code before the blocks (a guard the training loop catches to skip the batch), or that calls none of the
blocks (``_substituted`` allows 0 calls), leaves the meter StepMeter.open started at the model's call running: a
CPU profiler session records from then on, through whatever the caller does (an eval loop under no_grad, which
never reaches _call_scheduled), until the next scheduled call withdraws it (a review of 95e3622/6adbcd3,
2026-11-28).

Observed (data-dependent control flow, an embedding, 4 blocks and a head, batch 64, "100%"; this script):
- after the refused batch: ``torch._C._autograd._profiler_enabled()`` True at 6514efb (False at d97ccc3, whose meter
  started at the first block, which that call never reached); still True after 3 eval calls under no_grad;
- after a call that skips every block: True as well;
- a torch.profiler session the user then opens around a step: at 6514efb no record is made of the measured step
  (memory_report() empty after 2 more steps, and kineto prints "disableProfiler called but no active profiling
  session found"); d97ccc3 recorded it at the next step outside the profiler (1 record).
Cause: torch_exec/auto.py AutoCheckpointed._run_blocks calls ``executor._meter.open(...)`` before the model runs and
never gives the meter up when the model returns or raises without reaching the executor (StepMeter.begin adopts it
only there); StepMeter.withdraw runs at the next _call_scheduled's _finalize_meters.
Expected: no meter left running after the model's call returns or raises: e.g. in _run_blocks,
``try: ... finally: executor._meter.withdraw()`` (a no-op once begin adopted it). Exits 1 while the profiler is
left recording after such a call."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT


class Guarded(nn.Module):
    def __init__(self, d=32, n=4):
        super().__init__()
        self.embed = nn.Linear(d, d)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(n))
        self.head = nn.Linear(d, 5)

    def forward(self, x, y):
        if not torch.isfinite(x).all():  # data-dependent (the block fallback), a guard the loop catches
            raise ValueError("non-finite batch")
        skip = bool(x.abs().mean() > 10)  # a batch of large values skips the blocks (the same input signature)
        x = self.embed(x)
        if not skip:
            for layer in self.layers:
                x = layer(x)
        return nn.functional.cross_entropy(self.head(x), y)


def on():
    return bool(torch._C._autograd._profiler_enabled())


warnings.simplefilter("ignore")
torch.manual_seed(0)
x, y = torch.randn(64, 32), torch.randint(0, 5, (64,))
w = te.auto_checkpoint(Guarded(), "100%", backend="cpu")
w.prepare(x, y)
w(x, y).backward()
print(f"capture: {w.capture.method}; after a step: profiler recording {on()}")

w.measure_memory(1)
bad_batch = x.clone()
bad_batch[0, 0] = float("nan")
try:
    w(bad_batch, y)
except ValueError as err:
    print(f"the refused batch raised ({err}); profiler recording {on()}")
left = on()
with torch.no_grad():
    for _ in range(3):
        w(x, y)
print(f"after 3 eval calls under no_grad: profiler recording {on()}")
w(x, y).backward()  # the step the measurement was asked for (withdrawn and taken again here)
w(x, y).backward()

w.measure_memory(1)
w(100 * x, y).backward()  # no block called: allowed
skipped = on()
print(f"after a call that skips every block: profiler recording {skipped}")
w(x, y).backward()
w(x, y).backward()

w.measure_memory(1)
try:
    w(bad_batch, y)
except ValueError:
    pass
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
    w(x, y).backward()
before = len(w.memory_report())
w(x, y).backward()
w(x, y).backward()
after = len(w.memory_report())
print(f"measure_memory(1), a refused batch, a step inside the user's torch.profiler, 2 steps: {after - before} "
      f"record(s)")
bad = left or skipped or after == before
print("BUG: the meter opened at the model's call is left running" if bad else "ok")
sys.exit(1 if bad else 0)
