"""`gpusolve curve densenet121_fine_b32` (stderr not a terminal): the table fill reports its progress and ends
with "gpusolve: solving 363 stages x 1153 buckets (cpu): done in 16 s", then the command runs on for another
~11 s (the plans at the 24 grid budgets and the baselines there: gpusolve/plot.py, curve_data's solve_budgets
candidates and baseline_curves) without a line, about 40 % of its 28 s on a 2-core CPU. After "done", a user
has no way to tell work from a hang. README: "A solve that takes more than a couple of seconds reports its
progress on stderr". Expected: the remaining work reports too (or "done" comes when the command's work is).
About 30-45 s."""
import os
import subprocess
import sys
import tempfile
import threading
import time

from _setup import ROOT  # the tree under test: GS_ROOT

d = tempfile.mkdtemp()
t0 = time.monotonic()
p = subprocess.Popen([sys.executable, "-m", "gpusolve.cli", "curve", "densenet121_fine_b32", "--backend", "cpu",
                      "--out", os.path.join(d, "c.png")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     env=dict(os.environ, PYTHONPATH=ROOT), cwd=d)
lines = []


def read(stream, name):
    for line in stream:
        lines.append((time.monotonic() - t0, name, line.rstrip()))


threads = [threading.Thread(target=read, args=(p.stderr, "stderr")), threading.Thread(target=read, args=(p.stdout, "stdout"))]
for t in threads:
    t.start()
p.wait()
for t in threads:
    t.join()
end = time.monotonic() - t0
for at, name, line in sorted(lines):
    print(f"{at:6.1f} s {name}: {line[:110]}")
print(f"{end:6.1f} s exit {p.returncode}")
last_err = max((at for at, name, _ in lines if name == "stderr"), default=0.0)
last_out = min((at for at, name, _ in lines if name == "stdout"), default=end)
silent = last_out - last_err
print(f"silent between the last progress line and the result: {silent:.1f} s of {end:.1f} s")
sys.exit(1 if silent > 5.0 else 0)
