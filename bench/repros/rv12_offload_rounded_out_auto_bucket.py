"""solve_offload with the bucket left to the solver raised "at bucket X the rounded sizes fit no plan, although
the budget is at least the exact minimum with offloading (...): use a finer bucket" (bench/tuple_fuzz.py --offload,
seed 250 at 6adbcd3: bucket 769 B). The user gave no bucket, so the advice was about a choice the solver made;
recompute only's front end falls back to its least-peak policy there (Note [Exact candidates] (4) in
gpusolve/solve.py). Chains: the fuzz's (tests/data/offload_rounded_auto_chain.json, its least budget with offloading
786448 B and the solver's bucket); tests/data/offload_gap_chain.json (least budgets 51 B with offloading, 55 B
recompute only) at budgets from the least up with a bucket of 2 B, and a curve's lower budget at the least.
Expected: a feasible plan within the budget, its note naming the least-peak policy and a finer bucket."""
import json
import sys
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)
from gpusolve import Chain
from gpusolve.offload import Link, solve_offload
from gpusolve.offload.solver import solve_offload_budgets

chain = Chain.from_dict(json.loads((Path(__file__).resolve().parents[2] / "tests" / "data" /
                                    "offload_gap_chain.json").read_text()))
data = Path(__file__).resolve().parents[2] / "tests" / "data"
fuzz = json.loads((data / "offload_rounded_auto_chain.json").read_text())
bad = False
try:
    plan = solve_offload(Chain.from_dict(fuzz["chain"]), fuzz["budget_bytes"], Link.from_dict(fuzz["link"]),
                         backend="cpu")
    print(f"fuzz chain, bucket left to the solver: feasible={plan.feasible} peak {plan.predicted_peak_bytes} B "
          f"of {fuzz['budget_bytes']} B; {[n for n in plan.notes if 'rounded' in n]}")
    bad |= not plan.feasible or plan.predicted_peak_bytes > fuzz["budget_bytes"]
except ValueError as err:
    print(f"fuzz chain, bucket left to the solver: ValueError: {err}")
    bad = True
link = Link.parse("1e6B/s")
for budget in (51, 52, 53, 54):
    try:
        plan = solve_offload(chain, budget, link, bucket=2, backend="cpu")
        print(f"budget {budget} B: feasible={plan.feasible} peak {plan.predicted_peak_bytes} B, "
              f"{plan.predicted_time_ms:.4f} ms; {[n for n in plan.notes if 'rounded' in n]}")
        bad |= not plan.feasible or plan.predicted_peak_bytes > budget
    except ValueError as err:
        print(f"budget {budget} B: ValueError: {err}")
        bad = True
top, lower = solve_offload_budgets(chain, 1000, link, [51], bucket=2, backend="cpu")
print(f"lower budget 51 B of a 1000 B table: feasible={lower[0].feasible}; {[n for n in lower[0].notes if 'rounded' in n]}")
bad |= not lower[0].feasible
sys.exit(1 if bad else 0)
