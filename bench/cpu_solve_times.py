"""Time the CPU backend on every bundled profile at 1024 and 4096 memory buckets.

Budget: 50 % of the model's store-all peak, or 1.1 x the minimum feasible budget if that is
higher. Writes bench/results/cpu_solve_times.json and bench/results/cpu_solve_times.md.

    python bench/cpu_solve_times.py [--buckets 1024 4096] [--profiles NAME ...] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpusolve import Chain, format_bytes, solve, store_all_peak_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description  # noqa: E402  (same folder)
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402

PROFILE_DIR = ROOT / "gpusolve" / "profiles"


def bench_budget(chain: Chain) -> int:
    return max(store_all_peak_bytes(chain) // 2, int(1.1 * min_feasible_bytes(chain)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--profiles", nargs="*", default=None, help="profile names (default: all bundled)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    names = args.profiles or sorted(p.stem for p in PROFILE_DIR.glob("*.json"))
    command = "python " + " ".join([os.path.relpath(__file__, ROOT)] + (argv if argv is not None else sys.argv[1:]))
    device = cpu_description()
    records = []
    for name in names:
        chain = Chain.load(PROFILE_DIR / f"{name}.json")
        nominal = bench_budget(chain)
        for buckets in args.buckets:
            bucket = nominal // buckets
            budget = bucket * buckets  # exactly `buckets` buckets (at most buckets - 1 bytes under nominal)
            started = time.perf_counter()
            plan = solve(chain, budget, bucket=bucket, backend="cpu", strict=False, progress=False)
            seconds = time.perf_counter() - started
            record = {"instance": name, "stages": chain.n,
                      "measured_stages": chain.provenance.get("measured_stages", chain.n),
                      "buckets": plan.buckets, "bucket_bytes": bucket, "budget_bytes": budget,
                      "solve_seconds": round(seconds, 3),
                      "optimal_ms": plan.predicted_time_ms if plan.feasible else None,
                      "store_all_ms": plan.store_all_time_ms, "feasible": plan.feasible,
                      "device": device, "date": dt.date.today().isoformat(), "command": command}
            records.append(record)
            print(f"{name:24s} N={chain.n:4d} buckets={plan.buckets:5d} budget={format_bytes(budget):>10s} "
                  f"{seconds:8.2f} s  optimal {record['optimal_ms']} ms", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu_solve_times.json").write_text(json.dumps(records, indent=1) + "\n")
    lines = ["# CPU solve times", "",
             f"- device: {device}", f"- date: {records[0]['date'] if records else ''}",
             f"- command: `{command}`",
             "- budget: 50 % of the store-all peak, or 1.1 x the minimum feasible budget if higher;"
             " backend cpu (NumPy, float32 table)", "",
             "| instance | stages | buckets | budget | solve (s) | optimal step (ms) | store-all (ms) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in records:
        opt = f"{r['optimal_ms']:.2f}" if r["optimal_ms"] is not None else "infeasible"
        lines.append(f"| {r['instance']} | {r['stages']} | {r['buckets']} | {format_bytes(r['budget_bytes'])} | "
                     f"{r['solve_seconds']:.2f} | {opt} | {r['store_all_ms']:.2f} |")
    (out / "cpu_solve_times.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
