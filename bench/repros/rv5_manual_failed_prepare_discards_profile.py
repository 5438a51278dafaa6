"""prepare() (or the first call) of a new input signature whose budget is below its least profiles the
stages, then raises InfeasibleBudgetError and drops the profile: replan(err.min_bytes) does not reach
that signature (only cached ones are re-solved) and the next call profiles it all over again (about
16 plain steps, README). Meanwhile min_budget_bytes still gives the previous signature's least
(23424 B here against the 282624 B the error names), so replan(model.min_budget_bytes) after the error
changes nothing. Expected: keep the profile of the signature that failed (re-solved by replan), and
min_budget_bytes of it."""
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT

import torch_exec.executor as ex
from gpusolve.errors import InfeasibleBudgetError

profiles = [0]
_orig = ex.profile_dict


def _counted(*a, **k):
    profiles[0] += 1
    return _orig(*a, **k)


ex.profile_dict = _counted
torch.manual_seed(0)
D = 64
seq = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(D, D), nn.Tanh())], nn.Linear(D, 10))
small, big = torch.randn(8, D), torch.randn(256, D)
w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
w.prepare(small)
w.replan(w.min_budget_bytes)
try:
    w.prepare(big)
    sys.exit("prepare(big) fitted: no repro")
except InfeasibleBudgetError as exc:
    err = exc
print(f"prepare(big): InfeasibleBudgetError naming {err.min_bytes} B; then min_budget_bytes = {w.min_budget_bytes} B; "
      f"cached signatures {len(w.plans)}; profiles taken {profiles[0]}")
w.replan(err.min_bytes)
w.prepare(big)
print(f"after replan(err.min_bytes) and prepare(big): profiles taken {profiles[0]} (2 needed)")
sys.exit(1 if profiles[0] > 2 or w.min_budget_bytes != err.min_bytes else 0)
