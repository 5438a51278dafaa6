"""A CheckpointedJoin.replan that is refused (InfeasibleBudgetError: the budget is below another cached input
signature's least) still warns JoinOrderWarning for a plan it then throws away: replan re-plans every signature in
turn, _plan_entry warns for the face chosen as soon as it is planned, and the later signature's refusal rolls every
signature back (_PlannedModule._all_or_nothing) to the plan it had, whose forward phase keeps plain autograd's draw
order. The user is told "dropout masks ... follow the plan's order, not plain autograd's" while every later step
runs with plain autograd's masks (loss and gradients equal).

Cause: torch_exec/join.py CheckpointedJoin._plan_entry warns (warnings.warn(..., JoinOrderWarning)) inside
executor._PlannedModule._replan_all's loop, before the replan as a whole has succeeded; _all_or_nothing restores the
plans, not the warning. (The same holds for the FallbackWarning of _below_least.)

Model: two towers of nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True) (3 and 4 layers), input
signatures of batch 8 (A) and 24 (B), planned at B's plain autograd peak; then replan(X) for byte budgets X between
A's and B's least budgets: each is refused (B does not fit).
Observed (one run; the budgets that interleave depend on the measured times): at several X a JoinOrderWarning is
raised by the refused replan, and afterwards A's plan has no order note and A's step equals plain autograd's.
(7 of 12 budgets in one run, from 489 032 B to 978 632 B.) The tree before this session (b37860a) warned from
_draw_order in the same loop, but planned the merged face only, whose least budgets here are 1 176 712 B (A) and
3 473 032 B (B): no warning in this sweep (exit 0).
Expected: a refused replan warns nothing about plans it does not keep (warn once the replan has succeeded, or when
the plan first runs). Exits 1 while a refused replan raises a JoinOrderWarning.

Run: GS_ROOT=<tree> python bench/repros/rv19e_join_refused_replan_warns_order.py
"""
import copy
import sys
import warnings

from _rv19_joins import D, OPTS, head, nn, step, te, torch  # the tree under test: GS_ROOT

from gpusolve.errors import InfeasibleBudgetError  # noqa: E402

torch.manual_seed(0)
towers = [[nn.TransformerEncoderLayer(D, 4, 2 * D, dropout=0.1, batch_first=True) for _ in range(n)] for n in (3, 4)]
holder = nn.ModuleList(nn.ModuleList(t) for t in towers)
reference = copy.deepcopy(holder)
a_in = [torch.randn(8, 8, D), torch.randn(8, 12, D)]
b_in = [torch.randn(24, 8, D), torch.randn(24, 12, D)]


join = te.CheckpointedJoin([list(t) for t in towers], head, budget="100%", **OPTS)
join.prepare(*a_in)
a_least = join.min_budget_bytes
join.prepare(*b_in)
b_least, b_plain = join.min_budget_bytes, join.plain_peak_bytes_for(join._last)
join.replan(b_plain)  # a byte budget both signatures fit


found = []
for i in range(12):
    budget = int(a_least + (b_least - a_least) * i / 12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            join.replan(budget)
            refused = False
        except InfeasibleBudgetError:
            refused = True
    warned = [str(w.message) for w in caught if w.category.__name__ == "JoinOrderWarning"]
    if not refused:
        join.replan(b_plain)
        continue
    if warned:
        got_loss, got_grads = step(holder, [reference], lambda: join(*a_in))
        exp_loss, exp_grads = step(reference, [holder], lambda: head(nn.Sequential(*reference[0])(a_in[0]),
                                                                     nn.Sequential(*reference[1])(a_in[1])))
        equal = torch.equal(got_loss, exp_loss) and all(torch.equal(a, b) for a, b in zip(got_grads, exp_grads))
        noted = any("not plain autograd's" in note for note in join.plan.notes)
        found.append((budget, equal, noted))

print(f"least budgets: A {a_least} B, B {b_least} B; planned at {b_plain} B, then replans between them (refused)")
for budget, equal, noted in found:
    print(f"  replan({budget}) refused, yet JoinOrderWarning; A's plan after it notes an order change: {noted}; "
          f"A's step equals plain autograd's: {equal}")
if found:
    print("BUG: a refused replan warned JoinOrderWarning for plans it threw away")
    sys.exit(1)
print("no refused replan warned")
sys.exit(0)
