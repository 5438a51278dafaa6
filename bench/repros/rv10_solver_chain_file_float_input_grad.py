"""A gpusolve-chain/1 file whose "input_grad_bytes" is written as a float with no fraction (1024.0, what many JSON
writers, e.g. NumPy floats through json.dumps, produce) is refused with a self-contradicting error, while the same
value in "input_bytes" or "reserved_bytes" of the same file is accepted (a review, 2026-11-28).

Chain.uniform(3, act_bytes=1024).to_dict() with one field set to 1024.0, then Chain.from_dict / `gpusolve solve
FILE --budget 100%`:
- "input_bytes": 1024.0     -> loads, solves (exit 0);
- "reserved_bytes": 1024.0  -> loads, solves (exit 0);
- "input_grad_bytes": 1024.0 -> "gpusolve: error: f.json: input_grad_bytes = 1024.0; it must be a whole number of
  bytes, >= 0 and at most 2^50" (exit 2): 1024.0 is a whole number of bytes.
_check_chain_fields (gpusolve/chain.py) accepts all three (finite, is_integer, in range).

Cause: gpusolve/chain.py Chain.from_dict passes int(data["input_bytes"]) and int(data["reserved_bytes"]) but
data.get("input_grad_bytes") as read; Chain.validate then requires an Integral (_whole) for it. Expected: the
three fields read alike (int() of the checked value, None kept for input_grad_bytes).
Exit 1 while the inconsistency shows.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain

base = Chain.uniform(3, act_bytes=1024).to_dict()
d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)
outcome = {}
for key in ("input_bytes", "reserved_bytes", "input_grad_bytes"):
    data = dict(base, **{key: 1024.0})
    try:
        chain = Chain.from_dict(data)
        api = f"loads ({key} = {getattr(chain, key)!r})"
    except ValueError as err:
        api = f"ValueError: {err}"
    path = os.path.join(d, f"{key}.json")
    Path(path).write_text(json.dumps(data))
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", path, "--budget", "100%", "--backend", "cpu"],
                       capture_output=True, text=True, env=env, cwd=d)
    cli = f"exit {r.returncode}" + (f": {r.stderr.strip().splitlines()[-1]}" if r.returncode else "")
    outcome[key] = r.returncode == 0 and not api.startswith("ValueError")
    print(f'"{key}": 1024.0 -> Chain.from_dict: {api}; gpusolve solve: {cli}')
bad = len(set(outcome.values())) > 1
print("BUG: the same whole-valued float is accepted in one byte field and refused in another" if bad else "ok")
sys.exit(1 if bad else 0)
