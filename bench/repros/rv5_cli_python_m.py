"""`python -m gpusolve` (the package, as one would expect beside the `gpusolve` script) fails: "No module named
gpusolve.__main__; 'gpusolve' is a package and cannot be directly executed". Only `python -m gpusolve.cli` works."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

r = subprocess.run([sys.executable, "-m", "gpusolve", "--version"], capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=ROOT),
                   cwd=tempfile.gettempdir())  # not this tree: -m puts the working folder first
print(f"python -m gpusolve --version: exit {r.returncode}: {(r.stdout + r.stderr).strip()}")
sys.exit(r.returncode)
