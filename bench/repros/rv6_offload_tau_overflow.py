"""A link so slow (or a latency so large) that one transfer takes more than float32's largest value (3.4e38 ms)
makes solve_offload fail with advice that cannot be followed: "at bucket 1 B the rounded sizes fit no plan,
although the budget is at least the exact minimum with offloading (51 B): use a finer bucket" -- the bucket is
already 1 B. On the chain of tests/data/offload_gap_chain.json (combined minimum 51 B, recompute only's 55 B) at
52 B: over 1e-30 B/ms the only plan (one swap) is returned (3.6e31 ms), over 1e-40 B/ms the solve raises that
error; likewise a latency of 1e39 ms (finite, accepted by Link) against 1e30 ms.
Cause: SwapArrays.build (gpusolve/offload/dp.py) rounds tau to the float32 table, where it becomes inf (the swap
is then impossible), while min_budget_bytes / min_offload_bytes say any finite tau can swap, so the front end
(gpusolve/offload/solver.py) concludes the bucket is to blame.
Expected: the plan, or one line naming the link value as the problem (not the bucket).
Exits nonzero while the bug shows."""
import json
import sys
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)
from gpusolve import Chain
from gpusolve.offload import Link, min_offload_bytes, solve_offload

chain = Chain.from_dict(json.loads((Path(__file__).resolve().parents[2] / "tests" / "data" /
                                    "offload_gap_chain.json").read_text()))
print(f"combined minimum {min_offload_bytes(chain)} B; budget 52 B, bucket 1 B, backend cpu")
bad = 0
for label, link in (("1e-30 B/ms", Link(1e-30, 1e-30)), ("1e-40 B/ms", Link(1e-40, 1e-40)),
                    ("1 B/ms, latency 1e30 ms", Link(1.0, 1.0, 1e30)), ("1 B/ms, latency 1e39 ms", Link(1.0, 1.0, 1e39))):
    try:
        plan = solve_offload(chain, 52, link, bucket=1, backend="cpu")
        print(f"{label}: plan, {plan.predicted_time_ms:.3g} ms, {plan.swaps} swap(s)")
    except ValueError as err:
        print(f"{label}: ValueError: {err}")
        bad += "finer bucket" in str(err)
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
