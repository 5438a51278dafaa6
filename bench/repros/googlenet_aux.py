"""torchvision's GoogLeNet in training (its two auxiliary heads; the loss inside the model: logits + 0.3 x each
auxiliary's), batch 2 at 64 x 64, at its least budget: Note [Gradients that are views] in gpusolve/chain.py.
Needs torchvision (a CPU build beside a CPU torch; a CUDA build of torchvision 0.28 fails to register its
operators there: this script then says so)."""
from _setup import te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import measure_peak

try:
    from torchvision.models import googlenet
except Exception as err:  # noqa: BLE001 - ImportError, or a torchvision built for another torch
    raise SystemExit(f"needs torchvision: {type(err).__name__}: {str(err).splitlines()[0]}") from None


class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = googlenet(weights=None, aux_logits=True, init_weights=True)

    def forward(self, x, y):
        out, ce = self.m(x), torch.nn.functional.cross_entropy
        return ce(out.logits, y) + 0.3 * ce(out.aux_logits1, y) + 0.3 * ce(out.aux_logits2, y)


torch.manual_seed(0)
x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,))
w = te.auto_checkpoint(WithLoss().train(), "1TiB", backend="cpu", caller_keeps="loss")
w.prepare(x, y)
least = w.executor.min_budget_bytes
w.replan(least)
for p in w.parameters():
    p.grad = torch.zeros_like(p)
step = lambda: w(x, y).backward()  # noqa: E731
step()
_, r = measure_peak(step)
print(f"budget {least} predicted {w.plan.predicted_peak_bytes} measured {r.peak} ({r.peak - least:+d} B against "
      f"the budget): {'held' if r.peak <= least else 'OVER'}")
