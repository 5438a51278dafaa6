"""An infeasible percentage budget's new hint (gpusolve.units.percent_hint, gpusolve/solve.py naming_percent)
names a percentage above 100 where the least budget is above the store-all peak, which happens in the thesis's
model (multi_tape=False: its class's least budget can exceed the store-all peak, Note [Exact candidates]). On the
bundled thesis case random_seed1_N3 (store-all peak 8 B, least 13 B) solve(chain, "50%") says "this needs at
least 162.5%", a value every entry point refuses ("give a number above 0 and at most 100"). Expected: the hint
says that no percentage fits and names the bytes (or no percentage hint)."""
import json
import sys

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)
from gpusolve import Chain, InfeasibleBudgetError, solve
from gpusolve.data import THESIS_CASES

case = next(c for c in json.load(open(THESIS_CASES))["cases"] if c.get("name") == "random_seed1_N3")
chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"])
bad = False
try:
    solve(chain, "50%", progress=False)
except InfeasibleBudgetError as err:
    print(f"solve at 50%: {err}")
    if "needs at least" in str(err):
        named = str(err).rsplit("needs at least ", 1)[1].rstrip(")")
        try:
            solve(chain, named, progress=False)
            print(f"solve at {named}: ok")
        except ValueError as again:
            print(f"solve at {named} (the percentage the error named): {type(again).__name__}: {again}")
            bad = True
print("BUG: the error names a percentage that cannot be given" if bad else "ok")
sys.exit(1 if bad else 0)
