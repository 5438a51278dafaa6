"""CheckpointedJoin.replan(budget) refused for one input signature leaves another signature running its old plan
with the refused plan's per-stage "recomputed" flags (a review, 2026-11-28): a dropout stage the old plan
recomputes in the backward is not flagged, so its RNG state is not recorded at its first run, and its
recomputation draws a new mask: loss as plain autograd's, gradients not, and no error.

replan() promises all or nothing ("A re-plan that raises ... leaves the module as it was: its settings and
every cached signature's plan", torch_exec/executor.py, _all_or_nothing). It restores vars() of each
signature's entry, but CheckpointedJoin._plan_entry (torch_exec/join.py) also writes
`branch.recomputed = [...]` on each branch's executor Entry (JoinEntry.branches), objects the rollback does
not restore; Runtime.run_stage (torch_exec/executor.py) records a stage's RNG state only where
`self.recomputed[s]`.

Setting: two signatures of one join (branch batch sizes 64/4 and 4/64, as with per-branch dynamic batches),
dropout in both towers. The budget X is planned for both; replan(Y) with Y below the second signature's
least budget is refused (InfeasibleBudgetError), after the first signature was re-planned at Y. X and Y are
searched so that the plan at X recomputes a dropout stage the plan at Y does not (plans come from CPU-timed
profiles and differ between runs). Expected: after the refusal, every signature's flags are those of the plan
it runs, and its gradients equal plain autograd's.
Exit 1 while the bug shows.
"""
import copy
import sys

from _setup import nn, torch

from gpusolve import InfeasibleBudgetError
from torch_exec.join import CheckpointedJoin

CONTROL = '--control' in sys.argv  # skip the refused replan: the same plan then trains as plain autograd


def make():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(32, 64), *[m for _ in range(5) for m in (nn.Linear(64, 64), nn.Tanh(), nn.Dropout(0.3),
                                                                          nn.Linear(64, 64), nn.GELU())])
    b = nn.Sequential(nn.Linear(32, 256), *[m for _ in range(4) for m in (nn.Linear(256, 256), nn.Tanh(),
                                                                          nn.Dropout(0.3))], nn.Linear(256, 64))
    return nn.ModuleList([a, b])


def head(u, v):
    return (u.mean(0) * v.mean(0)).sum()


towers = make()
reference = copy.deepcopy(towers)
join = CheckpointedJoin([list(towers[0]), list(towers[1])], head, budget="1GiB", profile_passes=1, profile_warmup=0)
torch.manual_seed(1)
A = (torch.randn(64, 32), torch.randn(4, 32))
B = (torch.randn(4, 32), torch.randn(64, 32))
join.prepare(*A)
entry_a = join._last
least_a, plain_a = join.min_budget_bytes, join.plain_peak_bytes_for(entry_a)
dropout = {(b, s) for b, br in enumerate(entry_a.branches) for s in range(1, br.chain.n + 1) if br.rng[s]}


def recomputed_dropout(plan):
    turn = next(i for i, op in enumerate(plan.schedule) if op.kind.name == "TURN")
    return {(op.branch, op.stage) for op in plan.schedule[turn + 1:] if op.kind.name.startswith("FWD")} & dropout


def flagged(entry):
    return {(b, s) for b, br in enumerate(entry.branches) for s, v in enumerate(br.recomputed) if v}


# A's plans from its least budget up (A alone: nothing is refused while searching)
plans = []
for k in range(81):
    budget = int(least_a + (plain_a - least_a) * k / 80)
    join.replan(budget)
    plans.append((budget, recomputed_dropout(entry_a.plan)))
join.replan(plain_a)
join.prepare(*B)  # the second signature, planned after A
least_b = join.min_budget_bytes
print(f"signature A least {least_a} B, plain {plain_a} B; signature B least {least_b} B")
above = [(b, s) for b, s in plans if least_b <= b < plain_a]
below = [(b, s) for b, s in plans if b < least_b]
pair = next(((x, y, sorted(sx - sy)) for x, sx in above for y, sy in below if sx - sy), None)
if pair is None:  # no harmful pair in this run's plans: the flags are still checked against the kept plan
    x, y, lost = above[0][0], below[0][0], []
else:
    x, y, lost = pair
print(f"budget X = {x} B (both signatures planned), Y = {y} B (below B's least); dropout stages the plan at X "
      f"recomputes and the plan at Y does not: {lost}")

join.replan(x)
kept = entry_a.plan
try:
    if CONTROL:
        raise InfeasibleBudgetError("(control run: replan(Y) skipped)", 0)
    join.replan(y)
    print("replan(Y) was not refused")
except InfeasibleBudgetError as err:
    print(f"replan(Y) refused: {str(err).splitlines()[0][:150]}")
entry_a = next(iter(join._entries.values()))
turn = next(i for i, op in enumerate(entry_a.plan.schedule) if op.kind.name == "TURN")
runs = {(op.branch, op.stage) for op in entry_a.plan.schedule[turn + 1:] if op.kind.name.startswith("FWD")}
flags = flagged(entry_a)
print(f"after the refusal A's plan has budget {entry_a.plan.budget_bytes} B (kept: {entry_a.plan is kept}) and "
      f"recomputes {len(runs)} stages; its branches flag {len(flags)} as recomputed; recomputed but not flagged: "
      f"{sorted(runs - flags)}; flagged but not recomputed: {sorted(flags - runs)}")

torch.manual_seed(5)
want = head(reference[0](A[0]), reference[1](A[1]))
want.backward()
torch.manual_seed(5)
got = join(*A)
got.backward()
diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(reference.parameters(), towers.parameters()))
print(f"step on A: loss {got.item():.6f} vs plain {want.item():.6f}; max |grad - plain grad| = {diff:.3e}")
sys.exit(1 if (runs != flags or diff > 1e-6) else 0)
