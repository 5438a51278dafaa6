"""`gpusolve join resnet50_b128 resnet50_b128 --budget 50% --turn-ms 1.9 --compare` (the README's command) prints
the store-all row as "store-all  -  -  -  no": no step, overhead or peak, though the lines above it say "store-all
(plain autograd) peak 20.46 GiB, step 151.54 ms", and `gpusolve compare` for a chain prints store-all's step and
peak with fits "no" (densenet121_b64 at 50 %: "store-all 71.01 +0.0 % 9.98 GiB no"). In --json the record is
time_ms/peak_bytes/overhead null. gpusolve/cli.py, _join_records: `"time_ms": float(b.time_ms) if fits else None`
(and peak_bytes, overhead) drops the simulated figures join.baselines.store_all always has. Expected: the same
columns as the chain comparison: store-all's time and peak, marked as not fitting."""
import json
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)


def gpusolve(*args):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", *args], capture_output=True, text=True, env=env, cwd=d)
    assert r.returncode == 0, r.stderr
    return r.stdout


text = gpusolve("join", "resnet50_b128", "resnet50_b128", "--budget", "50%", "--turn-ms", "1.9", "--compare")
header = next(line for line in text.splitlines() if line.startswith("store-all (plain autograd)"))
row = next(line for line in text.splitlines() if line.startswith("store-all ") and "(" not in line)
chain_row = next(line for line in gpusolve("compare", "densenet121_b64", "--budget", "50%", "--backend",
                                           "cpu").splitlines() if line.startswith("store-all "))
record = next(r for r in json.loads(gpusolve("join", "resnet50_b128", "resnet50_b128", "--budget", "50%",
                                             "--turn-ms", "1.9", "--compare", "--json"))["records"]
              if r["name"] == "store-all")
print(f"join header:      {header}")
print(f"join table row:   {' '.join(row.split())}")
print(f"chain table row:  {' '.join(chain_row.split())}")
print(f"join --json store-all record: time_ms {record['time_ms']}, peak_bytes {record['peak_bytes']}")
sys.exit(1 if record["time_ms"] is None else 0)
