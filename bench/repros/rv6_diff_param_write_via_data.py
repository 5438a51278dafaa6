"""Note [Parameters a forward writes] (torch_exec/profiler.py, new) refuses a stage whose forward writes a
parameter by watching the parameters' version counters (_refuse_parameter_writes). Writes through ``.data``
move no version counter, and ``.data`` is how MoCo's own code (facebookresearch/moco, builder.py,
``param_k.data = param_k.data * m + param_q.data * (1. - m)``), the Note's example, and many EMA/BYOL codes
spell the update. Both ``p.data = ...`` and ``p.data.mul_(...)`` pass profiling: every recomputation of the
stage updates the state again, and the state and the gradients drift from plain autograd's, silently; the
``p.mul_(...)`` spelling is refused (ParameterWriteError). Expected: a refusal for every spelling (compare the
values or data_ptr of the parameters too), or plain autograd's results."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


class Centre(nn.Module):
    def __init__(self, spelling):
        super().__init__()
        self.c = nn.Parameter(torch.zeros(D), requires_grad=False)
        self.spelling = spelling

    def forward(self, h):
        with torch.no_grad():
            if self.spelling == "p.mul_()":
                self.c.mul_(0.9).add_(0.1 * h.mean(0))
            elif self.spelling == "p.data.mul_()":
                self.c.data.mul_(0.9).add_(0.1 * h.mean(0))
            else:  # MoCo's
                self.c.data = self.c.data * 0.9 + 0.1 * h.mean(0)
        return h - self.c


bad = False
for spelling in ("p.mul_()", "p.data.mul_()", "p.data = ..."):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, D), *[nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, D),
                                                          nn.Tanh(), Centre(spelling)) for _ in range(6)],
                        nn.Linear(D, 5))
    model = copy.deepcopy(ref)
    w = te.CheckpointedSequential(list(model), budget="40%", backend="cpu")
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)
    try:
        w.prepare(x)
    except RuntimeError as err:
        print(f"{spelling}: refused ({type(err).__name__}: {str(err)[:70]}...)")
        continue
    model.load_state_dict(ref.state_dict())  # the state as plain autograd's starts it
    for step in range(2):
        F.cross_entropy(ref(x), y).backward()
        F.cross_entropy(w(x), y).backward()
        gd = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), model.parameters())
                 if p.grad is not None)
        sd = max((p - q).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()) if not p.requires_grad)
        print(f"{spelling}: step {step}: max |grad - plain grad| {gd:.3e}, max |state - plain state| {sd:.3e} "
              f"(plan overhead {w.plan.overhead:.3f}, {sum(w._last.recomputed)} stages recomputed)")
        bad |= gd > 0 or sd > 0
print("BUG: a parameter written through .data is recomputed silently" if bad else "ok")
sys.exit(1 if bad else 0)
