"""The caller's loss code between CheckpointedSequential's forward and its backward used memory no plan counted
(beyond the model's output and its gradient, which are reserved: Note [The caller holds a_N]), and every measured
step went over the budget by it, with a warning whose only remedy was to lower the budget (a review of the offload
path, 2026-11-28: ``(y - 1).square().mean()``-style losses 8 B over at the least budget). Here: an MLP whose head
makes 1000 or 2000 logits, losses ``mse_loss(y, ones_like(y))`` (a target made in the step) and
``y.softmax(-1).square().sum()`` (a saved softmax), 3 measured steps each (``measure_memory()``), CPU.
Expected (Note [The caller's turn] in torch_exec/executor.py): at most the first measured step over the budget;
then the plan reserves the excess, or the call raises InfeasibleBudgetError naming it where no plan fits.
Exits 1 while a later step runs over again."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT
from gpusolve import InfeasibleBudgetError

warnings.simplefilter("ignore")
LOSSES = {"mse_loss(y, ones_like(y))": lambda y: nn.functional.mse_loss(y, torch.ones_like(y)),
          "y.softmax(-1).square().sum()": lambda y: y.softmax(-1).square().sum()}
bad = False
for depth, vocab, add in ((6, 1000, 0), (40, 2000, 300_000)):
    for name, loss_of in LOSSES.items():
        torch.manual_seed(0)
        stages = [m for _ in range(depth) for m in (nn.Linear(64, 64), nn.Tanh())] + [nn.Linear(64, vocab)]
        net = te.CheckpointedSequential(stages, budget="1GiB", backend="cpu", profile_passes=1, profile_warmup=0)
        x = torch.randn(32, 64)
        net.prepare(x)
        budget = net.min_budget_bytes + add
        net.replan(budget=budget)
        said = "ran"
        try:
            for _ in range(3):
                net.zero_grad()
                net.measure_memory()
                loss_of(net(x)).backward()
        except InfeasibleBudgetError as err:
            said = f"raised InfeasibleBudgetError ({str(err)[:90]}...)"
        over = [r.beyond_param_grads - r.budget for r in net.memory_report()]
        print(f"{depth} x Linear(64) + Linear(64, {vocab}), budget least + {add} B ({budget} B), {name}: bytes over "
              f"the budget per measured step {over}; {said}")
        bad |= any(o > 0 for o in over[1:])
sys.exit(1 if bad else 0)
