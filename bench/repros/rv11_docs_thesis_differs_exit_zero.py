"""`gpusolve thesis CASES.json` exits 0 when a case's solved costs differ from the file's, and its --json output does
not say whether they match, so a scripted check (CI) cannot see a mismatch (a review of the README's commands,
2026-11-28; README: "gpusolve thesis [CASES.json] [--json]  # thesis reference").

Observed: the bundled gpusolve/data/thesis_dp_cases.json with case random_seed1_N3's optimal_cost[5] changed to 1.0:
  gpusolve thesis edited.json
  -> prints "random_seed1_N3: 20 feasible budgets, DIFFERS from the file" and exits 0
  gpusolve thesis edited.json --json -> {"cases": [{"name": ..., "optimal_cost": [...]}, ...]}, exit 0, no match field
Cause: gpusolve/cli.py cmd_thesis prints "matches"/"DIFFERS from" and returns 0 regardless.
Expected: a non-zero exit (e.g. 1) when any case differs (and a per-case "matches" in --json).
Exit 1 while the mismatch exits 0.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve.data import THESIS_CASES

data = json.load(open(THESIS_CASES))
edited = copy.deepcopy(data)
case = next(c for c in edited["cases"] if c.get("name") == "random_seed1_N3")
case["optimal_cost"][5] = 1.0
d = tempfile.mkdtemp()
path = os.path.join(d, "edited.json")
Path(path).write_text(json.dumps(edited))
env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve", "thesis", path], capture_output=True, text=True, env=env, cwd=d)
line = next((ln for ln in r.stdout.splitlines() if ln.startswith("random_seed1_N3")), r.stdout.strip()[-200:])
print(f"gpusolve thesis edited.json: exit {r.returncode}; {line}")
bad = "DIFFERS" in r.stdout and r.returncode == 0
print("BUG: a reference mismatch exits 0" if bad else "ok")
sys.exit(1 if bad else 0)
