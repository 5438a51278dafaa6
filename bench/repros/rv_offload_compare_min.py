"""A chain whose combined class (recompute + offload) runs below recompute only's minimum (51 B against 55 B):
`gpusolve compare --offload` and `curve --offload` checked the budget against recompute only's minimum and
refused 52 B, which `solve --offload` solves; the feasible plan reported 55 B as its minimum."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # the tree under test: GS_ROOT
from gpusolve import Chain
from gpusolve.dp.minpeak import min_feasible_bytes
from gpusolve.offload import min_offload_bytes, solve_offload

# the test vector tests/test_offload_compare.py uses (this repository's, whatever tree is under test)
CHAIN = json.loads((Path(__file__).resolve().parents[2] / "tests" / "data" / "offload_gap_chain.json").read_text())
d = tempfile.mkdtemp()
path = os.path.join(d, "gap.json")
with open(path, "w") as f:
    json.dump(CHAIN, f)
chain = Chain.load(path)
print(f"min_offload_bytes {min_offload_bytes(chain)} B, recompute only's min_feasible_bytes {min_feasible_bytes(chain)} B")
plan = solve_offload(chain, 52, "1e6B/s", backend="cpu")
print(f"solve_offload at 52 B: feasible {plan.feasible}, peak {plan.predicted_peak_bytes} B, "
      f"min_feasible_bytes {plan.min_feasible_bytes} B")
link = ["--offload", "--bandwidth", "1e6B/s", "--backend", "cpu"]
env = dict(os.environ, PYTHONPATH=ROOT)
for cmd in (["solve", path, "--budget", "52", *link, "--json"], ["compare", path, "--budget", "52", *link, "--json"],
            ["curve", path, "--max-budget", "52", *link, "--out", os.path.join(d, "c.png"), "--json"]):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", *cmd], capture_output=True, text=True, env=env, cwd=d)
    said = json.loads(r.stdout).get("min_feasible_bytes") if r.returncode == 0 else r.stderr.strip().splitlines()[-1]
    print(f"gpusolve {cmd[0]} --offload at 52 B: exit {r.returncode}: "
          f"{'min_feasible_bytes ' + str(said) if r.returncode == 0 else said}")
