"""A residual MLP (6 x ``x = relu(Linear(32, 32)(x)) + x``, input 4 x 16 x 32) trained with the loss
``out.pow(2).mean()`` under ``budget="100%"``, through ``auto_checkpoint`` and through ``CheckpointedSequential``
(the same layers as stages), 3 steps measured (``measure_memory(3)``), CPU.

Observed (CPU, torch 2.13): "100%" resolves to 118912 B, the plan is plain autograd ("schedule given, not solved"),
and every measured step reads 131080 B beyond parameter gradients, 12168 B over the budget, with a
MemoryBudgetWarning at every step (auto_checkpoint: steps 1, 2, 3 all 131080 B). The excess is the caller's loss
code (``pow`` makes an 8192 B tensor beside the output; the warning of a lower budget's step says "the code between
the model's forward and its backward (the loss) used ... beyond the model's output and its gradient"). Below 100 %
the same model learns it: at 50 % the second call raises InfeasibleBudgetError naming 6088 B the code between the
forward and the backward needs, and at 60000 B the second step re-plans.
In a review harness of 29 small models at "100%" (loss ``out.pow(2).mean()``, 2 measured steps), 19 had the SECOND
step over the budget too: 16 by 8 B (the loss scalar), old-API weight_norm and spectral_norm MLPs by 12168 B, a
channels_last conv net by 18312 B.

Cause: torch_exec/executor.py: the steps of a plan at or above plain autograd's peak run as plain autograd
(``_plain_step``), and Note [The caller's turn] (``learn_caller_turn``, ``Entry.caller_reserve``) is applied only to
the scheduled steps: the plain step's excess is measured and warned about, but never reserved, so no later call
re-plans or raises.

Expected (Note [The caller's turn], docs/pytorch.md "Predicted = measured": "a measured step that goes over the
budget by it has the excess reserved from the next call on, or that call raises InfeasibleBudgetError where no plan
then fits"): at most the first measured step over its budget; the next call raises naming what the loss code needs
(or "100%" is resolved against a plain step that includes the caller's turn). Exits 1 while a measured step after
the first goes over the budget without the next call raising.

Run: GS_ROOT=<tree> python bench/repros/rv20a_plain_budget_caller_turn_never_learned.py   (~5 s)"""
import sys

from _setup import nn, te, torch
from gpusolve import InfeasibleBudgetError

D, L = 32, 6


class Res(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Res() for _ in range(L))

    def forward(self, x):
        for layer in self.l:
            x = layer(x)
        return x


x = torch.randn(4, 16, D)
bad = False
for kind in ("auto_checkpoint", "CheckpointedSequential"):
    torch.manual_seed(0)
    net = Net()
    wrapped = (te.auto_checkpoint(net, "100%", backend="cpu") if kind == "auto_checkpoint"
               else te.CheckpointedSequential(list(net.l), budget="100%", backend="cpu"))
    wrapped.measure_memory(3)
    raised = None
    for step in range(3):
        try:
            wrapped(x).pow(2).mean().backward()
        except InfeasibleBudgetError as err:
            raised = err
            break
        net.zero_grad(set_to_none=True)
    records = list(wrapped.memory_report())
    print(f"{kind}: plan {wrapped.plan.summary().splitlines()[0]!r}")
    for r in records:
        print(f"  step {r.step}: budget {r.budget} B, predicted {r.predicted_peak} B, measured beyond parameter "
              f"gradients {r.beyond_param_grads} B ({r.beyond_param_grads - r.budget:+d} B)")
    if raised is not None:
        print(f"  the next call raised: {str(raised)[:160]}")
    later_over = [r for r in records[1:] if not r.within_budget]
    bad |= bool(later_over)

print("BUG: at 100% every measured step goes over the budget by the loss code; nothing is learned" if bad else "ok")
sys.exit(1 if bad else 0)
