"""PaperOffloadRunner: a step whose backward never runs (a forward under grad whose output is dropped,
e.g. a validation loss computed without torch.no_grad(); or a forward that raised, e.g. a NaN check in
the last stage) is never closed (a review, 2026-11-27). The pack hook returns a tensor that is not moved
as itself (``_PaperStep.pack``: ``return t``); for a tensor an op saves as its own OUTPUT (tanh, the
loss's square...) that makes a reference cycle through autograd's C++ graph (node -> saved PyObject ->
tensor -> grad_fn -> node) that Python's gc cannot break: the whole graph (every saved activation), the
step's host buffers and its records stay alive for the rest of the process, and Note [Steps end with
their graph]'s "token and handles are gone" never becomes true. Plain autograd frees the graph when its
output is dropped (the same forward without the runner: 0 B left). Exits nonzero while the bug shows."""
import gc

from _setup import nn, te, torch
from torch_exec.meter import measure_peak
from torch_exec.paper_offload import PaperOffloadRunner


class MeanSquare(nn.Module):
    fail = False

    def forward(self, y):
        if MeanSquare.fail:
            raise FloatingPointError("loss is NaN")
        return y.square().mean()


torch.manual_seed(0)
stages = nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.Tanh()) for _ in range(8)], MeanSquare())
x = torch.randn(256, 128)
runner = PaperOffloadRunner.of(te.CheckpointedSequential(stages, budget=None, profile_passes=1, profile_warmup=0),
                               x, "60%", "50GB/s")
print(f"plan: {runner.plan.method}, moves tapes {runner.plan.decisions}")
runner(x).backward()  # a first full step: the pool holds the plan's host buffers


def dropped_forward(fn):
    fn(x).item()       # under grad, output dropped: no backward


def failed_forward(fn):
    MeanSquare.fail = True
    try:
        fn(x)
    except FloatingPointError:
        pass
    MeanSquare.fail = False


bad = 0
for name, what in (("forward under grad, output dropped", dropped_forward), ("forward that raised", failed_forward)):
    for who, fn in (("plain autograd", stages), ("PaperOffloadRunner", runner)):
        def go():
            what(fn)
            gc.collect()
        _, reading = measure_peak(go)
        print(f"{name}, {who}: {reading.delta} B still allocated afterwards")
        if who != "plain autograd":
            bad += reading.delta > 0
for _ in range(3):
    runner(x).backward()
gc.collect()
open_steps = [(s.closed, s.token() is not None) for s in runner._open]
print(f"after 3 more full steps: {len(runner._open)} steps open (closed, token alive): {open_steps}; "
      f"host buffers ever allocated {runner.copies.allocations} (one step takes {len(runner.copies.buffers())})")
bad += sum(1 for closed, _ in open_steps if not closed)
print("BUG" if bad else "ok")
raise SystemExit(1 if bad else 0)
