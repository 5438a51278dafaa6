"""CheckpointedJoin warns JoinOrderWarning ("dropout masks (and statistics of BatchNorm modules shared by branches)
follow the plan's order, not plain autograd's") for a join that draws no random numbers and shares no module: two
towers of nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0) each followed by its own BatchNorm1d. Each tower's
BatchNorm statistics are updated by that tower only, so the order in which the plan interleaves the towers cannot
change anything: loss, gradients and running statistics equal plain autograd's bit for bit at every budget, yet the
warning says they do not. Since this session (commit 873de47, executor.plan_faces(keeps=...)) the same false
verdict also chooses the face: where the kept face's plan is faster but "breaks the order" (falsely) and the merged
face's does not, the slower merged face runs.

Cause: torch_exec/join.py CheckpointedJoin._draw_order counts every stage with a buffer (``b.has_buffers[s]``) as
order-sensitive, whatever module the buffer belongs to, and calls any interleaving of sensitive stages of two
branches a change. Only RNG draws (one stream for all branches) and writes to a buffer that several branches write
(a module shared by the branches: Siamese) depend on the branch order; an unshared BatchNorm does not.

Observed (CPU, one run; which budgets interleave depends on the measured times): JoinOrderWarning at 8 of 17 budgets
between the least budget and plain autograd's peak, every one with loss/gradients/statistics equal to plain
autograd's; at 31.3 %, 41.2 %, 51.0 %, 60.8 %, 70.6 % and 80.4 % the merged face ran (predicted 13.02, 8.91, 8.35,
7.95, 7.74, 7.34 ms) where the kept face's plan, falsely flagged, was faster (12.79, 8.77, 8.18, 7.90, 7.44, 7.17
ms). The tree before this session (b37860a) warned falsely too (it planned one face).
Expected: no JoinOrderWarning (and no note saying so) where nothing the order changes is drawn or shared; the faster
face runs. Exits 1 while a JoinOrderWarning is raised for this model, or a slower face runs because of one.

Run: GS_ROOT=<tree> python bench/repros/rv19e_join_order_warning_unshared_buffers.py
"""
import copy
import sys
import warnings

from _rv19_joins import D, OPTS, head, nn, step, te, torch  # the tree under test: GS_ROOT



class BNT(nn.Module):
    """BatchNorm1d over the features of a (batch, tokens, features) tensor: this tower's own statistics."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(D)

    def forward(self, x):
        return self.bn(x.transpose(1, 2)).transpose(1, 2)


torch.manual_seed(0)
towers = [[m for _ in range(n) for m in (nn.TransformerEncoderLayer(D, 4, 2 * D, dropout=0.0, batch_first=True),
                                         BNT())] for n in (3, 4)]
holder = nn.ModuleList(nn.ModuleList(t) for t in towers)
reference = copy.deepcopy(holder)
x1, x2 = torch.randn(8, 8, D), torch.randn(8, 12, D)


join = te.CheckpointedJoin([list(t) for t in towers], head, budget="100%", **OPTS)
join.prepare(x1, x2)
plain = join.plain_peak_bytes_for(join._last)
low = join.min_budget_bytes


false_warnings, slower = [], []
for i in range(17):
    budget = int(low + (plain - low) * i / 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            join.replan(budget)
        except Exception:  # noqa: BLE001
            continue
    warned = any(w.category.__name__ == "JoinOrderWarning" for w in caught)
    got_loss, got_grads = step(holder, [reference], lambda: join(x1, x2))
    exp_loss, exp_grads = step(reference, [holder], lambda: head(nn.Sequential(*reference[0])(x1),
                                                                 nn.Sequential(*reference[1])(x2)))
    equal = (torch.equal(got_loss, exp_loss) and all(torch.equal(a, b) for a, b in zip(got_grads, exp_grads))
             and all(torch.equal(a, b) for a, b in zip(holder.buffers(), reference.buffers())))
    with torch.no_grad():  # the next budget starts from equal statistics
        for a, b in zip(reference.buffers(), holder.buffers()):
            a.copy_(b)
    if warned:
        false_warnings.append((budget, equal))
    entry = join._last
    merged = entry.regrouped if getattr(entry, "unsaved_kept", False) else entry
    kept = getattr(merged, "regrouped", None)
    if kept is not None and entry is merged and kept.plan is not None and kept.plan.budget_bytes == budget \
            and merged.plan.budget_bytes == budget and kept.order_warning and not merged.order_warning \
            and kept.plan.predicted_time_ms < merged.plan.predicted_time_ms * (1 - 1e-6):
        slower.append((budget, merged.plan.predicted_time_ms, kept.plan.predicted_time_ms))

print(f"plain autograd's peak {plain} B, least budget {low} B")
for budget, equal in false_warnings:
    print(f"  {100 * budget / plain:5.1f} %: JoinOrderWarning; loss, gradients and statistics equal to plain "
          f"autograd's: {equal}")
for budget, t_merged, t_kept in slower:
    print(f"  {100 * budget / plain:5.1f} %: the merged face runs ({t_merged:.2f} ms) where the kept face, flagged "
          f"as changing the order, predicts {t_kept:.2f} ms")
if false_warnings or slower:
    print(f"BUG: {len(false_warnings)} JoinOrderWarning(s) on a join with no dropout and no shared module; "
          f"{len(slower)} budget(s) where a slower face runs because of one")
    sys.exit(1)
print("no JoinOrderWarning: nothing the branch order changes")
sys.exit(0)
