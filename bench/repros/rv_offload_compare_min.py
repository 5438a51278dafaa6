"""A chain whose combined class (recompute + offload) runs below recompute only's minimum (51 B against 55 B):
`gpusolve compare --offload` and `curve --offload` checked the budget against recompute only's minimum and
refused 52 B, which `solve --offload` solves; the feasible plan reported 55 B as its minimum."""
import json
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT
from gpusolve import Chain
from gpusolve.dp.minpeak import min_feasible_bytes
from gpusolve.offload import min_offload_bytes, solve_offload

CHAIN = {"format": "gpusolve-chain/1", "input_bytes": 16, "input_grad_bytes": 16, "reserved_bytes": 1,
         "multi_tape": True, "t_fwd": [0.45, 0.35, 0.9, 0.65, 0.81, 0.86, 0.92, 0.04],
         "t_fwd_nograd": [0.66, 0.9, 0.79, 0.96, 0.05, 0.89, 0.73, 0.97],
         "t_bwd": [0.72, 0.67, 0.71, 0.03, 0.5, 0.2, 0.94, 0.35], "act_bytes": [18, 17, 18, 0, 8, 8, 19, 10],
         "grad_bytes": [10, 10, 5, 18, 4, 1, 4, 1], "tape_bytes": [9, 5, 17, 9, 13, 19, 14, 24],
         "fwd_nograd_extra": [1, 3, 1, 4, 2, 1, 2, 2], "fwd_grad_extra": [3, 0, 3, 0, 3, 3, 4, 4],
         "bwd_extra": [3, 3, 0, 0, 1, 0, 4, 0], "bwd_tape_bytes": [1, 5, 13, 9, 13, 19, 5, 21]}
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
