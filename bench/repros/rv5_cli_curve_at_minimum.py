"""`gpusolve curve densenet121_b64 --max-budget <the exact minimum feasible budget>` fails, and its error
suggests as the fix the very bucket it used ("give a finer bucket (--bucket), e.g. 1.32 MiB, or leave it
out": it was left out) -- a 14x finer bucket (100KiB) fails the same way -- while `gpusolve solve` at that
budget succeeds (README: "the minimum itself is always solvable with the default settings")."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT
from gpusolve import Chain
from gpusolve.dp.minpeak import min_feasible_bytes

low = min_feasible_bytes(Chain.load("densenet121_b64"))
d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)
results = []
for cmd in (["solve", "densenet121_b64", "--budget", str(low), "--backend", "cpu"],
            ["curve", "densenet121_b64", "--max-budget", str(low), "--backend", "cpu", "--out", "c.png"],
            ["curve", "densenet121_b64", "--max-budget", str(low), "--backend", "cpu", "--bucket", "100KiB",
             "--out", "c.png"]):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", *cmd], capture_output=True, text=True, env=env, cwd=d)
    said = (r.stderr.strip().splitlines() or [""])[-1] if r.returncode else r.stdout.strip().splitlines()[-1]
    print(f"gpusolve {' '.join(cmd)}: exit {r.returncode}: {said}")
    results.append(r.returncode)
sys.exit(1 if results[0] == 0 and results[1] != 0 else 0)
