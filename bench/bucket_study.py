"""Bucket study: optimal time and solve time against the bucket size, densenet121_fine at a fixed budget.

    python bench/bucket_study.py                      # CUDA, buckets 64 MiB .. 64 KiB
    python bench/bucket_study.py --backend cpu --finest 4MiB

The chain is the executable (fused) densenet121_fine_b32 profile unless --unfused. For each
bucket (powers of two from --coarsest down to --finest) it solves the whole curve, records the
optimal time at the budget and the solve time, and reports how much halving the bucket changes
the optimum (the default CUDA bucket, budget / 8192, should change it by < 0.5 %). Plot:
bench/results/bucket_study_<device>.png (matplotlib, Agg); data: the .json beside it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpusolve import Chain  # noqa: E402
from gpusolve.dp.problem import Problem  # noqa: E402
from gpusolve.units import format_bytes, parse_bytes  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from solver_speed import device_name, slug  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--profile", default="densenet121_fine_b32")
    parser.add_argument("--unfused", action="store_true")
    parser.add_argument("--budget", default="2GiB")
    parser.add_argument("--coarsest", default="64MiB")
    parser.add_argument("--finest", default="64KiB")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    chain = Chain.from_profile(ROOT / "gpusolve" / "profiles" / f"{args.profile}.json",
                               fuse_aliasing=not args.unfused)
    budget = parse_bytes(args.budget, "budget")
    if args.backend == "cuda":
        from gpusolve.dp import cuda
        cuda.ensure_available()
        import cupy
        run, sync = cuda.run, cupy.cuda.get_current_stream().synchronize
    else:
        from gpusolve.dp import cpu
        run, sync = cpu.run, (lambda: None)
    bucket = parse_bytes(args.coarsest, "coarsest")
    finest = parse_bytes(args.finest, "finest")
    rows = []
    # warm-up (compilation, first launch)
    run(Problem.build(chain, max(1, budget // 64), 64), 64)
    while bucket >= finest:
        buckets = budget // bucket
        started = time.perf_counter()
        problem = Problem.build(chain, bucket, buckets)
        curve, _ = run(problem, buckets)
        sync()
        seconds = time.perf_counter() - started
        opt = float(curve[buckets])
        rows.append({"bucket_bytes": bucket, "buckets": int(buckets), "optimal_ms": opt if np.isfinite(opt) else None,
                     "solve_seconds": seconds})
        print(json.dumps(rows[-1]), flush=True)
        bucket //= 2
    for prev, cur in zip(rows, rows[1:]):
        if prev["optimal_ms"] and cur["optimal_ms"]:
            cur["change_from_double_bucket"] = prev["optimal_ms"] / cur["optimal_ms"] - 1
    device = device_name([args.backend])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"bucket_study_{slug(device)}"
    meta = {"profile": args.profile, "fused_aliasing": not args.unfused, "stages": chain.n, "budget_bytes": budget,
            "backend": args.backend, "device": device, "date": _dt.date.today().isoformat(),
            "command": "python bench/bucket_study.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "default_cuda_bucket": -(-budget // 8192), "rows": rows}
    (out / f"{stem}.json").write_text(json.dumps(meta, indent=1) + "\n")
    plot(rows, meta, out / f"{stem}.png")
    print(f"wrote {out / stem}.png and .json")
    return 0


def plot(rows, meta, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = [r["bucket_bytes"] for r in rows]
    fig, ax1 = plt.subplots(figsize=(7, 4))
    ax1.plot(xs, [r["optimal_ms"] if r["optimal_ms"] else np.nan for r in rows], "o-", color="C0")
    ax1.set_xscale("log", base=2)
    ax1.invert_xaxis()
    ax1.set_xlabel("bucket (bytes)")
    ax1.set_ylabel("optimal step time (ms)", color="C0")
    ax1.axvline(meta["default_cuda_bucket"], color="gray", ls=":", label="default CUDA bucket (budget/8192)")
    ax2 = ax1.twinx()
    ax2.plot(xs, [r["solve_seconds"] * 1e3 for r in rows], "s--", color="C1")
    ax2.set_yscale("log")
    ax2.set_ylabel(f"{meta['backend']} solve time (ms)", color="C1")
    ax1.set_title(f"{meta['profile']} ({meta['stages']} stages), budget {format_bytes(meta['budget_bytes'])}, "
                  f"{meta['device']}", fontsize=9)
    ax1.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
