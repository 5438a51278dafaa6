"""`gpusolve curve` (and gpusolve.plot.curve_data) on a chain in the thesis's model (multi_tape=False) with no
--max-budget fails, telling the user to do what they did (a review, 2026-11-28).

Bundled thesis case uniform_N20 saved as a gpusolve-chain/1 file (least budget 3 B, store-all peak 2 B):
  gpusolve curve thesis.json --out c.png
  -> exit 2, "gpusolve: error: max budget 2 B is below the chain's least feasible budget 3 B: raise it
     (--max-budget), or leave it out for the store-all peak"
--max-budget was left out. curve_data(chain) raises the same InfeasibleBudgetError. Every bundled thesis case
but none of the profiles does this (in the thesis's model the class's least budget is above the store-all peak,
whose encoding prices recording as free: Note [The thesis model's class] in gpusolve/solve.py).

Cause: gpusolve/plot.py curve_budgets takes the default top as store_all_peak_bytes(chain) and refuses a top
below the least budget with a message written for a user-given --max-budget. Expected: without --max-budget
the curve is drawn (e.g. up to max(store-all peak, least budget), or up to the budget where the optimum stops
improving), or at least an error that does not tell the user to leave out an option they did not give.
Exit 1 while the default fails.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain, InfeasibleBudgetError
from gpusolve.data import THESIS_CASES
from gpusolve.plot import curve_data

case = next(c for c in json.load(open(THESIS_CASES))["cases"] if c.get("name") == "uniform_N20")
chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"], name=case["name"])
bad = False
try:
    data = curve_data(chain, None, backend="cpu")
    print(f"curve_data(chain): {len(data['optimal']['budget_bytes'])} optimal points up to {data['max_budget_bytes']} B")
except InfeasibleBudgetError as err:
    print(f"curve_data(chain) (no max budget): InfeasibleBudgetError: {err}")
    bad = True

d = tempfile.mkdtemp()
path = os.path.join(d, "thesis.json")
Path(path).write_text(json.dumps(chain.to_dict()))
env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "curve", path, "--out", os.path.join(d, "c.png")],
                   capture_output=True, text=True, env=env, cwd=d)
print(f"gpusolve curve thesis.json --out c.png: exit {r.returncode}; {(r.stdout + r.stderr).strip()[-300:]}")
if r.returncode != 0:
    bad = True
print("BUG: the default curve of a thesis-model chain is refused" if bad else "ok")
sys.exit(1 if bad else 0)
