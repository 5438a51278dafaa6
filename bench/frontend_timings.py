"""Seconds per phase of ``solve()`` (``Plan.timings``): is the front end cheap next to the table?

    python bench/frontend_timings.py [--profile densenet121_fine_b32] [--buckets 64,256,1024] [--repeats 3]
                                     [--backend cpu|cuda] [--out DIR]

Solves the profile (unfused: every measured stage a stage, as in bench/solver_speed.py) at half its
store-all peak with the CPU backend at each bucket count, ``--repeats`` times, and reports the
median of each phase. Target (issue 8): every phase but ``dp`` (table fill) and ``recover`` (policy
recovery) together <= 15 ms on the CPU machine, at any bucket count. Writes
``bench/results/frontend_timings.json`` and ``.md`` (``frontend_timings_cuda.*`` with
``--backend cuda``, whose ``solve_s`` is the whole ``solve()`` a user waits for, issue 7's
<= 60 ms at 8192 buckets: bench/solver_speed.py times the table and recovery only).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpusolve import BackendUnavailableError, solve, store_all_peak_bytes  # noqa: E402
from gpusolve.dp.cuda import SUB_PHASES  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description, number_list, unfused_profile_or_exit  # noqa: E402  (same folder)

TARGET_S = 0.015


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="densenet121_fine_b32")
    parser.add_argument("--buckets", type=number_list(int), default="64,256,1024")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    chain = unfused_profile_or_exit(parser, ROOT / "gpusolve" / "profiles" / f"{args.profile}.json")
    budget = store_all_peak_bytes(chain) // 2
    try:
        solve(chain, budget, bucket=-(-budget // 16), backend=args.backend)  # warm NumPy, the imports, the kernels
    except BackendUnavailableError as err:
        parser.exit(2, f"frontend_timings.py: {err}\n")
    rows = []
    for buckets in args.buckets:
        runs, walls = [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            runs.append(solve(chain, budget, bucket=-(-budget // buckets), backend=args.backend).timings)
            walls.append(time.perf_counter() - started)  # solve() returns a plan on the host: nothing pending
        phases = sorted({k for r in runs for k in r})
        median = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in phases}
        # the phases besides the table and the walks; the parts of a phase (SUB_PHASES) are in it already
        other = statistics.median(sum(v for k, v in r.items() if k not in ("dp", "recover", *SUB_PHASES))
                                  for r in runs)
        rows.append({"buckets": buckets, "phases_s": median, "other_s": other, "meets_target": other <= TARGET_S,
                     "solve_s": statistics.median(walls), "solve_s_each": walls})
        print(f"{buckets:6d} buckets: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in median.items())
              + f"; other than dp/recover {1e3 * other:.2f} ms; solve() {1e3 * statistics.median(walls):.2f} ms")
    device = cpu_description() if args.backend == "cpu" else _gpu_name()
    meta = {"device": device, "backend": args.backend, "date": _dt.date.today().isoformat(),
            "command": "python " + " ".join(sys.argv), "profile": args.profile, "stages": chain.n,
            "budget_bytes": budget, "repeats": args.repeats}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / ("frontend_timings.json" if args.backend == "cpu" else f"frontend_timings_{args.backend}.json")
    out.write_text(json.dumps({"meta": meta, "records": rows}, indent=1))
    lines = [f"# solve() phases on {args.profile} ({chain.n} stages, unfused), {args.backend.upper()} backend", "",
             f"{meta['device']}, {meta['date']}; budget {budget} B (half the store-all peak); medians of "
             f"{args.repeats} solves. Command: `{meta['command']}`. Target: phases other than `dp` and `recover` "
             f"<= {1e3 * TARGET_S:.0f} ms.", "",
             "| buckets | " + " | ".join(f"{k} (ms)" for k in rows[0]["phases_s"])
             + " | other than dp/recover (ms) | whole solve() (ms) |",
             "| ---: | " + " | ".join("---:" for _ in rows[0]["phases_s"]) + " | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['buckets']} | " + " | ".join(f"{1e3 * r['phases_s'].get(k, 0.0):.2f}"
                                                         for k in rows[0]["phases_s"])
                     + f" | {1e3 * r['other_s']:.2f} | {1e3 * r['solve_s']:.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


def _gpu_name() -> str:
    import cupy
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)  # bytes or str by CuPy's version, as elsewhere


if __name__ == "__main__":
    sys.exit(main())
