"""A percentage budget below the minimum: the command line answers in bytes only. `gpusolve solve vgg16_b64
--budget 50%` says "budget 2.3602 GiB (2534219776 B) is below the minimum feasible budget 3.8303 GiB
(4112778240 B) for this chain; raise the budget to at least 4112778240 B": it neither echoes the 50% the user
typed nor says which percentage would do (81.1 %), so the next try is a guess or arithmetic. The wrappers
say both for the same mistake (examples/train.py --budget 1%: "... (budget 1% of plain autograd's peak
420288 B; this input needs at least 62.6%)"). gpusolve/solve.py, below_minimum, called with bytes only.
Expected: for a percentage budget, the message names the percentage given and the least one that fits."""
import os
import re
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT
from gpusolve import Chain  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402
from gpusolve.simulate import store_all_peak_bytes  # noqa: E402

chain = Chain.load("vgg16_b64")
need = 100 * min_feasible_bytes(chain) / store_all_peak_bytes(chain)
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", "vgg16_b64", "--budget", "50%"],
                   capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=tempfile.mkdtemp())
said = r.stderr.strip()
print(f"gpusolve solve vgg16_b64 --budget 50%: exit {r.returncode}: {said}")
print(f"least percentage that fits: {need:.1f} %")
names_percent = "50%" in said.replace(" %", "%") and re.search(r"\d+(\.\d+)? ?%", said.replace("50%", "")) is not None
sys.exit(0 if names_percent else 1)
