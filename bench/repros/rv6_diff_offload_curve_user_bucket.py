"""`gpusolve curve --offload` with a bucket the user gives now fails where it drew the curve before (d30449a):
offload_curve_data plans every grid budget from one table (solve_offload_budgets -> _solve_offload ->
_table_plan, gpusolve/offload/solver.py), and _table_plan RAISES for a budget at least the combined class's
exact minimum that the rounded sizes fit no plan for, below recompute only's minimum ("... use a finer
bucket"). The grid starts at that exact minimum, where the rounding bites first, so one rounded-out grid point
aborts the whole curve. solve_offload_budgets' docstring promises plans (feasible=False below the least), and
ladder_plans' rule for a rounded-out point (solve it alone / keep the table's curve) never runs.
Chain: tests/data/offload_gap_chain.json (combined minimum 51 B, recompute only's 55 B), link 'inf', bucket 2 B.
Expected: the curve (the point at 51 B missing or at its own bucket), as before."""
import json
import sys
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)
from gpusolve import Chain
from gpusolve.offload import Link
from gpusolve.offload.compare import offload_curve_data

chain = Chain.from_dict(json.loads((Path(__file__).resolve().parents[2] / "tests" / "data" /
                                    "offload_gap_chain.json").read_text()))
link = Link(float("inf"), float("inf"))
bad = False
for bucket in (None, 1, 2):
    try:
        data = offload_curve_data(chain, link, bucket=bucket, backend="cpu")
        print(f"bucket {bucket}: curve with {len(data['combined']['budget_bytes'])} combined points from "
              f"{data['min_feasible_bytes']} B")
    except ValueError as err:
        print(f"bucket {bucket}: ValueError: {err}")
        bad = True
print("BUG: the offload curve fails at a user bucket" if bad else "ok")
sys.exit(1 if bad else 0)
