"""Time the exact (bucket-free) DP on the bundled profiles, next to the bucketed CPU backend.

Instances: every bundled profile fused as ``Chain.from_profile`` does by default, and
densenet121_b64 unfused. Each is solved with complete fronts and with ``max_bytes`` = the bench
budget: 50 % of the store-all peak, or 1.1 x the minimum feasible budget where that is higher
(vgg16's minimum is above half its store-all peak), as bench/cpu_solve_times.py does. Beside it, in the
same run, ``solve(chain, budget, backend="cpu")`` at its default bucket (budget / 1024), and how
much its optimum exceeds the exact one, at the bench budget and at exactly the store-all peak.

A run whose predicted time exceeds ``--max-seconds`` is stopped and recorded as skipped with the
prediction (:func:`predict`: front sizes per diagonal extrapolated, candidates counted from
them, seconds per candidate and per pair measured), made after at least MIN_PROBE_SECONDS.

    python bench/exact_speed.py [--max-seconds 120] [--max-seconds-capped S] [--profiles NAME ...] [--out DIR]

Writes bench/results/exact_speed.json and bench/results/exact_speed.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpusolve import Chain, format_bytes, simulate, solve  # noqa: E402
from gpusolve.baselines import store_all  # noqa: E402
from gpusolve.dp import exact  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description  # noqa: E402  (same folder)
from gpusolve.simulate import store_all_time_ms  # noqa: E402

PROFILE_DIR = ROOT / "gpusolve" / "profiles"
# Do not decide to skip before this many seconds: early diagonals say little about late ones (on
# densenet121_fine with max_bytes, 20 s of probing predicted 483 s, 47 s predicted 658 s; it took 700 s).
MIN_PROBE_SECONDS = 60.0


def _load_average() -> float | None:
    """1-minute load average (the machine is shared: timings grow with it)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


class Skip(Exception):
    def __init__(self, predicted: float, candidates: float, diag: int):
        super().__init__(f"predicted {predicted:.0f} s")
        self.predicted, self.candidates, self.diag = predicted, candidates, diag


