"""`gpusolve.solve` with a given bucket is not monotone in the budget (nor in the bucket): the least-peak policy, a
known plan that fits in exact bytes, is a candidate only when the bucketed table has no plan at all, so a larger
budget (or a finer bucket) whose rounded table does have a plan returns that slower plan instead.

Input (4 stages, sizes in bytes, times in ms; the chain's least budget, min_feasible_bytes, is 231 B):
    t_fwd=[0, 0, 0, 0], t_fwd_nograd=[1.25, 3.75, 2, 3.5], t_bwd=[1.5, 7.25, 2.25, 5.25],
    act_bytes=[59, 37, 15, 55], grad_bytes=[39, 53, 11, 27], tape_bytes=[104, 94, 74, 108],
    bwd_tape_bytes=[72, 80, 69, 20], fwd_nograd_extra=[0, 0, 19, 0], fwd_grad_extra=[30, 0, 15, 54],
    bwd_extra=[15, 0, 0, 7], input_bytes=38, input_grad_bytes=5

Observed (backend "cpu"):
    solve(chain, 231, bucket=4) -> 28.25 ms, peak 231 B (note: "the rounded sizes fit no plan ...; the plan is the
                                   least-peak policy"; it is also the exact optimum at 231 B)
    solve(chain, 232, bucket=4) -> 29.50 ms, peak 231 B (the table's plan at 58 buckets)
    solve(chain, 240, bucket=4) -> 28.25 ms
So one more byte of budget, same bucket, gives a plan 1.25 ms (4.4 %) slower, although the 28.25 ms plan
(peak 231 B) fits 232 B. The same inversion under bucket halving, found on random 8-stage chains of this review:
solve(B=251, bucket=62) 120.5 ms (least-peak fallback) vs solve(B=251, bucket=31) 130.25 ms (table plan).
solve_offload inherits it through its recompute-only reference (a random 5-stage chain at budget 166 B over a link of
1.118 B/ms: 57.50 ms at bucket 20 B, 60.25 ms at bucket 10 B), and solve_join has the same rule
(rv20c_join_least_peak_fallback_only_when_table_empty.py). In this review's random chains it showed on 4 of 300
multi-tape chains and 17 of 150 thesis-model (multi_tape=False) chains; every inversion found (45 in the latter)
had the least-peak fallback as the faster plan.

Cause: gpusolve/solve.py, _table_plan: Note [Exact candidates] (4) (min_peak_policy) runs only under
`if best is None`, i.e. when the table, the slack band and the segment policies found nothing; otherwise the
least-peak policy, already known to fit whenever budget >= min_feasible_bytes, is never compared.

Expected: the plan at a budget is never slower than a plan the solver returns at a smaller budget with the same
bucket (nor at a coarser bucket with the same budget): e.g. try the least-peak policy as an exact-byte candidate
whenever budget >= min_feasible_bytes (one min_peak_tables walk and one simulate), keeping the faster.

Run: GS_ROOT=<tree> python bench/repros/rv20c_least_peak_fallback_only_when_table_empty.py
"""
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, os.environ.get("GS_ROOT", str(Path(__file__).resolve().parents[2])))

from gpusolve import Chain, solve  # noqa: E402

warnings.simplefilter("ignore")
chain = Chain(t_fwd=[0.0, 0.0, 0.0, 0.0], t_fwd_nograd=[1.25, 3.75, 2.0, 3.5], t_bwd=[1.5, 7.25, 2.25, 5.25],
              act_bytes=[59, 37, 15, 55], grad_bytes=[39, 53, 11, 27], tape_bytes=[104, 94, 74, 108],
              bwd_tape_bytes=[72, 80, 69, 20], fwd_nograd_extra=[0, 0, 19, 0], fwd_grad_extra=[30, 0, 15, 54],
              bwd_extra=[15, 0, 0, 7], input_bytes=38, input_grad_bytes=5)
small = solve(chain, 231, bucket=4, backend="cpu")
large = solve(chain, 232, bucket=4, backend="cpu")
print(f"budget 231 B, bucket 4 B: {small.predicted_time_ms} ms, peak {small.predicted_peak_bytes} B")
print(f"budget 232 B, bucket 4 B: {large.predicted_time_ms} ms, peak {large.predicted_peak_bytes} B")
bad = large.predicted_time_ms > small.predicted_time_ms and small.predicted_peak_bytes <= large.budget_bytes
print("BUG: a larger budget at the same bucket gives a slower plan, though the faster one fits it" if bad else "ok")
sys.exit(1 if bad else 0)
