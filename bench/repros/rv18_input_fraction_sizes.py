"""A bare size that is a fraction of a byte is refused for --budget ("is a fraction of a byte") but silently
rounded down elsewhere: gpusolve.solve(bucket=1.5) solves with a 1 B bucket (its error then names 1-byte buckets),
`gpusolve join ... --turn-bytes 1.5` runs with 1 B, and a thesis case's budget 2.5 is solved as 2.
Expected: the same refusal for every size (or document the rounding). Fix: gpusolve/units.py (parse_bytes callers:
parse_bucket in gpusolve/dp/buckets.py, cli._bytes, cmd_thesis).
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_fraction_sizes.py
Fixed in session 18: gpusolve.units.whole_bytes refuses a bare fraction of a byte for buckets, CLI sizes and thesis budgets; exits 0."""
import copy, json, os, subprocess, sys, tempfile, warnings
from _rv18 import ROOT, chain4  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
from gpusolve import solve

env = dict(os.environ, PYTHONPATH=ROOT)
def cli(*args):
    r = subprocess.run([sys.executable, "-m", "gpusolve", *args], capture_output=True, text=True, env=env)
    return r.returncode, r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else []
bad = False
rc, err = cli("solve", "vgg16_b64", "--budget", "1.5")
print("--budget 1.5:", rc, err)
c = chain4()
try:
    p = solve(c, 10000, bucket=1.5, backend="cpu")
    print("solve(bucket=1.5): accepted, plan.bucket_bytes =", p.bucket_bytes); bad = True
except ValueError as e:
    print("solve(bucket=1.5):", e)
rc, err = cli("join", "vgg16_b64", "vgg16_b64", "--budget", "90%", "--turn-bytes", "1.5", "--backend", "cpu", "--json")
print("join --turn-bytes 1.5: rc", rc, err); bad = bad or rc == 0
case = copy.deepcopy(json.load(open(ROOT + "/gpusolve/data/thesis_dp_cases.json"))["cases"][0])
case["budgets"], case["optimal_cost"] = [25.5], [None]
path = os.path.join(tempfile.mkdtemp(), "cases.json")
open(path, "w").write(json.dumps({"format": "thesis-reference/1", "cases": [case]}))
r = subprocess.run([sys.executable, "-m", "gpusolve", "thesis", path, "--json"], capture_output=True, text=True, env=env)
print("thesis budgets [25.5]: rc", r.returncode, r.stdout.strip()[:120], r.stderr.strip()[-150:])
bad = bad or "optimal_cost" in r.stdout
sys.exit(1 if bad else 0)
