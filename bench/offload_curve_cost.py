"""Time offload_curve_data (the data of `gpusolve curve --offload`) on one tree: python bench/offload_curve_cost.py TREE PROFILE,...
(TREE: the repository whose gpusolve is imported; run it on two trees side by side to compare).
Prints JSON: seconds, the number of points of the combined line and its first point, per profile."""
import sys, time, warnings, json
root = sys.argv[1]
sys.path.insert(0, root)
warnings.simplefilter("ignore")
import gpusolve
assert gpusolve.__file__.startswith(root), gpusolve.__file__
from gpusolve import Chain
from gpusolve.offload import Link
from gpusolve.offload.compare import offload_curve_data
out = {}
for prof in sys.argv[2].split(","):
    chain = Chain.load(prof)
    t = time.perf_counter()
    d = offload_curve_data(chain, Link.parse("12.2GB/s"), backend="cpu")
    out[prof] = {"seconds": time.perf_counter() - t, "combined_points": len(d["combined"]["budget_bytes"]),
                 "combined_first": [d["combined"]["budget_bytes"][0], d["combined"]["time_ms"][0]]}
print(json.dumps(out))
