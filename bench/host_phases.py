"""The host parts of ``solve()`` that run once per slack-band try or once per solve, timed alone.

    python bench/host_phases.py [--profile densenet121_fine_b32] [--buckets 256] [--repeats 15] [--json FILE]
    PYTHONPATH=<another checkout> python bench/host_phases.py ...   # the same figures for other code

On the GPU the table fill takes tens of milliseconds, so what ``solve()`` does on the host around it
counts against issue 7's 60 ms (bench/SOLVER_NOTES.md, "What is left to run on a GPU", item 4). This
times, with a CPU-filled table of the profile at half its store-all peak (``--buckets`` columns: the
phases below barely depend on it), the median of ``--repeats`` calls of:

- ``segment candidates``: ``gpusolve.solve._fastest_segment_policy`` against the table's optimum;
- ``policy_peak_bytes``: the exact-byte peak of the optimum's policy (once per slack-band try);
- ``tree from quads``: ``gpusolve.dp.recover.build_policy`` from the device walk's (i, j, m, k)
  quads as an int32 array (once per slack-band try on the CUDA backend);
- ``schedule + simulate``: ``policy_to_schedule`` and ``simulate`` of the optimum (once per solve).

It imports ``gpusolve`` from the path (not from this checkout), so the same command times another
version of the code side by side. Prints one JSON line (and writes it to ``--json``).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description, unfused_profile_or_exit  # noqa: E402  (same folder)


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="densenet121_fine_b32")
    parser.add_argument("--buckets", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import gpusolve
    import numpy as np
    from gpusolve import store_all_peak_bytes
    from gpusolve.dp import cpu
    from gpusolve.dp.minpeak import policy_peak_bytes
    from gpusolve.dp.problem import Problem
    from gpusolve.dp.recover import build_policy
    from gpusolve.schedule import policy_to_schedule
    from gpusolve.simulate import simulate
    from gpusolve.solve import _fastest_segment_policy

    root = Path(gpusolve.__file__).resolve().parent
    chain = unfused_profile_or_exit(parser, root / "profiles" / f"{args.profile}.json")
    budget = store_all_peak_bytes(chain) // 2
    problem = Problem.build(chain, -(-budget // args.buckets), args.buckets)
    table = cpu.fill(problem)
    optimum = float(table.curve[args.buckets])
    padded = chain.padded()
    # the walk's (i, j, m, k) order as the recovery hands it to the tree build (what the device walk returns)
    from gpusolve.dp import recover
    real, orders = recover.policy_from_choices, []
    recover.policy_from_choices = lambda order, tape, act: orders.append(list(order)) or real(order, tape, act)
    try:
        policy = table.policy(args.buckets)
    finally:
        recover.policy_from_choices = real
    quads = np.asarray(orders[-1], dtype=np.int32)
    assert build_policy(problem, quads) == policy
    ms = {
        "segment candidates": median_ms(lambda: _fastest_segment_policy(chain, problem, budget, optimum), args.repeats),
        "policy_peak_bytes": median_ms(lambda: policy_peak_bytes(problem, padded["act_bytes"], padded["tape_bytes"],
                                                                  policy), args.repeats),
        "tree from quads": median_ms(lambda: build_policy(problem, quads), args.repeats),
        "schedule + simulate": median_ms(lambda: simulate(chain, policy_to_schedule(policy, 0, chain.n)), args.repeats),
    }
    record = {"device": cpu_description(), "date": dt.datetime.now(dt.timezone.utc).isoformat(),
              "command": " ".join(["python", "bench/host_phases.py", *(sys.argv[1:] if argv is None else argv)]),
              "pythonpath": os.environ.get("PYTHONPATH", ""), "gpusolve": str(root), "profile": args.profile,
              "buckets": args.buckets, "repeats": args.repeats, "policy_states": len(quads), "median_ms": ms}
    line = json.dumps(record)
    print(line)
    if args.json is not None:
        args.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
