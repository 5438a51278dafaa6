"""`gpusolve demo --backend exact` is refused with a message that contradicts itself: "backend 'exact' is not
one of 'auto', 'cpu', 'cuda', 'exact'" (exit 2), although `gpusolve demo --help` offers "auto, cpu, cuda or
exact" and `gpusolve solve densenet121_b64 --budget 50% --backend exact` runs. cmd_demo checks the backend up
front with solve._pick_backend (gpusolve/cli.py, cmd_demo: `_pick_backend(args.backend, [])`), which knows
only the table backends (gpusolve/solve.py, _pick_backend: `if backend not in ("cuda", "auto")`). The pieces
the demo runs (solve, compare, curve_data) all take backend="exact" (about 6 s on densenet121_b64).
Expected: the demo runs with the exact DP, as the help offers."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)


def gpusolve(*args):
    return subprocess.run([sys.executable, "-m", "gpusolve.cli", *args], capture_output=True, text=True, env=env,
                          cwd=d, timeout=600)


helped = "exact" in gpusolve("demo", "--help").stdout
r = gpusolve("demo", "--backend", "exact", "--out", os.path.join(d, "demo.png"))
said = (r.stderr.strip().splitlines() or [""])[-1] if r.returncode else r.stdout.strip().splitlines()[-1]
print(f"gpusolve demo --help offers exact: {helped}")
print(f"gpusolve demo --backend exact: exit {r.returncode}: {said}")
s = gpusolve("solve", "densenet121_b64", "--budget", "50%", "--backend", "exact")
print(f"gpusolve solve densenet121_b64 --budget 50% --backend exact: exit {s.returncode}: "
      f"{(s.stdout.strip().splitlines() or [''])[1] if s.returncode == 0 else s.stderr.strip()}")
sys.exit(1 if helped and r.returncode != 0 else 0)
