"""rv21r: the CPU meter's profiler session now parses its whole trace into FunctionEvents when it stops
(``acc_events=True``): profiling and every measured CPU step pay for it.

Setup: 6 x nn.TransformerEncoderLayer(256, 4, 512, batch_first=True), input 8 x 64 x 256, CPU, one thread; a
forward + backward under ``torch_exec.meter.MemoryMeter("cpu")`` (what the profiler's memory pass and a measured
step run), its stop timed (``MemoryMeter._end_session``), against the same meter with ``acc_events`` dropped
(torch.profiler.profile patched to ignore it), 3 runs each, medians.

Observed (CPU, torch 2.13): this script, s21_r: a stop 0.131 s, 0.022 s without acc_events (5.9x); 83aea4b:
0.018 s and 0.018 s (1.0x).  Timed inside profiling, s21_r: the meter's ``_end_session`` took 0.288-0.293 s a pass with acc_events=True against 0.037 s without,
inside torch_exec.profile(passes=3, warmup=1): 2.457-2.460 s against 2.119-2.173 s a profile (83aea4b: 2.023-2.068 s;
the data-dependent check's own forward is 0.078 s of the rest).

Cause: torch_exec/meter.py ``MemoryMeter.__enter__`` passes ``acc_events=True`` (commit 92cd630, to silence torch
2.11's "Profiler clears events at the end of each cycle" warning): with it torch.profiler builds the FunctionEvents
at each stop to accumulate them (a guess from the timings and pytorch PR #132713, which made that parsing lazy;
the meter reads ``kineto_results.events()`` only).  (``acc_events`` itself came with pytorch PR #133095, 2024-08:
pyproject.toml's torch>=2.1 floor would get a TypeError from every CPU meter; not checked in an old wheel.)

Expected: the stop costs what it did (silence the warning with a warnings filter around the meter's start, or
start the autograd profiler session directly).  Exits 1 while the stop takes over 3x the stop without acc_events.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import statistics, sys, time, warnings
import torch, torch.nn as nn
import torch.profiler as tp
torch.set_num_threads(1)
import torch_exec.meter as Mt
warnings.simplefilter("ignore")

torch.manual_seed(0)
net = nn.Sequential(*[nn.TransformerEncoderLayer(256, 4, 512, dropout=0.1, batch_first=True) for _ in range(6)])
x = torch.randn(8, 64, 256)
stops = []
exit_ = Mt.MemoryMeter.__exit__


def timed_exit(self, *exc):
    t = time.perf_counter()
    try:
        return exit_(self, *exc)
    finally:
        stops.append(time.perf_counter() - t)


Mt.MemoryMeter.__exit__ = timed_exit


def median_stop():
    stops.clear()
    for _ in range(3):
        with Mt.MemoryMeter("cpu"):
            net(x).sum().backward()
        net.zero_grad(set_to_none=True)
    return statistics.median(stops)


median_stop()  # warm
with_acc = median_stop()
orig = tp.profile


class NoAcc(orig):
    def __init__(self, *a, acc_events=False, **k):
        super().__init__(*a, **k)


tp.profile = NoAcc
without = median_stop()
tp.profile = orig
print(f"meter stop (exit, incl. reading the marks): {with_acc:.3f} s as the meter starts it, {without:.3f} s without "
      f"acc_events ({with_acc / without:.1f}x)")
sys.exit(1 if with_acc > 3 * without else 0)
