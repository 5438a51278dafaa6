"""`python examples/train.py --backend cuda` on a machine where CuPy sees no CUDA device ends in a 42-line
Python traceback (exit 1) ending "gpusolve.errors.BackendUnavailableError: the CUDA backend cannot run: ...",
while every other bad setting of the script is one line "train.py: error: ...": `--device cuda`
there says "train.py: error: --device cuda: no CUDA device here; use --device cpu (see --help)" (exit 2), and
an infeasible budget is caught too. examples/train.py, main: `except (InfeasibleBudgetError, te.CaptureError)`
around model.prepare leaves out gpusolve.BackendUnavailableError, although `--backend` offers cuda in its
choices. Runs where CuPy sees no CUDA device; exits 0 where CUDA runs. Expected: one line "train.py: error:
the CUDA backend cannot run: ... (--backend cpu/auto)", exit 2."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

TRAIN = os.path.join(ROOT, "examples", "train.py")
env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
d = tempfile.mkdtemp()
results = {}
for flags in (["--backend", "cuda"], ["--device", "cuda"]):
    r = subprocess.run([sys.executable, TRAIN, "--model", "resnet", "--steps", "1", *flags], capture_output=True,
                       text=True, env=env, cwd=d, timeout=600)
    err = [line for line in r.stderr.splitlines() if not line.startswith("USDT")]
    results[flags[0]] = (r.returncode, err)
    print(f"train.py {' '.join(flags)}: exit {r.returncode}, {len(err)} stderr lines; first: {err[0][:80] if err else ''}"
          f"; last: {err[-1][:150] if err else ''}")
code, err = results["--backend"]
sys.exit(1 if code != 0 and any(line.startswith("Traceback") for line in err) else 0)
