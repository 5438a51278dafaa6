"""CheckpointedJoin cannot checkpoint a branch of transformer layers: every stage of the branch is merged into one,
so the join's least budget is plain autograd's peak, while CheckpointedSequential over the same layers trains at a
third of it (a review, 2026-11-29).

The layers' boundaries are saved by no backward (nn.TransformerEncoderLayer(batch_first=True) reads its input
through a transposed view that its in-projection copies), and Chain.from_profile merges such stages by default
(Note [Tensors no backward saves] in gpusolve/chain.py). For CheckpointedSequential that was a bug once
(bench/repros/rv7_train_seq_unsaved_boundaries.py: "six residual blocks ... merged into one stage whose least budget
was plain autograd's peak"), fixed by a second face of the entry that keeps the boundaries (Note [Two groupings of
unsaved boundaries] in torch_exec/executor.py). The join builds each branch with ``seq._build(sample,
regroup=False)`` (torch_exec/join.py, CheckpointedJoin._build) and plans over the merged grouping only, so such a
branch is one stage that runs whole: here the text tower's four layers become one stage '0+1+2+3'.

Observed (text tower 4 x TransformerEncoderLayer(64, 4, 128, batch_first=True) over (16, 8, 64), second branch
4 x (Linear(64), Tanh), head: squared distance of the mean-pooled text and the second branch; CPU):
CheckpointedSequential over the text tower alone: least budget 862 144 B = 31.6 % of its plain peak 2 727 168 B; CheckpointedJoin:
least budget 2 661 640 B = 100 % of plain autograd's peak (the join model's own least is 2 704 520 B, above
it), so "50%" raises InfeasibleBudgetError (raise the budget to plain autograd's peak).
Expected: the join's branches planned like the chain's (with the boundaries kept, as the chain's second face
does), so that the join trains well below plain autograd's peak. Exits 1 while the join's least budget is above
80 % of plain autograd's peak.

Run: GS_ROOT=<tree> python bench/repros/rv19_join_branch_unsaved_boundaries_merged.py
"""
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT

D = 64
OPTS = dict(backend="cpu", profile_passes=1, profile_warmup=0)

torch.manual_seed(0)
text = nn.Sequential(*[nn.TransformerEncoderLayer(D, 4, 2 * D, dropout=0.1, batch_first=True) for _ in range(4)])
other = nn.Sequential(*[nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(4)])
tokens, feats = torch.randn(16, 8, D), torch.randn(16, D)


def head(a, b):
    return ((a.mean(1) - b) ** 2).mean()


chain = te.CheckpointedSequential(list(text), budget="1GiB", **OPTS)
chain.prepare(tokens)
chain_peak = te.executor.reference_peak_bytes(chain._last)[0]
print(f"CheckpointedSequential(text): least budget {chain.min_budget_bytes} B = "
      f"{100 * chain.min_budget_bytes / chain_peak:.1f} % of its plain peak {chain_peak} B")

join = te.CheckpointedJoin([list(text), list(other)], head, budget="1GiB", **OPTS)
join.prepare(tokens, feats)
plain = join.plain_peak_bytes_for(join._last)
least = join.min_budget_bytes
print(f"CheckpointedJoin: branch lengths {[b.chain.n for b in join._last.branches]} "
      f"(text branch stages {join._last.branches[0].chain.names}); least budget {least} B = "
      f"{100 * least / plain:.1f} % of plain autograd's peak {plain} B")
try:
    join.replan(budget="50%")
    print(f"'50%': {join.plan.decided_by}, predicted peak {join.plan.predicted_peak_bytes} B")
except Exception as err:  # noqa: BLE001
    print(f"'50%': {type(err).__name__}: {str(err)[:200]}")
if least > 0.8 * plain:
    print("BUG: the join cannot checkpoint inside the transformer branch (its layers merged into one stage)")
    sys.exit(1)
sys.exit(0)
