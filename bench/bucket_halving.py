"""Is the default CUDA bucket (budget / 8192) fine enough? Optimal time at it and at half of it.

The optimal time at a bucket size does not depend on the backend (every backend solves the same
recurrences), so this runs on the CPU backend. Writes bench/results/bucket_halving.{json,md}.

    python bench/bucket_halving.py [--fractions 0.5 0.7] [--buckets 8192]
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

from gpusolve import Chain, solve, store_all_peak_bytes  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description  # noqa: E402  (same folder)

PROFILE_DIR = ROOT / "gpusolve" / "profiles"



def write_markdown(out: Path, date: str, command: str, buckets: int, records: list[dict]) -> None:
    """bench/results/bucket_halving.md from the records."""
    lines = [f"# Halving the default CUDA bucket (budget / {buckets})", "",
             f"- date: {date}", f"- command: `{command}`",
             f"- device: {cpu_description()} (optimal times, not speed: they do not depend on the device)",
             "- backend: cpu (optimal times do not depend on the backend; the CUDA solve was not run here)",
             "- budget: the fraction of the model's store-all peak, or 1.1 x the minimum feasible budget if higher",
             "",
             "| instance | stages | fraction | budget (GiB) | bucket (B) | optimal ms | halved bucket ms | change |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in records:
        lines.append(f"| {r['instance']} | {r['stages']} | {r['budget_fraction_of_store_all']:.2f} | "
                     f"{r['budget_bytes'] / 2**30:.2f} | {r['bucket_bytes']} | {r['optimal_ms_default']:.4f} | "
                     f"{r['optimal_ms_halved']:.4f} | {100 * r['relative_change']:.3f} % |")
    worst = max(abs(r["relative_change"]) for r in records)
    lines += ["", f"Largest change: {100 * worst:.3f} % (target < 0.5 %)."]
    (out / "bucket_halving.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.5, 0.7],
                        help="budgets as fractions of the model's store-all peak")
    parser.add_argument("--buckets", type=int, default=8192, help="the default bucket count under test")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    command = "python " + " ".join([os.path.relpath(__file__, ROOT)] + (argv if argv is not None else sys.argv[1:]))
    records = []
    for path in sorted(PROFILE_DIR.glob("*.json")):
        chain = Chain.load(path)
        for fraction in args.fractions:
            budget = max(int(store_all_peak_bytes(chain) * fraction), int(1.1 * min_feasible_bytes(chain)))
            bucket = -(-budget // args.buckets)
            times = {}
            for label, b in (("default", bucket), ("halved", max(1, bucket // 2))):
                started = time.perf_counter()
                plan = solve(chain, budget, bucket=b, backend="cpu", progress=False)
                times[label] = (plan.predicted_time_ms, time.perf_counter() - started)
            change = times["default"][0] / times["halved"][0] - 1.0
            records.append({"instance": path.stem, "stages": chain.n, "budget_bytes": budget,
                            "budget_fraction_of_store_all": fraction, "bucket_bytes": bucket,
                            "optimal_ms_default": times["default"][0], "optimal_ms_halved": times["halved"][0],
                            "relative_change": change, "solve_seconds_default": times["default"][1],
                            "solve_seconds_halved": times["halved"][1]})
            print(f"{path.stem:22s} {fraction:.2f}  bucket {bucket:>9d} B  {times['default'][0]:.4f} -> "
                  f"{times['halved'][0]:.4f} ms  ({100 * change:.3f} %)", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    (out / "bucket_halving.json").write_text(json.dumps({"date": date, "command": command, "backend": "cpu",
                                                         "records": records}, indent=1))
    write_markdown(out, date, command, args.buckets, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
