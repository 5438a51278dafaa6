"""`gpusolve join A B --budget ... --compare` (and gpusolve.join.compare_join) on branches in the thesis's model
(multi_tape=False, Chain.from_thesis) still reports store-all as fitting below the join's minimum and faster than
the optimum, with the note "store-all beat the plan" (a review of dd75ffc/14dbf02, 2026-11-28).

dd75ffc took store-all and the composed baselines out of solve_join's candidates for such branches, and 14dbf02
took the rows outside the class out of the chain's `gpusolve compare`/`curve`; the join's comparison was left.

Observed (two copies of the bundled thesis case uniform_N20, 21 stages each, turn 0 ms, --backend cpu):
- budget 4 B: optimal (join DP) 482.00 ms, peak 4 B ("join DP minimum 4 B"); store-all row 42.00 ms, peak 3 B,
  fits: yes; then "note: store-all beat the plan";
- budgets 6, 10, 20 B: the same store-all row (42 ms at 3 B, fits) under optima of 160, 115, 105 ms, and the same
  note. (split budget and EQUIV-CHAIN compose chain schedules that record before the turn too: outside the class,
  reported as fitting at 5 B and more.)
- compare_join(net, 4) returns store-all with feasible=True, peak_bytes 3 < min_peak_join's 4.
Cause: gpusolve/join/baselines.py compare_join (used by gpusolve/cli.py _join_records) evaluates store_all,
split_budget and equiv_chain with simulate_join whatever the branches' multi_tape; the encoding of a thesis-model
branch prices an early recording as free (no forward time, no tape).
Expected: as for a chain (baseline_records, OUTSIDE_THESIS_CLASS): rows outside the class are no fitting rows
(feasible=False with a reason, or left out) where outside_class_candidates(net.branches) is False, and no note
says they beat the plan. Exits 1 while the bug shows."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain
from gpusolve.join import Turn, compare_join, solve_join

cases = json.loads((Path(ROOT) / "gpusolve" / "data" / "thesis_dp_cases.json").read_text())["cases"]
case = next(c for c in cases if c["name"] == "uniform_N20")
chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"], name=case["name"])
bad = False

plan = solve_join([chain, chain], Turn(t_fwd=0.0), 4, backend="cpu")
print(f"solve_join at 4 B: {plan.predicted_time_ms:.2f} ms, peak {plan.predicted_peak_bytes} B, minimum "
      f"{plan.min_feasible_bytes} B, decided by {plan.decided_by!r}")
for b in compare_join(plan.net, 4):
    print(f"  compare_join row {b.name!r}: feasible {b.feasible}, {b.time_ms} ms, peak {b.peak_bytes} B")
    if b.name == "store-all" and b.feasible and b.peak_bytes < plan.min_feasible_bytes:
        print(f"    fits, {plan.min_feasible_bytes - b.peak_bytes} B below the minimum the solver names, "
              f"{plan.predicted_time_ms / b.time_ms:.1f}x faster than the optimum")
        bad = True

d = tempfile.mkdtemp()
path = os.path.join(d, "thesis_chain.json")
Path(path).write_text(json.dumps(chain.to_dict()))
env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "join", path, path, "--budget", "4", "--compare",
                    "--backend", "cpu"], capture_output=True, text=True, env=env, cwd=d)
print(f"gpusolve join ... --budget 4 --compare: exit {r.returncode}")
for line in r.stdout.splitlines():
    if line.startswith(("optimal", "store-all ", "note")):
        print("  " + line)
if "beat the plan" in r.stdout:
    bad = True
print("BUG: a baseline outside the thesis model's class reported as fitting below the join's minimum" if bad
      else "ok")
sys.exit(1 if bad else 0)
