"""compare() (and `gpusolve compare`, and the baselines of `gpusolve curve`) on a chain in the thesis's model
(multi_tape=False, Chain.from_thesis) report plans outside the DP's class as fitting and faster than the optimum,
priced by an encoding that is wrong for them (a review, 2026-11-28).

Bundled thesis case random_seed1_N3 (4 stages; least budget 13 B, store-all peak 8 B), budget 13 B:
- the optimum (every backend: exact, cpu at bucket 1) is 23.638 ms, peak 13 B;
- compare(chain, 13, backend="cpu") rows: store-all 14.154 ms, peak 8 B, feasible=True; checkpoint_sequential
  (best k) 14.154 ms, 8 B; checkpoint_sequential (sqrt N) 17.89 ms, 13 B; chen2016 greedy 14.154 ms, 8 B;
  bisection (budget-aware) 14.154 ms, 8 B, all "fits: yes", and the optimum's note says "... beat the bucketed
  optimum: bucket rounding; a finer bucket finds a plan at least as fast", which is false: bucket 1 and the exact
  backend give 23.638 ms, and store-all's 8 B is below the minimum (13 B) the same row names.
- `gpusolve compare thesis.json --budget 13 --backend cpu` prints that table and note; `gpusolve curve thesis.json
  --max-budget 20 --json` draws those baselines at 14.154 ms under the optimal line (23.638 ms at 13 B).
Every bundled thesis case shows it (uniform_N20: store-all 21 ms at 2 B against the optimum 231 ms at its
minimum 3 B).

Cause: gpusolve/baselines.py (compare, baseline_records, baseline_curves) evaluates store-all and the segment
policies with simulate() whatever chain.multi_tape is. In the thesis's encoding a recording forward is free and
keeps no tape (its cost is folded into the backward), so a schedule that records early (plain autograd, a
segment taped whole) is priced as free memory and time. The solver itself leaves them out for this reason
(gpusolve/solve.py, Note [The thesis model's class], outside_class_candidates; the join fix dd75ffc); compare()
does not. Expected: for a chain with multi_tape=False, the rows outside the class are not reported as fitting
(e.g. feasible=False with a detail saying they are outside the thesis model, or left out), and no note claims
that a finer bucket would find them; likewise for curve's baselines.
Exit 1 while the inconsistency shows.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain, solve
from gpusolve.baselines import compare
from gpusolve.data import THESIS_CASES

case = next(c for c in json.load(open(THESIS_CASES))["cases"] if c.get("name") == "random_seed1_N3")
chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"], name=case["name"])
budget = 13
exact = solve(chain, budget, backend="exact", progress=False)
fine = solve(chain, budget, backend="cpu", bucket=1, progress=False)
least = exact.min_feasible_bytes
print(f"optimum at {budget} B: exact {exact.predicted_time_ms:.6g} ms, cpu bucket 1 {fine.predicted_time_ms:.6g} ms; "
      f"least budget {least} B")
bad = False
rows = compare(chain, budget, backend="cpu")
for row in rows[1:]:
    if row["feasible"] and row["time_ms"] < exact.predicted_time_ms * (1 - 1e-9):
        below = " (peak below the least budget)" if row["peak_bytes"] < least else ""
        print(f"  compare row {row['name']!r}: {row['time_ms']:.6g} ms, peak {row['peak_bytes']} B, feasible{below}")
        bad = True
note = rows[0]["detail"].get("note")
if note:
    print(f"  optimum's note: {note}")
    bad = True

d = tempfile.mkdtemp()
path = os.path.join(d, "thesis.json")
Path(path).write_text(json.dumps(chain.to_dict()))
env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "curve", path, "--max-budget", "20", "--out",
                    os.path.join(d, "c.png"), "--json"], capture_output=True, text=True, env=env, cwd=d)
if r.returncode == 0:
    data = json.loads(r.stdout)
    optimal = min(data["optimal"]["time_ms"])
    for name, times in data["baselines"].items():
        if name == "points":
            continue
        low = min((t for t in times if t is not None), default=None)
        if low is not None and low < optimal * (1 - 1e-9):
            print(f"  gpusolve curve: baseline {name!r} drawn at {low:.6g} ms, below the optimal line's best {optimal:.6g} ms")
            bad = True
else:
    print(f"gpusolve curve: exit {r.returncode}: {r.stderr.strip()[-300:]}")
print("BUG: baselines outside the thesis model's class reported as fitting and faster" if bad else "ok")
sys.exit(1 if bad else 0)
