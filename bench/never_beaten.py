"""Is the plan ever beaten? `solve()` at default settings against every baseline, in exact bytes.

    python bench/never_beaten.py [--profiles densenet121_b64,resnet50_b128] [--points 11] [--backend cpu]

For each bundled profile and budgets spread evenly from the exact minimum to the store-all peak
(both included), the plan of ``solve(chain, budget)`` (default bucket) against every baseline of
``gpusolve.baselines`` that fits the budget in exact bytes (simulated with the same cost model). A
row is "beaten" when a fitting baseline is faster. Also records the table's own optimum at the
budget (the bucketed curve's last value) and what decided the plan (``Plan.notes``).

Writes ``bench/results/never_beaten_<backend>.json`` and ``.md`` (device, date, command).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpusolve import Chain, solve, store_all_peak_bytes  # noqa: E402
from gpusolve.baselines import baseline_records  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description  # noqa: E402  (same folder)

PROFILES = ("densenet121_b64", "resnet50_b128", "vgg16_b64", "densenet121_fine_b32")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--points", type=int, default=11)
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    rows = []
    for name in args.profiles.split(","):
        chain = Chain.from_profile(ROOT / "gpusolve" / "profiles" / f"{name}.json")
        top, low = store_all_peak_bytes(chain), min_feasible_bytes(chain)
        for fraction in np.linspace(0.0, 1.0, args.points):
            budget = int(low + fraction * (top - low))
            started = time.perf_counter()
            plan = solve(chain, budget, backend=args.backend)
            seconds = time.perf_counter() - started
            baselines = [r for r in baseline_records(chain, budget) if r.feasible]
            faster = [(r.name, r.time_ms) for r in baselines if r.time_ms < plan.predicted_time_ms - 1e-9]
            best_baseline = min(baselines, key=lambda r: r.time_ms) if baselines else None
            row = {"profile": name, "stages": chain.n, "fraction_of_range": float(fraction), "budget_bytes": budget,
                   "plan_ms": plan.predicted_time_ms, "table_ms": float(plan.curve.time_ms[-1]),
                   "best_baseline": None if best_baseline is None else best_baseline.name,
                   "best_baseline_ms": None if best_baseline is None else best_baseline.time_ms,
                   "beaten_by": faster, "solve_s": seconds, "notes": plan.notes}
            rows.append(row)
            print(f"{name:22s} {fraction:4.2f} budget {budget:>12d} plan {plan.predicted_time_ms:9.4f} ms "
                  f"(table {row['table_ms']:9.4f}) best baseline {row['best_baseline_ms']} "
                  f"{'BEATEN by ' + str(faster) if faster else ''}", flush=True)
    out = ROOT / "bench" / "results" / f"never_beaten_{args.backend}.json"
    meta = {"device": cpu_description(), "date": _dt.date.today().isoformat(), "command": "python " + " ".join(sys.argv),
            "backend": args.backend}
    out.write_text(json.dumps({"meta": meta, "records": rows}, indent=1))
    beaten = [r for r in rows if r["beaten_by"]]
    lines = ["# Is the plan ever beaten? (`solve()` at default settings vs every baseline, exact bytes)", "",
             f"{meta['device']}, {meta['date']}, backend {args.backend}. Command: `{meta['command']}`.",
             f"Budgets: {args.points} points from the exact minimum (0.00) to the store-all peak (1.00). "
             f"Rows beaten: **{len(beaten)} of {len(rows)}**.", "",
             "| profile | point | budget (B) | plan (ms) | table at budget (ms) | best fitting baseline (ms) | beaten by | "
             "decided by |", "| --- | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for r in rows:
        decided = "; ".join(n.split(":")[0].split(" with ")[0][:60] for n in r["notes"] if "CUDA" not in n) or "table"
        base = "-" if r["best_baseline"] is None else f"{r['best_baseline']} {r['best_baseline_ms']:.4f}"
        lines.append(f"| {r['profile']} | {r['fraction_of_range']:.2f} | {r['budget_bytes']} | {r['plan_ms']:.4f} | "
                     f"{r['table_ms']:.4f} | {base} | {', '.join(n for n, _ in r['beaten_by']) or '-'} | {decided} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}: {len(beaten)} of {len(rows)} rows beaten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
