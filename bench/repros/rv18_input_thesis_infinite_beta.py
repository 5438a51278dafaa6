"""`gpusolve thesis CASES.json` with Infinity in beta_f / beta_b: a raw OverflowError traceback (exit 1),
and Chain.from_thesis raises OverflowError instead of a ValueError naming the field.
Expected: one line `gpusolve: error: ...: beta_f ... must be finite` and exit 2.
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_thesis_infinite_beta.py
Fixed in session 18: Chain.from_thesis checks every entry is finite and >= 0, naming it; exits 0."""
import copy, json, os, subprocess, sys, tempfile
from _rv18 import ROOT  # the tree under test: GS_ROOT
from gpusolve import Chain

base = json.load(open(ROOT + "/gpusolve/data/thesis_dp_cases.json"))
case = copy.deepcopy(base["cases"][0])
case["beta_f"][5] = float("inf")  # json.dumps writes Infinity, which json.loads reads back
path = os.path.join(tempfile.mkdtemp(), "cases.json")
open(path, "w").write(json.dumps({"format": "thesis-reference/1", "cases": [case]}))
env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve", "thesis", path], capture_output=True, text=True, env=env)
print("CLI: gpusolve thesis", path, "-> rc", r.returncode)
print("\n".join(r.stderr.strip().splitlines()[-3:]))
bad = r.returncode != 2 or "Traceback" in r.stderr
try:
    Chain.from_thesis([1.0] * 5, [1.0] * 5, [1, 1, float("inf"), 1, 1], [1] * 5)
    print("API: Chain.from_thesis accepted beta_f with inf"); bad = True
except ValueError as e:
    print("API: ValueError", e)
except Exception as e:
    print(f"API: Chain.from_thesis raised {type(e).__name__}: {e}"); bad = True
sys.exit(1 if bad else 0)
