"""A CheckpointedSequential nested as a stage of another, the outer one's step measured
(measure_memory) and re-planned below plain autograd: the outer plan runs the inner wrapper without
grad in the forward, so the inner's first call with grad (and its profiling) happens inside the
outer's backward. Making way for the inner's meter, the outer's CPU meter (torch.profiler) is stopped
inside the backward, where autograd's engine runs under the thread state captured at backward():
the thread's profiler stays on. Every later measured step is skipped ("while your torch.profiler
... records") and any new wrapper's first call raises ProfilerBusyError, though the user runs no
profiler. Gradients are right."""
import copy
import sys
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import profiler_recording

torch.manual_seed(0)
D = 64


def blocks(n):
    return [m for _ in range(n) for m in (nn.Linear(D, D), nn.Tanh())]


x, y = torch.randn(16, D), torch.randint(0, 10, (16,))
first, mid, last = nn.Sequential(*blocks(1)), nn.Sequential(*blocks(2)), nn.Sequential(*blocks(1), nn.Linear(D, 10))
ref = copy.deepcopy(nn.Sequential(first, mid, last))  # plain autograd
inner = te.CheckpointedSequential(mid, budget="100%", backend="cpu")
outer = te.CheckpointedSequential(nn.Sequential(first, inner, last), budget="100%", backend="cpu")
F.cross_entropy(ref(x), y).backward()
outer.prepare(x)
outer.replan(outer.min_budget_bytes)
outer.measure_memory(3)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for step in range(3):
        outer.zero_grad()
        F.cross_entropy(outer(x), y).backward()
        print(f"step {step}: a profiler records on this thread after the step: {profiler_recording()}; "
              f"outer's measured steps so far: {len(outer.memory_report())}")
diff = max((a.grad - b.grad).abs().max().item() for a, b in zip(outer.parameters(), ref.parameters()))
print(f"max abs grad diff vs plain autograd: {diff:.3g}")
for c in caught:
    print(f"warning: {type(c.message).__name__}: {str(c.message)[:150]}")
fresh = te.CheckpointedSequential(nn.Sequential(*blocks(2)), budget="100%", backend="cpu")
try:
    fresh.prepare(x)
    busy = None
    print("a new wrapper's prepare(): ok")
except Exception as exc:  # noqa: BLE001
    busy = exc
    print(f"a new wrapper's prepare(): {type(exc).__name__}: {str(exc)[:160]}")
sys.exit(1 if busy is not None or len(outer.memory_report()) == 0 else 0)
