"""A budget that is a fraction of a byte is read two ways. The wrappers refuse it, as the README says ("A bare
number is bytes, and one that is a fraction of a byte ("0.5", 1.5) is refused"): CheckpointedSequential(stages,
budget="0.5") -> "budget '0.5' is a fraction of a byte: give bytes ('6GiB', 6e9) or a percentage of plain
autograd's peak ('50%')". The command line (and gpusolve.solve) floors it silently: `gpusolve solve vgg16_b64
--budget 0.5` says "budget 0 B is below the minimum feasible budget ..." and `--budget 4500000000.5` solves at
4500000000 B. A user who meant half of the peak is told about 0 B, not pointed at '50%'. gpusolve/units.py,
parse_bytes ("Fractions are rounded down to whole bytes"), against torch_exec/executor.py, _budget_setting.
Expected: one rule; the CLI's budget refuses a fraction of a byte with the wrappers' hint."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT, nn, te  # the tree under test: GS_ROOT

env = dict(os.environ, PYTHONPATH=ROOT)
d = tempfile.mkdtemp()
cli = {}
for budget in ("0.5", "4500000000.5"):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", "vgg16_b64", "--budget", budget, "--json"],
                       capture_output=True, text=True, env=env, cwd=d)
    cli[budget] = r
    said = r.stderr.strip().splitlines()[-1] if r.returncode else f"solved, budget_bytes {r.stdout.split('budget_bytes')[1][3:13]}"
    print(f"gpusolve solve vgg16_b64 --budget {budget}: exit {r.returncode}: {said}")
try:
    te.CheckpointedSequential(nn.Sequential(nn.Linear(4, 4)), budget="0.5")
    print("CheckpointedSequential(budget='0.5'): accepted")
    wrapper_refuses = False
except ValueError as err:
    print(f"CheckpointedSequential(budget='0.5'): ValueError: {err}")
    wrapper_refuses = True
floored = "budget 0 B" in cli["0.5"].stderr or cli["4500000000.5"].returncode == 0
sys.exit(1 if wrapper_refuses and floored else 0)
