"""A measured plain-autograd step whose caller back-propagates two outputs in two backward calls, another output
than the first one first (``b.backward(retain_graph=True); a.backward()``), is recorded from its forward to the end
of the FIRST backward only: the second backward's peak is left out of ``memory_report()`` (a review of 6adbcd3,
2026-11-28).

6adbcd3 (StepMeter.end_with_backward_of, torch_exec/report.py) ends the measurement with
``register_multi_grad_hook(outputs, hook, mode="any")``: the hook fires in the first backward that reaches ANY output
and queues StepMeter.end; the later backward finds no pending measurement (end() returns). Before, the hook sat on
``outputs[0]`` alone and fired in the backward through that output: the order "other output first, first output
last" was measured to its end, and now is not (the order "first output first" was cut short before and still is).

Observed (a body, a wide head ``a`` (64 -> 8192 -> 64) and a small head ``b`` over one hidden state, batch 64,
``auto_checkpoint(model, "100%", backend="cpu")``, which runs plain autograd; this script):
- loss order a then b: record 6389768 B, the same step under a MemoryMeter 6389768 B (6514efb and d97ccc3 alike);
- loss order b then a: record 4210688 B at 6514efb, the same step under a MemoryMeter 6357256 B; d97ccc3 recorded
  6357256 B.
Cause: StepMeter.end_with_backward_of ends the step at the first backward that reaches an output, and StepMeter.end
drops any later one (``if self._pending is None: return``).
Expected: the record covers every backward of the step that reaches its outputs (e.g. end() called again before the
step is finalized moves the closing mark: keep ``self._ended`` extendable by a later backward's end until the next
step or the report read finalizes it). Exits 1 while the record misses a backward of the step."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import MemoryMeter  # noqa: E402


class TwoHeads(nn.Module):
    def __init__(self, d=64, wide=8192):
        super().__init__()
        self.body = nn.Linear(d, d)
        self.big = nn.Sequential(nn.Linear(d, wide), nn.Tanh(), nn.Linear(wide, d))
        self.small = nn.Linear(d, d)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.big(h), self.small(h)


torch.manual_seed(0)
x = torch.randn(64, 64)
w = te.auto_checkpoint(TwoHeads(), "100%", backend="cpu")
warnings.simplefilter("ignore")
w(x)[0].sum().backward()
for p in w.parameters():
    p.grad = torch.zeros_like(p)
print(f"plan backend: {w.plan.backend} (plain autograd)")


def step(order):
    a, b = w(x)
    first, second = (a, b) if order == "a then b" else (b, a)
    first.square().sum().backward(retain_graph=True)
    second.square().sum().backward()


bad = False
for order in ("a then b", "b then a"):
    w.measure_memory(1)
    step(order)
    record = w.memory_report()[-1]
    with MemoryMeter("cpu") as whole:
        step(order)
    print(f"loss order {order}: record {record.measured_peak} B, the same step under a MemoryMeter "
          f"{whole.total.peak} B")
    bad |= record.measured_peak < 0.99 * whole.total.peak
print("BUG: the measured step's record ends at its first backward" if bad else "ok")
sys.exit(1 if bad else 0)