def predict(n: int, seconds: list[float], candidates: list[int], points: list[int]) -> tuple[float, float]:
    """(seconds, candidates) of the complete run, predicted from its first D diagonals.

    Work model: diagonal d evaluates about (N + 1 - d) * (2 * sum_{e < d} (P(e) + 1) + P(d - 1))
    candidates, P(e) the mean front size on diagonal e (the left and right fronts of every k, with
    their sentinels, and Tape). P beyond D is fitted as a * e^p on diagonals D/2..D; the model is
    scaled to the candidates counted on those diagonals. Time: seconds(d) = alpha * pairs(d) +
    tau * candidates(d), least squares on the same diagonals.
    """
    done = len(seconds)
    if done >= n:
        return float(sum(seconds)), float(sum(candidates))
    e = np.arange(1, done + 1, dtype=np.float64)
    pairs = n + 1 - e
    size = np.asarray(points, dtype=np.float64) / pairs
    use = (e >= max(2, done // 2)) & (size > 0)
    if use.sum() < 2:
        return math.inf, math.inf
    slope, intercept = np.polyfit(np.log(e[use]), np.log(size[use]), 1)
    everything = np.arange(1, n + 1, dtype=np.float64)
    size_all = np.concatenate([size, np.exp(intercept) * everything[done:] ** slope])
    below = np.concatenate([[0.0], np.cumsum(size_all + 1)])[:-1]      # sum_{e < d} (P(e) + 1)
    previous = np.concatenate([[0.0], size_all[:-1]])
    model = (n + 1 - everything) * (2 * below + previous)
    observed = np.asarray(candidates, dtype=np.float64)
    scale = observed[use].sum() / max(model[:done][use].sum(), 1.0)
    rest_candidates = scale * model[done:]
    features = np.stack([pairs[use], observed[use]], axis=1)
    coef, *_ = np.linalg.lstsq(features, np.asarray(seconds)[use], rcond=None)
    if coef[0] < 0 or coef[1] < 0:  # keep the fit physical: all the time per candidate
        coef = np.array([0.0, np.asarray(seconds)[use].sum() / max(observed[use].sum(), 1.0)])
    rest_pairs = n + 1 - everything[done:]
    rest_seconds = coef[0] * rest_pairs + coef[1] * rest_candidates
    return float(sum(seconds) + rest_seconds.sum()), float(observed.sum() + rest_candidates.sum())


class Watch:
    """``on_diagonal`` hook: times every diagonal; raises Skip when the prediction is too long."""

    def __init__(self, n: int, max_seconds: float, stop_after: int | None = None):
        self.n, self.max_seconds, self.stop_after = n, max_seconds, stop_after
        self.started = time.perf_counter()
        self.last = self.started
        self.seconds: list[float] = []
        self.candidates: list[int] = []
        self.points: list[int] = []
        self.first_prediction: dict | None = None

    def __call__(self, diag: int, candidates: int, points: int) -> None:
        now = time.perf_counter()
        self.seconds.append(now - self.last)
        self.candidates.append(candidates)
        self.points.append(points)
        self.last = now
        elapsed = now - self.started
        if self.stop_after is not None and diag >= self.stop_after:
            raise Skip(*predict(self.n, self.seconds, self.candidates, self.points), diag)
        if diag < self.n and (elapsed >= MIN_PROBE_SECONDS or elapsed >= self.max_seconds):
            seconds, work = predict(self.n, self.seconds, self.candidates, self.points)
            if self.first_prediction is None:
                self.first_prediction = {"after_seconds": round(elapsed, 1), "diagonals": diag,
                                         "predicted_seconds": round(seconds, 1),
                                         "predicted_candidates": float(f"{work:.3g}")}
            if seconds > self.max_seconds:
                raise Skip(seconds, work, diag)


def run_exact(chain: Chain, max_bytes, max_seconds: float) -> dict:
    watch = Watch(chain.n, max_seconds)
    started = time.perf_counter()
    try:
        fronts = exact.solve_fronts(chain, max_bytes=max_bytes, on_diagonal=watch)
    except Skip as skip:
        return {"skipped": True, "predicted_seconds": round(skip.predicted, 1),
                "predicted_candidates": float(f"{skip.candidates:.3g}"),
                "probed_seconds": round(time.perf_counter() - started, 1), "diagonals_done": skip.diag}
    except MemoryError as err:
        return {"skipped": True, "memory_error": str(err), "probed_seconds": round(time.perf_counter() - started, 1)}
    seconds = time.perf_counter() - started
    stats = fronts.stats
    return {"skipped": False, "seconds": round(seconds, 3), "prediction_while_running": watch.first_prediction,
            "max_front": stats["max_front"],
            "mean_front": round(stats["mean_front"], 1), "front_0N": stats["front_0N"],
            "points": stats["points"], "candidates": stats["candidates"],
            "stored_MiB": round(stats["stored_bytes"] / 2**20, 1), "fronts": fronts}


def check_estimator(chain: Chain, full_seconds: float, full_candidates: int, fraction: float = 0.5) -> dict:
    """Predict the complete run from its first ``fraction`` of diagonals, to compare with the truth."""
    stop = max(2, int(chain.n * fraction))
    watch = Watch(chain.n, math.inf, stop_after=stop)
    try:
        exact.solve_fronts(chain, on_diagonal=watch)
    except Skip as skip:
        return {"diagonals_used": stop, "predicted_seconds": round(skip.predicted, 2),
                "measured_seconds": round(full_seconds, 2), "predicted_candidates": float(f"{skip.candidates:.3g}"),
                "measured_candidates": full_candidates}
    return {}


def bucketed(chain: Chain, budget: int) -> dict:
    started = time.perf_counter()
    plan = solve(chain, budget, backend="cpu", strict=False, progress=False)
    seconds = time.perf_counter() - started
    curve = getattr(plan, "curve", None)
    table = float(curve.time_ms[-1]) if curve is not None and len(curve.time_ms) else math.inf
    return {"seconds": round(seconds, 3), "bucket_bytes": plan.bucket_bytes,
            "time_ms": plan.predicted_time_ms if plan.feasible else None,
            # the table's own optimum at the budget, before solve()'s exact-byte candidates
            "table_ms": table if math.isfinite(table) else None, "notes": list(getattr(plan, "notes", []))}


def excess(bucket_ms, exact_ms):
    if bucket_ms is None or exact_ms is None or not math.isfinite(exact_ms):
        return None
    return bucket_ms / exact_ms - 1.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=120.0,
                        help="skip exact runs predicted to take longer (default 120)")
    parser.add_argument("--max-seconds-capped", type=float, default=None,
                        help="the same limit for the max_bytes runs (default: --max-seconds)")
    parser.add_argument("--profiles", nargs="*", default=None, help="profile names (default: all bundled)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--no-estimator-check", action="store_true",
                        help="skip re-running densenet121_b64 to check the time predictor")
    args = parser.parse_args(argv)
    names = args.profiles or sorted(p.stem for p in PROFILE_DIR.glob("*.json"))
    command = "python " + " ".join([os.path.relpath(__file__, ROOT)] + (argv if argv is not None else sys.argv[1:]))
    device = cpu_description()
    instances = [(name, True) for name in names]
    if "densenet121_b64" in names:
        instances.append(("densenet121_b64", False))
    records = []
    load_start = _load_average()
    for name, fused in instances:
        chain = Chain.from_profile(PROFILE_DIR / f"{name}.json", fuse_aliasing=fused)
        store_peak = simulate(chain, store_all(chain)).peak_bytes
        minimum = min_feasible_bytes(chain)
        budget = max(store_peak // 2, math.ceil(1.1 * minimum))
        record = {"instance": name + ("" if fused else " (unfused)"), "stages": chain.n, "fused": fused,
                  "store_all_peak_bytes": store_peak, "min_feasible_bytes": minimum, "budget_bytes": budget,
                  "budget_rule": "50 % of store-all" if budget == store_peak // 2 else "1.1 x minimum",
                  "store_all_ms": store_all_time_ms(chain)}
        for mode, max_bytes in (("full", None), ("max_bytes", budget)):
            capped = args.max_seconds_capped
            limit = args.max_seconds if max_bytes is None or capped is None else capped
            result = run_exact(chain, max_bytes, limit)
            fronts = result.pop("fronts", None)
            if fronts is not None:
                targets = [("budget", budget)] + ([("store_all_peak", store_peak)] if max_bytes is None else [])
                for label, b in targets:
                    result[f"exact_ms_at_{label}"] = fronts.value(b)
                if mode == "full":
                    record["estimator_check"] = (check_estimator(chain, result["seconds"], result["candidates"])
                                                 if name == "densenet121_b64" and fused and not args.no_estimator_check
                                                 else None)
            record[mode] = result
            status = (f"{result['seconds']:8.2f} s  max front {result['max_front']:5d}  "
                      f"mean {result['mean_front']:7.1f}"
                      if not result["skipped"] else f"skipped: {result.get('predicted_seconds', 'memory')} s predicted")
            print(f"{record['instance']:30s} N={chain.n:4d} {mode:9s} {status}", flush=True)
        exact_budget = record["full"].get("exact_ms_at_budget", record["max_bytes"].get("exact_ms_at_budget"))
        exact_store = record["full"].get("exact_ms_at_store_all_peak")
        for label, b, exact_ms in (("budget", budget, exact_budget), ("store_all_peak", store_peak, exact_store)):
            cpu = bucketed(chain, b)
            cpu["excess_over_exact"] = excess(cpu["time_ms"], exact_ms)
            cpu["table_excess_over_exact"] = excess(cpu["table_ms"], exact_ms)
            record[f"cpu_at_{label}"] = cpu
            print(f"{'':30s} cpu bucketed at {label}: {cpu['seconds']:.2f} s, {cpu['time_ms']} ms vs exact {exact_ms}",
                  flush=True)
        records.append(record)
    meta = {"device": device, "date": dt.date.today().isoformat(), "command": command,
            "load_average_start_end": [load_start, _load_average()],
            "max_seconds": args.max_seconds,
            "max_seconds_capped": args.max_seconds_capped if args.max_seconds_capped is not None else args.max_seconds,
            "numpy": np.__version__,
            "note": "exact-DP times are float64; the bucketed CPU table is float32. The bucketed budget is "
                    "floor(budget / bucket) buckets of budget / 1024 bytes (rounded up) with sizes rounded up."}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "exact_speed.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n")
    (out / "exact_speed.md").write_text(markdown(meta, records))
    return 0


def _fmt_exact(r: dict) -> tuple[str, str, str, str]:
    if r["skipped"]:
        if "predicted_seconds" in r:
            why = (f"skipped: predicted {r['predicted_seconds']:.0f} s, {r['predicted_candidates']:.3g} candidates "
                   f"(probed {r['probed_seconds']:.0f} s, {r['diagonals_done']} diagonals)")
        else:
            why = f"skipped: {r['memory_error']}"
        return why, "", "", ""
    return f"{r['seconds']:.2f}", str(r["max_front"]), f"{r['mean_front']:.1f}", str(r["front_0N"])


def markdown(meta: dict, records: list[dict]) -> str:
    lines = ["# Exact DP (Pareto fronts, no buckets) vs the bucketed CPU backend", "",
             f"- device: {meta['device']}", f"- date: {meta['date']}", f"- command: `{meta['command']}`",
             f"- numpy {meta['numpy']}; exact-DP times are float64, the bucketed table float32",
             f"- 1-minute load average at start and end: {meta['load_average_start_end']} (shared machine: "
             f"wall-clock seconds grow with the load of other jobs; candidate counts do not)",
             "- budget: 50 % of the store-all peak, or 1.1 x the minimum feasible budget where that is higher; "
             "`max_bytes` runs drop front points above it",
             f"- runs predicted to exceed {meta['max_seconds']:.0f} s "
             f"({meta['max_seconds_capped']:.0f} s with max_bytes) "
             f"are stopped and skipped with the prediction "
             f"after {MIN_PROBE_SECONDS:.0f} s of probing (mean front size per diagonal extrapolated as a * d^p, "
             f"candidates counted from it, seconds per candidate and per pair fitted on the diagonals done); "
             f"fronts that keep growing after the diagonals probed (complete fronts, no max_bytes) make it a low "
             f"estimate", "",
             "## Exact DP: time and front sizes (points per front F(i, j))", "",
             "| instance | stages | fronts | solve (s) | max front | mean front | front (0, N) | candidates |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for rec in records:
        for mode, label in (("full", "complete"), ("max_bytes", f"max_bytes = {format_bytes(rec['budget_bytes'])}")):
            r = rec[mode]
            seconds, max_front, mean_front, front = _fmt_exact(r)
            cand = f"{r['candidates']:.3g}" if not r["skipped"] else ""
            lines.append(f"| {rec['instance']} | {rec['stages']} | {label} | {seconds} | {max_front} | {mean_front} | "
                         f"{front} | {cand} |")
    lines += ["", "## Optimal step time: exact vs bucketed "
              "(`solve(..., backend=\"cpu\")`, default bucket = budget / 1024)",
              "", "`solve()` may return an exact-byte candidate faster than its table's optimum (Note [Exact "
              "candidates] in gpusolve/solve.py); \"table\" is the bucketed table's own optimum at the budget "
              "(the last value of `plan.curve`).", "",
              "| instance | budget | exact (ms) | solve() cpu (ms) | over exact | table (ms) | table over exact "
              "| cpu solve (s) |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for rec in records:
        for label, b, key in (("budget", rec["budget_bytes"], "exact_ms_at_budget"),
                              ("store_all_peak", rec["store_all_peak_bytes"], "exact_ms_at_store_all_peak")):
            cpu = rec[f"cpu_at_{label}"]
            exact_ms = rec["full"].get(key, rec["max_bytes"].get(key) if label == "budget" else None)
            name = f"{format_bytes(b)} ({'store-all peak' if label == 'store_all_peak' else rec['budget_rule']})"
            ex = "skipped" if exact_ms is None else ("infeasible" if not math.isfinite(exact_ms) else f"{exact_ms:.3f}")
            bt = "infeasible" if cpu["time_ms"] is None else f"{cpu['time_ms']:.3f}"
            over = "" if cpu["excess_over_exact"] is None else f"{100 * cpu['excess_over_exact']:+.3f} %"
            table = "infeasible" if cpu["table_ms"] is None else f"{cpu['table_ms']:.3f}"
            table_excess = cpu["table_excess_over_exact"]
            table_over = "" if table_excess is None else f"{100 * table_excess:+.3f} %"
            lines.append(f"| {rec['instance']} | {name} | {ex} | {bt} | {over} | {table} | {table_over} | "
                         f"{cpu['seconds']:.2f} |")
    checks = [(rec["instance"], rec.get("estimator_check")) for rec in records if rec.get("estimator_check")]
    running = [(rec["instance"], mode, rec[mode]) for rec in records for mode in ("full", "max_bytes")
               if not rec[mode]["skipped"] and rec[mode].get("prediction_while_running")]
    if checks or running:
        lines += ["", "## Time predictor check", ""]
        for name, mode, r in running:
            c = r["prediction_while_running"]
            lines.append(f"- {name} ({mode}): after {c['after_seconds']:.0f} s ({c['diagonals']} diagonals) predicted "
                         f"{c['predicted_seconds']:.0f} s and {c['predicted_candidates']:.3g} candidates; measured "
                         f"{r['seconds']:.0f} s and {r['candidates']:.3g} candidates")
        for name, c in checks:
            lines.append(f"- {name}: from its first {c['diagonals_used']} diagonals "
                         f"predicted {c['predicted_seconds']:.2f} s "
                         f"and {c['predicted_candidates']:.3g} candidates; measured {c['measured_seconds']:.2f} s and "
                         f"{c['measured_candidates']:.3g} candidates")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
