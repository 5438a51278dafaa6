"""solve_join on branches in the thesis's model (multi_tape=False, e.g. Chain.from_thesis, or a profile with
"multi_tape": false) (a review, 2026-11-28): the budget that the solver itself meets is refused.

Two copies of the bundled thesis case uniform_N20 (21 stages each), joined at a turn of 1 ms:
- solve_join(..., budget=3) raises InfeasibleBudgetError "below the minimum feasible budget 4 B ... raise the
  budget to at least 4 B";
- solve_join(..., budget=4) returns a plan decided by "store-all" that peaks at 3 B (min_feasible_bytes 4), at
  43 ms, i.e. +0 % over store-all, faster than the chain solver's optimum for ONE of the two branches alone at
  budget 10 (53 ms).
`gpusolve join a.json a.json --budget 3` / `--budget 4` on the same chain saved as a profile does the same.

In the thesis's model a recording forward is only taken right before its own backward; store-all records
every stage first. The chain solver leaves store-all (and the other segment policies) out of that model for
this very reason (gpusolve/solve.py, "(3): segment policies ... Not in the thesis's model ... a store-all plan
returned there was below the class's least budget, which the exact backend refused"). The join's front end
(gpusolve/join/solve.py, solve_join: `others = [store_all(net, budget_bytes)]` and the baselines, always
candidates) still adds them, while its minimum (min_peak_join) is that of the DP's class. Expected: one
consistent answer: a plan never peaks below the minimum the solver names (either the plan stays in the
model's class, or the minimum counts store-all and budget 3 is planned).
Exit 1 while the inconsistency shows.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain, InfeasibleBudgetError, solve
from gpusolve.join import Turn, solve_join

cases = json.loads((Path(ROOT) / "gpusolve" / "data" / "thesis_dp_cases.json").read_text())["cases"]
case = next(c for c in cases if c["name"] == "uniform_N20")
chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"], name=case["name"])
turn = Turn(t_fwd=1.0)
bad = False

one = solve(chain, 10, backend="cpu")
print(f"one branch alone (chain solver, thesis model) at budget 10 B: {one.predicted_time_ms} ms, peak "
      f"{one.predicted_peak_bytes} B")
plan = solve_join([chain, chain], turn, 4, backend="cpu")
print(f"join of two at budget 4 B: {plan.predicted_time_ms} ms, peak {plan.predicted_peak_bytes} B, decided by "
      f"{plan.decided_by!r}, min_feasible_bytes {plan.min_feasible_bytes} B")
if plan.predicted_peak_bytes < plan.min_feasible_bytes:
    print(f"  the plan peaks {plan.min_feasible_bytes - plan.predicted_peak_bytes} B below the minimum the solver names")
    bad = True
try:
    again = solve_join([chain, chain], turn, plan.predicted_peak_bytes, backend="cpu")
    print(f"join at budget {plan.predicted_peak_bytes} B (that plan's own peak): {again.predicted_time_ms} ms, "
          f"decided by {again.decided_by!r}")
except InfeasibleBudgetError as err:
    print(f"join at budget {plan.predicted_peak_bytes} B (that plan's own peak): InfeasibleBudgetError: {err}")
    bad = True

# The same through the CLI, the chain saved as a profile
d = tempfile.mkdtemp()
path = os.path.join(d, "thesis_chain.json")
Path(path).write_text(json.dumps(chain.to_dict()))
env = dict(os.environ, PYTHONPATH=ROOT)
for budget in ("3", "4"):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "join", path, path, "--budget", budget, "--turn-ms", "1",
                        "--backend", "cpu", "--json"], capture_output=True, text=True, env=env, cwd=d)
    if r.returncode == 0:
        p = json.loads(r.stdout)["plan"]
        print(f"gpusolve join ... --budget {budget}: exit 0, peak {p.get('predicted_peak_bytes')} B, "
              f"decided_by {p.get('decided_by')!r}")
    else:
        print(f"gpusolve join ... --budget {budget}: exit {r.returncode}, {r.stderr.strip().splitlines()[-1]}")
sys.exit(1 if bad else 0)
