"""`gpusolve curve --out` into folders that do not exist: the CLI creates the whole missing tree (a typo in
a path silently makes folders; as root `--out /nonexistent/dir/c.png` made /nonexistent), and when the
write then fails (here: a file name too long for the file system) it exits 2 but leaves the folders it
made behind (README: bad input "writes nothing")."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)
ok_path = os.path.join(d, "typo", "deeper", "c.png")
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "curve", "vgg16_b64", "--out", ok_path],
                   capture_output=True, text=True, env=env, cwd=d)
print(f"--out {ok_path}: exit {r.returncode}: {r.stdout.strip() or r.stderr.strip()}")
bad_path = os.path.join(d, "new", "sub", "a" * 300 + ".png")
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "curve", "vgg16_b64", "--out", bad_path],
                   capture_output=True, text=True, env=env, cwd=d)
left = sorted(os.path.relpath(os.path.join(p, n), d) for p, ns, _ in os.walk(os.path.join(d, "new")) for n in ns)
print(f"--out new/sub/<300 x a>.png: exit {r.returncode}: {r.stderr.strip()[:110]}...")
print(f"left behind after the failed write: {['new'] + left if os.path.exists(os.path.join(d, 'new')) else 'nothing'}")
sys.exit(1 if os.path.exists(os.path.join(d, "new")) else 0)
