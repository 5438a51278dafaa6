"""A tuple state whose second tensor is made once and passed on unchanged through several stages (an
"x0" / value-residual skip: every block adds the stem's embedding, a last stage multiplies by it), all
float32, no autocast: under checkpointing plans CheckpointedSequential's own memory_report() reads the
step over its budget and over the plan's prediction by nearly one such tensor (D=128, batch 16: predicted
116480 B, measured 124040 B beyond parameter gradients at budgets 118118-123033 B, up to 1.050 x the budget). README: "tuple states ... are handled" and "Predicted = measured". The plan's first segment
(stages 3-5 from the checkpoint a_2) run as plain autograd from detached leaves peaks as high, 124040 B: the figures the
plan is made from are short, not the executor. The profile gives stages 1-4 the same bwd_peak (66048 B),
which suggests the per-stage backward boundaries (torch_exec/profiler.py, _Boundaries) cannot place the
passed-on tensor's gradient, complete only after the stem's backward (not confirmed further).
Expected: every measured step within its budget (or the plan's prediction counts the passed-on
tensor's gradient). Exits 1 while a step goes over."""
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 128


class Stem(nn.Module):
    def __init__(s):
        super().__init__()
        s.l, s.m = nn.Linear(D, D), nn.Linear(D, D)

    def forward(s, x):
        return s.l(x), s.m(x)           # (h, x0)


class Blk(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)

    def forward(s, t):
        h, x0 = t
        return torch.tanh(s.l(h)) + x0, x0   # x0 passed on unchanged


class Merge(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)

    def forward(s, t):
        return s.l(t[0]) * t[1]


torch.manual_seed(0)
x, y = torch.randn(16, D), torch.randint(0, 10, (16,))
torch.manual_seed(1)
w = te.CheckpointedSequential([Stem(), Blk(), Blk(), Merge(), nn.Linear(D, 10)], budget="100%", backend="cpu")
w.prepare(x)
least, full = w.min_budget_bytes, w.plan.budget_bytes
print(f"least budget {least} B, plain autograd's peak {full} B")
over = 0
for i in range(11):
    budget = least + (full - least) * i // 10
    w.replan(budget)
    w.measure_memory(1)
    for p in w.parameters():
        p.grad = None
    F.cross_entropy(w(x), y).backward()
    r = w.memory_report()[-1]
    over += not r.within_budget
    print(f"budget {budget:>6} B  predicted {w.plan.predicted_peak_bytes:>6} B  measured beyond grads "
          f"{r.beyond_param_grads:>6} B  ({r.beyond_param_grads / budget:.3f} x budget)  "
          f"{'ok' if r.within_budget else 'OVER'}  recomputed stages {sum(w._last.recomputed)}")
print(f"{over} of 11 budgets measured over")
sys.exit(1 if over else 0)
