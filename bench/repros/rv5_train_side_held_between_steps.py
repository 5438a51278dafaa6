"""The captured program's side values (auto.py's _Side: data made from the inputs, here a frozen backbone's
output) stay referenced by the capture after the step's backward has ended, through the optimizer step and a
validation pass, until the next training call replaces them, and that call's prologue runs with the old
ones still held. Plain autograd frees them with the graph. So the second step peaks, above where the first
began, at the budget plus the side bytes; the step meter measures each step from its own start and reports
it within budget."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import MemoryMeter

D = 256


class Probe(nn.Module):
    """A frozen two-layer backbone (its output: side data) and a small trainable head."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(D, 4 * D), nn.Linear(4 * D, 4 * D))
        self.backbone.requires_grad_(False)
        self.head = nn.Sequential(nn.Linear(4 * D, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 5))

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.backbone(x)), y)


torch.manual_seed(0)
ref = Probe()
model = copy.deepcopy(ref)
x, y = torch.randn(64, D), torch.randint(0, 5, (64,))
w = te.auto_checkpoint(model, "100%", backend="cpu")
w.prepare(x, y)
budget = w.plan.budget_bytes
print(f"budget {budget} B (100% = plain autograd's peak); side bytes held through a step: {w.capture.side_bytes} B")
peaks = {}
for name, net in (("auto_checkpoint", w), ("plain autograd", ref)):
    net(x, y).backward()                      # a first step: gradients allocated
    if net is w:
        w.capture.side.values = []            # start as plain autograd starts: nothing of a step held
    with MemoryMeter() as meter:
        a = meter.mark()
        loss = net(x, y); loss.backward(); del loss
        b = meter.mark()
        with torch.no_grad():                 # a validation pass between the steps
            net.eval(); net(x, y); net.train()
        c = meter.mark()
        loss = net(x, y); loss.backward(); del loss
        d = meter.mark()
    held = meter.between(a, b).delta
    peaks[name] = held + max(meter.between(b, c).peak, meter.between(c, d).peak)
    print(f"{name}: step 1 peak {meter.between(a, b).peak} B; held after its backward {held} B; "
          f"validation/step 2 peak above the start of step 1 {peaks[name]} B")
w.measure_memory(1)
loss = w(x, y); loss.backward(); del loss
print(w.memory_report())
bad = peaks["auto_checkpoint"] > budget
print(f"BUG: {peaks['auto_checkpoint']} B > budget {budget} B ({peaks['auto_checkpoint'] / budget:.2f} x), "
      f"unseen by the step meter" if bad else "ok")
sys.exit(1 if bad else 0)
