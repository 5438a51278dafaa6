"""`gpusolve curve --offload` draws the bucketed DP tables' rows (plan.curve of one solve at the top budget), not
what `gpusolve solve --offload` returns at those budgets: the fix of rv5_cli_curve_not_optimal (plot.curve_data
adds the exact-candidate plans at the grid budgets) never reached offload_curve_data
(gpusolve/offload/compare.py). On resnet50_b128 over 12GB/s (the README's profile):
- at the store-all peak (the curve's last budget) the "recompute + offload" line is at 75.22 ms while
  `solve --offload` there gives store-all, 74.82 ms, and the plot's own "offload only" point at that budget
  (74.82 ms) is drawn BELOW the combined line;
- the combined line starts one bucket above the minimum budget the same JSON reports (min_feasible_bytes), where
  `solve --offload` has a plan;
- `curve --offload --max-budget <that minimum>` exits 0 with all three curves empty.
Expected: every curve point at most what `solve --offload` gives at its budget (as `gpusolve curve` without
--offload does since the rv5 fix), a point at min_feasible_bytes, and no silently empty plot.
Exits nonzero while the bug shows."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from _setup import ROOT  # the tree under test: GS_ROOT

PROFILE, RATE = "resnet50_b128", "12GB/s"
d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)


def cli(*argv):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", *argv], capture_output=True, text=True, env=env, cwd=d)
    if r.returncode:
        raise SystemExit(f"gpusolve {' '.join(argv)} failed: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


data = cli("curve", PROFILE, "--offload", "--bandwidth", RATE, "--backend", "cpu", "--json",
           "--out", os.path.join(d, "c.png"))
cb, ct = np.array(data["combined"]["budget_bytes"]), np.array(data["combined"]["time_ms"])


def line_at(b):  # the plotted combined line (a step, where="post")
    k = np.searchsorted(cb, b, side="right") - 1
    return float(ct[k]) if k >= 0 else float("inf")


bad = 0
top, low = data["max_budget_bytes"], data["min_feasible_bytes"]
solved_top = cli("solve", PROFILE, "--budget", str(top), "--offload", "--bandwidth", RATE, "--backend", "cpu", "--json")
paper_top = data["offload_only"]["best"][-1]
print(f"at the top budget {top} B: combined line {line_at(top):.4f} ms, solve --offload {solved_top['predicted_time_ms']:.4f}"
      f" ms, the plot's offload-only point {paper_top:.4f} ms")
bad += line_at(top) > solved_top["predicted_time_ms"] + 1e-6
bad += paper_top is not None and paper_top < line_at(top) - 1e-6
solved_low = cli("solve", PROFILE, "--budget", str(low), "--offload", "--bandwidth", RATE, "--backend", "cpu", "--json")
print(f"at min_feasible_bytes {low} B: combined line {line_at(low)} ms (first point at {cb[0]} B), "
      f"solve --offload {solved_low['predicted_time_ms']:.4f} ms")
bad += not np.isfinite(line_at(low))
small = cli("curve", PROFILE, "--offload", "--bandwidth", RATE, "--backend", "cpu", "--max-budget", str(low), "--json",
            "--out", os.path.join(d, "m.png"))
print(f"curve --offload --max-budget {low}: exit 0, combined points {len(small['combined']['budget_bytes'])}, "
      f"recompute points {len(small['recompute']['budget_bytes'])}")
bad += len(small["combined"]["budget_bytes"]) == 0
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
