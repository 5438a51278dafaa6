"""Time the data of `gpusolve curve` (plot.curve_data) and of `gpusolve curve --offload` (offload_curve_data, over
12.2GB/s) on one tree, on the CPU backend:

    python bench/curve_cost.py TREE PROFILE,... [curve|offload]

TREE is the repository whose gpusolve is imported (run it on two trees, alternating, to compare them side by
side); a third argument times that one only. Prints one JSON object per profile: seconds, the number of points of the optimal (combined) line and its
first point."""
import json
import sys
import time
import warnings

root = sys.argv[1]
sys.path.insert(0, root)
warnings.simplefilter("ignore")
import gpusolve  # noqa: E402

assert gpusolve.__file__.startswith(root), gpusolve.__file__
from gpusolve import Chain  # noqa: E402
from gpusolve.offload import Link  # noqa: E402
from gpusolve.offload.compare import offload_curve_data  # noqa: E402
from gpusolve.plot import curve_data  # noqa: E402

for prof in sys.argv[2].split(","):
    chain = Chain.load(prof)
    row = {"profile": prof}
    for key, run, line in (("curve", lambda: curve_data(chain, backend="cpu"), "optimal"),
                           ("offload", lambda: offload_curve_data(chain, Link.parse("12.2GB/s"), backend="cpu"),
                            "combined")):
        if len(sys.argv) > 3 and key != sys.argv[3]:
            continue
        t = time.perf_counter()
        d = run()
        row[key] = {"seconds": round(time.perf_counter() - t, 3), "points": len(d[line]["budget_bytes"]),
                    "first": [d[line]["budget_bytes"][0], round(d[line]["time_ms"][0], 4)]}
    print(json.dumps(row), flush=True)
