"""A gpusolve-chain/1 file with a fractional byte count past its eighth stage gets an error that names neither the
stage nor the value (a review of the README's "Bad input ... gives one line `gpusolve: error: ...`", 2026-11-28).

Observed: resnet50_b128 saved with Chain.to_dict(), act_bytes[15] set to 1000.5, then
  gpusolve solve c.json --budget 50%
  -> exit 2, "gpusolve: error: c.json: field 'act_bytes' must hold whole bytes, got [411041792.0, 411041792.0,
     102760448.0, 411041792.0, 411041792.0, 411041792.0, 205520896.0, 205520896.0]"
The eight values quoted are the field's first eight, all whole; the bad one (stage 16, 1000.5) is not shown, so the
user cannot find it. The same value in a measured-chain/1 profile reads "stage 16 (layer3.4): x = 1000.5 is not a
whole number of bytes"; a negative or NaN act_bytes in the chain file reads "stage 16 (...): act_bytes = ...".
Cause: gpusolve/chain.py _as_bytes raises with ``arr.tolist()[:8]`` instead of the first non-whole value and its
index. Expected: the stage (number and name) and the value, as for the other bad values.
Exit 1 while the message does not name 1000.5.
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
data["act_bytes"] = [int(v) for v in data["act_bytes"]]
data["act_bytes"][15] = 1000.5
path = os.path.join(d, "c.json")
Path(path).write_text(json.dumps(data))
env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve", "solve", path, "--budget", "50%"],
                   capture_output=True, text=True, env=env, cwd=d)
err = r.stderr.strip()
print(f"gpusolve solve c.json (act_bytes[15] = 1000.5): exit {r.returncode}; {err[-400:]}")
bad = r.returncode != 2 or "Traceback" in err or "1000.5" not in err
print("BUG: the error does not name the fractional value (or its stage)" if bad else "ok")
sys.exit(1 if bad else 0)
