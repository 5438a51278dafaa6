"""A gpusolve-chain/1 file with one field a value short is reported as a DIFFERENT field being too long (a review of
the README's bad-input errors, 2026-11-28).

Observed: resnet50_b128 saved with Chain.to_dict() (21 stages), the last value of "t_fwd" dropped, then
  gpusolve solve c.json --budget 50%
  -> exit 2, "gpusolve: error: c.json: field 't_fwd_nograd' has 21 values but the chain has 20 stages"
t_fwd_nograd is intact; t_fwd (the field edited) is the odd one out: every other field and "names" have 21 values.
Cause: gpusolve/chain.py Chain.validate takes the stage count from len(t_fwd) and blames the first other field that
differs. Expected: the error names t_fwd (e.g. the field whose length disagrees with the rest / with "names"), or
lists every field's length. Exit 1 while the error does not name t_fwd.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain

d = tempfile.mkdtemp()
data = Chain.load("resnet50_b128").to_dict()
data["t_fwd"] = list(data["t_fwd"])[:-1]
path = os.path.join(d, "c.json")
Path(path).write_text(json.dumps(data))
env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve", "solve", path, "--budget", "50%"],
                   capture_output=True, text=True, env=env, cwd=d)
err = r.stderr.strip()
print(f"gpusolve solve c.json (t_fwd one value short; every other field {len(data['t_fwd_nograd'])} values): "
      f"exit {r.returncode}; {err[-300:]}")
bad = r.returncode != 2 or "'t_fwd'" not in err
print("BUG: the error blames another field, not t_fwd" if bad else "ok")
sys.exit(1 if bad else 0)
