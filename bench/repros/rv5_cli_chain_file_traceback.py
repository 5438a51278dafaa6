"""Malformed chain files give a Python traceback (exit 1) instead of one `gpusolve: error:` line (exit 2):
a gpusolve-chain/1 file with "input_bytes": null, "reserved_bytes": null, "names": 5, a field holding an
object, or "provenance": [..]; a measured-chain/1 profile whose stage "name" is null or a number. Two more
give a line that names neither file nor field ("could not convert string to float: 'abc'")."""
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # the tree under test: GS_ROOT
from gpusolve import Chain

chain = Chain.load("resnet50_b128").to_dict()
profile = json.loads((Path(ROOT) / "gpusolve" / "profiles" / "resnet50_b128.json").read_text())
cases = {}
for key, value in (("input_bytes", None), ("reserved_bytes", None), ("names", 5), ("t_fwd", {"a": 1}),
                   ("provenance", [1]), ("act_bytes", "abc"), ("input_bytes", "abc")):
    c = copy.deepcopy(chain)
    c[key] = value
    cases[f"chain {key}={json.dumps(value)}"] = c
for value in (None, 5):
    p = copy.deepcopy(profile)
    p["stages"][2]["name"] = value
    cases[f"profile stage 3 name={json.dumps(value)}"] = p
d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)
bad = 0
for n, (label, data) in enumerate(cases.items()):
    path = os.path.join(d, f"case{n}.json")
    Path(path).write_text(json.dumps(data))
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", path, "--budget", "5GiB"],
                       capture_output=True, text=True, env=env, cwd=d)
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    clean = r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    named = path in r.stderr or os.path.basename(path) in r.stderr
    ok = clean and named
    bad += not ok
    print(f"{label}: exit {r.returncode}, {'traceback' if 'Traceback' in r.stderr else 'one line'}: {last}"
          f"{'' if ok else '   <-- ' + ('traceback' if not clean else 'names neither file nor field')}")
sys.exit(1 if bad else 0)
