"""_check_link_range (gpusolve/offload/solver.py, new) refuses a link only where ONE copy takes longer than
float32's largest value (3.4e38 ms), but a swap costs the copy out AND the copy back (w_off + e_pre in
gpusolve/offload/dp.py), plus the stages' times, summed in the float32 table. Between about 1.7e38 and 3.4e38 ms
per copy the check passes, the sum overflows to inf (NumPy "overflow encountered in add" warnings), and the
solve again blames the bucket: "at bucket 1 B the rounded sizes fit no plan ... use a finer bucket" -- the
error bench/repros/rv6_offload_tau_overflow.py reported, which now passes only because it tries 1e-40 B/ms and
1e39 ms. Chain tests/data/offload_gap_chain.json at 52 B (combined minimum 51 B), bucket 1 B.
Expected: the plan (one swap), or the refusal that names the link's figures, never "use a finer bucket"."""
import json
import sys
import warnings
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)
from gpusolve import Chain
from gpusolve.offload import Link, solve_offload

warnings.simplefilter("ignore")
chain = Chain.from_dict(json.loads((Path(__file__).resolve().parents[2] / "tests" / "data" /
                                    "offload_gap_chain.json").read_text()))
bad = 0
for label, link in (("1 B/ms, latency 1e38 ms", Link(1.0, 1.0, 1e38)), ("1 B/ms, latency 2e38 ms", Link(1.0, 1.0, 2e38)),
                    ("1e-37 B/ms", Link(1e-37, 1e-37))):
    try:
        plan = solve_offload(chain, 52, link, bucket=1, backend="cpu", progress=False)
        print(f"{label}: plan, {plan.predicted_time_ms:.3g} ms, {plan.swaps} swap(s)")
    except ValueError as err:
        print(f"{label}: ValueError: {err}")
        bad += "finer bucket" in str(err)
print("BUG: a link within _check_link_range's bound still ends in 'use a finer bucket'" if bad else "ok")
sys.exit(1 if bad else 0)
