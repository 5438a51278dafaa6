"""CheckpointedJoin profiled stage by stage (profile_isolated=True: no plain step measured, so a percentage is of the
model's store-all peak) resolves a percentage budget, on the face that keeps the branches' unsaved boundaries (new in
commit c19c536), against that face's own store-all peak, which over-counts (it holds the boundaries plain autograd
frees): "90%" becomes 96 % of the store-all peak of the profile's own grouping, the one the chain takes (a review,
rv19b).

CheckpointedJoin.plain_peak_bytes_for (torch_exec/join.py) takes ``store_all_join_peak_bytes(entry.plain_net)`` of
whichever face it is given; the kept face's plain_net is built from the kept branches' plain chains
(CheckpointedJoin._build: ``plain_net=JoinNet([... b.plain_chain for b in kept] ...)``). CheckpointedSequential takes
its reference of the merged face always (executor.plain_peak_bytes: ``store_all_peak_bytes(merged_face(entry)
.plain_chain)``, "exact: the other face over-counts"). The plan's note, ``join.plain_peak_bytes_for(join._last)``
and the join's percentages then name another "plain autograd's peak" for the same signature depending on the face
that runs.

Observed (text tower 4 x TransformerEncoderLayer(64, 4, 128, batch_first=True) over (16, 8, 64), second branch
4 x (Linear(64), Tanh); CPU): the merged face's store-all peak 1 489 928 B, the kept face's 1 588 232 B (+6.6 %);
"90%" runs the kept face planned within 1 429 408 B = 95.9 % of the former. Expected: every face's percentage of the
merged face's store-all peak (1 340 935 B for "90%"), as the chain does. Exits 1 while the budget of the face that
runs differs from it.

Run: GS_ROOT=<tree> python bench/repros/rv19b_join_kept_face_percent_of_overcount.py
"""
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT
from gpusolve.errors import InfeasibleBudgetError
from gpusolve.join.bytesim import store_all_join_peak_bytes

D = 64
torch.manual_seed(0)
text = nn.Sequential(*[nn.TransformerEncoderLayer(D, 4, 2 * D, dropout=0.0, batch_first=True) for _ in range(4)])
other = nn.Sequential(*[nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(4)])
tokens, feats = torch.randn(16, 8, D), torch.randn(16, D)


def head(a, b):
    return ((a.mean(1) - b) ** 2).mean()


bad = False
for pct in (40, 60, 90):
    join = te.CheckpointedJoin([list(text), list(other)], head, budget=f"{pct}%", backend="cpu", profile_passes=1,
                               profile_warmup=0, profile_isolated=True)
    try:
        plan = join.prepare(tokens, feats)
    except InfeasibleBudgetError as err:  # the tree before c19c536 (one face: bench/repros/rv19_join_branch_...)
        print(f'"{pct}%": InfeasibleBudgetError: {str(err)[:100]}')
        continue
    entry = join._last
    kept_runs = getattr(entry, "unsaved_kept", False)
    merged = entry.regrouped if kept_runs else entry
    exact = max(store_all_join_peak_bytes(merged.plain_net), merged.floor_bytes)
    want = int(pct * exact / 100)
    print(f'"{pct}%": the {"kept" if kept_runs else "merged"} face runs, planned within {plan.budget_bytes} B = '
          f"{100 * plan.budget_bytes / exact:.1f} % of the merged face's store-all peak {exact} B (expected {want} B); "
          f"plain_peak_bytes_for(join._last) {join.plain_peak_bytes_for(entry)} B")
    bad |= abs(plan.budget_bytes - want) > 1
if bad:
    print("BUG: a percentage resolved against the kept face's over-counted store-all peak")
    sys.exit(1)
sys.exit(0)
