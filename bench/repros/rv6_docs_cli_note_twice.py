"""README ("Command line"): "notes (such as the CPU fallback of `--backend auto`) go to stderr". Without --json
the CPU-fallback note goes to both streams: stdout carries "note: CUDA backend unavailable (...); solving on the
CPU" as a line of the plan's summary (gpusolve/solve.py, Plan.summary: `[f"note: {n}" for n in plan.notes]`)
and stderr "gpusolve: note: CUDA backend unavailable (...)" (gpusolve/cli.py, main: the caught FallbackWarning).
On a terminal the same two-line-long note shows twice, and `gpusolve solve ... > plan.txt` still writes it into
the file. Runs where CuPy sees no CUDA device (as on this CPU machine); exits 0 where CUDA runs (no fallback).
Expected: the note once, on stderr as the README says (or the README says the summary repeats it)."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", "densenet121_b64", "--budget", "50%"],
                   capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=tempfile.mkdtemp())
out = [line for line in r.stdout.splitlines() if "CUDA backend unavailable" in line]
err = [line for line in r.stderr.splitlines() if "CUDA backend unavailable" in line]
print(f"exit {r.returncode}")
print(f"stdout: {out[0][:90] + '...' if out else '(no note)'}")
print(f"stderr: {err[0][:90] + '...' if err else '(no note)'}")
sys.exit(1 if out and err else 0)
