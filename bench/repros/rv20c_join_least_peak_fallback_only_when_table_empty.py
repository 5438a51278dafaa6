"""`gpusolve.join.solve_join` with a given bucket is not monotone in the budget: the least-peak join policy is a
candidate only when the join table has no plan (Note [Join candidates] (4)), so a larger budget whose rounded table
has a plan returns a slower plan than a smaller budget did, although the faster plan fits.

Input: two 2-stage branches and a turn (sizes in bytes, times in ms); the join's least budget is 248 B.
    A: t_fwd=t_fwd_nograd=[7, 4.75], t_bwd=[6.25, 4.5], act=[52, 51], grad=[14, 49], tape=[87, 91],
       fwd_grad_extra=[37, 41], input_bytes=27, input_grad_bytes=50
    B: t_fwd=t_fwd_nograd=[7.5, 4.5], t_bwd=[9, 3.25], act=[51, 30], grad=[48, 6], tape=[90, 58],
       fwd_nograd_extra=[46, 0], fwd_grad_extra=[3, 0], bwd_extra=[22, 0], input_bytes=57, input_grad_bytes=38
    Turn(t_fwd=1, t_bwd=1)

Observed (backend "cpu", bucket 26 B):
    budget 248 B -> 75.25 ms, peak 248 B (decided_by "least-peak policy")
    budget 260 B -> 80.00 ms, peak 248 B (decided_by "join DP": the table's plan at 10 buckets)
    (274 B: 80.00 ms; 300 B: 67.75 ms). On 60 random pairs of 2-4-stage branches, at budgets of 1.0, 1.05 and 1.1
    x the least with buckets of 1/3-1/8 of the budget, this review found 81 inversions (a finer bucket or one
    more bucket of budget giving a slower plan than the least-peak fallback).

Cause: gpusolve/join/solve.py, solve_join: the least-peak candidate is appended only under `if policy is None`
(the table's optimum at the budget is missing); otherwise it is never compared, though min_peak_join has it and it
fits whenever budget >= min_bytes.

Expected: the plan at 260 B is no slower than the 75.25 ms plan (peak 248 B) that fits it; e.g. always add the
least-peak policy as a candidate when the budget is at least min_bytes.

Run: GS_ROOT=<tree> python bench/repros/rv20c_join_least_peak_fallback_only_when_table_empty.py
"""
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, os.environ.get("GS_ROOT", str(Path(__file__).resolve().parents[2])))

from gpusolve import Chain  # noqa: E402
from gpusolve.join import Turn, solve_join  # noqa: E402

warnings.simplefilter("ignore")
a = Chain(t_fwd=[7.0, 4.75], t_fwd_nograd=[7.0, 4.75], t_bwd=[6.25, 4.5], act_bytes=[52, 51], grad_bytes=[14, 49],
          tape_bytes=[87, 91], fwd_nograd_extra=[0, 0], fwd_grad_extra=[37, 41], bwd_extra=[0, 0], input_bytes=27,
          input_grad_bytes=50)
b = Chain(t_fwd=[7.5, 4.5], t_fwd_nograd=[7.5, 4.5], t_bwd=[9.0, 3.25], act_bytes=[51, 30], grad_bytes=[48, 6],
          tape_bytes=[90, 58], fwd_nograd_extra=[46, 0], fwd_grad_extra=[3, 0], bwd_extra=[22, 0], input_bytes=57,
          input_grad_bytes=38)
turn = Turn(t_fwd=1.0, t_bwd=1.0)
small = solve_join([a, b], turn, 248, bucket=26, backend="cpu")
large = solve_join([a, b], turn, 260, bucket=26, backend="cpu")
print(f"budget 248 B, bucket 26 B: {small.predicted_time_ms} ms, peak {small.predicted_peak_bytes} B ({small.decided_by})")
print(f"budget 260 B, bucket 26 B: {large.predicted_time_ms} ms, peak {large.predicted_peak_bytes} B ({large.decided_by})")
bad = large.predicted_time_ms > small.predicted_time_ms and small.predicted_peak_bytes <= large.budget_bytes
print("BUG: a larger join budget at the same bucket gives a slower plan, though the faster one fits it" if bad else "ok")
sys.exit(1 if bad else 0)
