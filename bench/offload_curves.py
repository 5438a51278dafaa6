"""Recompute only vs offload only vs combined, simulated on the bundled H100 profiles.

For each profile and link: the three curves of ``gpusolve curve --offload`` (PNG), and at 50 / 35 / 25 %
of the store-all peak the rows of ``gpusolve compare --offload``: the combined DP (recompute + Swap k),
the chain DP (recompute only) and the seed paper's offload-only algorithms (GREEDY, DYNPROG S = 500,
VDNN; their own model, Note [One budget, two models] in ``gpusolve/offload/compare.py``). Times are
*simulated* step times on the profiles' measured stage times; the links are assumptions:

- 12.2 GB/s: [O]'s measured V100-PCIE figure (device to host);
- 50 GB/s: an assumed PCIe 5.0 x16 order of magnitude for an H100 host link, not measured here
  (``torch_exec.offload.measure_link`` measures it on a GPU);
- unlimited bandwidth, no latency: free copies, the most ``Swap k`` can give (not a real machine;
  the paper's model has no meaning there).

On the finite links each row also gets the any-window bound (Note [Any-window bound] in
``gpusolve/offload/dp.py``): the least time any widening of Swap k's copy windows (spec phase 2) could
reach, i.e. whether building wider windows can pay.

    python bench/offload_curves.py [--out bench/results] [--profiles resnet50_b128,...]
    python bench/offload_curves.py --link-json link_measured.json --profiles resnet50_b128,densenet121_b64
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_description  # noqa: E402
from gpusolve import Chain  # noqa: E402
from gpusolve.offload import Link, solve_offload  # noqa: E402
from gpusolve.schedule import OpKind  # noqa: E402
from gpusolve.offload.dp import window_bound  # noqa: E402
from gpusolve.offload.compare import PAPER_METHODS, offload_curve_data, offload_records, plot_offload_curves  # noqa: E402
from gpusolve.simulate import store_all_peak_bytes  # noqa: E402

PROFILES = ["resnet50_b128", "densenet121_b64", "densenet121_fine_b32"]
LINKS = {"12.2GB/s": ("12.2GB/s", "[O]'s measured V100-PCIE device-to-host figure"),
         "50GB/s": ("50GB/s", "assumed PCIe 5.0 x16 order of magnitude, not measured"),
         "free": ("inf", "unlimited bandwidth, no latency: the most Swap can give (not a real link)")}
PERCENTS = (50, 35, 25)


def link_of(spec) -> Link:
    """A link from a rate string ("12.2GB/s", "inf") or a dict (``measure_link``'s JSON)."""
    return Link.from_dict(spec) if isinstance(spec, dict) else Link.parse(spec)


def run(profile: str, key: str, out: Path) -> dict:
    chain = Chain.load(profile)
    spec, why = LINKS[key]
    link = link_of(spec)
    top = store_all_peak_bytes(chain)
    t = time.perf_counter()
    data = offload_curve_data(chain, link, backend="cpu")
    curve_s = time.perf_counter() - t
    png = out / f"offload_curves_{profile}_{key.replace('/', '').replace('.', 'p')}.png"
    plot_offload_curves(data, png)
    rows = []
    for pct in PERCENTS:
        budget = int(top * pct / 100)
        t = time.perf_counter()
        recs = offload_records(chain, budget, link, backend="cpu")
        by = {r["name"]: r for r in recs}
        paper = [by[n] for n in PAPER_METHODS if by[n]["feasible"] and by[n]["time_ms"] is not None]
        best = min(paper, key=lambda r: r["time_ms"]) if paper else None
        swap_k, bound = (None, None) if key == "free" else window_bound(chain, budget, link)
        rows.append({"percent": pct, "budget_bytes": budget, "seconds": time.perf_counter() - t,
                     "combined": by["combined (gpusolve)"], "recompute": by["recompute only (gpusolve)"],
                     "offload_only_best": best, "paper": {n: by[n] for n in PAPER_METHODS},
                     "swap_k_dp_ms": swap_k, "window_bound_ms": bound})
    return {"profile": profile, "link": key, "link_note": why, "link_dict": link.to_dict(),
            "store_all_peak_bytes": top, "store_all_time_ms": data["store_all_time_ms"],
            "combined_min_bytes": data["min_feasible_bytes"], "bucket_bytes": data["bucket_bytes"],
            "curve_seconds": curve_s, "plot": png.name, "rows": rows, "curves": data}


def _cell(rec: dict | None) -> str:
    if rec is None or not rec["feasible"] or rec["time_ms"] is None:
        return "infeasible"
    return f"{rec['time_ms']:.2f} ({100 * rec['overhead']:+.1f} %)"


def _bound(row: dict) -> str:
    b, k = row["window_bound_ms"], row["swap_k_dp_ms"]
    if b is None:
        return "= combined"
    return "infeasible" if not math.isfinite(b) else f"{b:.2f} ({b - k:+.2f})"


def write_md(doc: dict, path: Path) -> None:
    lines = ["# Recompute only vs offload only vs combined (simulated)", "",
             f"- device: {doc['device']} (solvers on the CPU; times are *simulated* step times on the bundled "
             "H100 profiles' measured stage times, not runs)",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`",
             "- combined = `solve_offload` (recompute + Swap k, one FIFO copy channel), recompute only = `solve` "
             "(the chain DP), offload only = best of [O]'s GREEDY, DYNPROG (S = 500), VDNN in [O]'s model "
             "(store-all, whole tapes offloaded; Note [One budget, two models] in gpusolve/offload/compare.py)",
             "- bucket: budget / 1024 for both DPs; every combined plan re-simulated on two timelines, peak <= budget",
             "- links: " + "; ".join(f"{k}: {v[1]}" for k, v in LINKS.items()),
             "- any-window bound: the least time any wider copy window for Swap k could reach (Note [Any-window "
             "bound] in gpusolve/offload/dp.py; a bound, not a plan; over a free link it equals combined). In "
             "parentheses its difference from the Swap k DP on the same discretised problem (bucket budget / "
             "1024): what wider windows could gain. The combined column is the front end's plan (exact-byte "
             "candidates), so it can differ from that DP value by the rounding", ""]
    for profile in dict.fromkeys(r["profile"] for r in doc["results"]):
        runs = [r for r in doc["results"] if r["profile"] == profile]
        first = runs[0]
        lines += [f"## {profile}", "",
                  f"store-all {first['store_all_time_ms']:.2f} ms, peak {first['store_all_peak_bytes'] / 2**30:.2f} GiB", "",
                  "| link | budget | combined | swaps | any-window bound (vs Swap k) | recompute only | offload only (best of [O]) | "
                  "combined min budget |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in runs:
            for row in r["rows"]:
                best = row["offload_only_best"]
                name = "" if best is None else f" {best['name'].replace(' [O]', '')}"
                lines.append(f"| {r['link']} | {row['percent']} % | {_cell(row['combined'])} | "
                             f"{row['combined']['detail'].get('swaps', '-')} | {_bound(row)} | {_cell(row['recompute'])} | "
                             f"{_cell(best)}{name} | {r['combined_min_bytes'] / 2**30:.2f} GiB |")
        lines += [""] + [f"![{profile} {r['link']}]({r['plot']})" for r in runs] + [""]
    lines += ["## Findings", ""] + [f"- {f}" for f in doc["findings"]] + [""]
    path.write_text("\n".join(lines))


def traffic_check(profile: str, budget: int, link: Link) -> str:
    """Is the any-window bound within the link's capacity? The bound ignores that nested copies share the
    channel; the free-copies plan (the swaps the bound would need) must at least move its bytes within
    the step."""
    chain = Chain.load(profile)
    plan = solve_offload(chain, budget, Link.parse("inf"), backend="cpu")
    act = chain.padded()["act_bytes"]
    moved = sum(int(act[op.stage]) for op in plan.schedule if op.kind is OpKind.OFFLOAD)
    d2h, h2d = moved / link.d2h_bytes_per_ms, moved / link.h2d_bytes_per_ms
    return (f"check of that bound: the free-copies plan ({profile}, budget {budget} B) swaps {plan.swaps} "
            f"checkpoints, {moved / 1e9:.2f} GB each way: {d2h:.1f} ms out and {h2d:.1f} ms back on this link, in a "
            f"{plan.predicted_time_ms:.2f} ms step (one copy channel busy {(d2h + h2d) / plan.predicted_time_ms:.0%} "
            f"of it)")


def findings(results: list[dict]) -> list[str]:
    out = []
    gains = []
    for r in results:
        for row in r["rows"]:
            c, p = row["combined"], row["recompute"]
            if c["feasible"] and p["feasible"]:
                gains.append((p["time_ms"] - c["time_ms"], r["profile"], r["link"], row["percent"], c, p))
                if c["time_ms"] > p["time_ms"] * (1 + 1e-6):
                    out.append(f"combined slower than recompute only: {r['profile']} {r['link']} {row['percent']} % "
                               f"({c['time_ms']:.3f} vs {p['time_ms']:.3f} ms)")
    real = [g for g in gains if g[2] != "free"]
    best = max(real, key=lambda g: g[0]) if real else None
    if best is not None:
        out.append(f"largest gain of combined over recompute only on a finite link: {best[0]:.2f} ms "
                   f"({best[1]}, {best[2]}, {best[3]} %: {best[5]['time_ms']:.2f} -> {best[4]['time_ms']:.2f} ms)")
    free = [g for g in gains if g[2] == "free"]
    if free:
        top = max(free, key=lambda g: g[0])
        out.append(f"with free copies (upper bound of Swap k): up to {top[0]:.2f} ms ({top[1]}, {top[3]} %: "
                   f"{top[5]['time_ms']:.2f} -> {top[4]['time_ms']:.2f} ms)")
    room = [(row["swap_k_dp_ms"] - row["window_bound_ms"], r["profile"], r["link"], row["percent"], row)
            for r in results for row in r["rows"] if row["window_bound_ms"] is not None
            and math.isfinite(row["window_bound_ms"]) and row["combined"]["feasible"]]
    if room:
        top = max(room, key=lambda g: g[0])
        out.append(f"wider copy windows (phase 2) could gain at most {top[0]:.2f} ms over Swap k on a finite link "
                   f"({top[1]}, {top[2]}, {top[3]} %: Swap k DP {top[4]['swap_k_dp_ms']:.2f} ms, any-window "
                   f"bound {top[4]['window_bound_ms']:.2f} ms)")
        out.append(traffic_check(top[1], top[4]["budget_bytes"], link_of(LINKS[top[2]][0])))
        for key in dict.fromkeys(g[2] for g in room):
            best = max((g for g in room if g[2] == key), key=lambda g: g[0])
            out.append(f"on {key}: wider windows could gain at most {best[0]:.2f} ms ({best[1]}, {best[3]} %)")
    # Note [Never slower than recompute only]: what the reference solve costs, and where it is the plan
    cost = [row["combined"]["detail"]["timings"]["recompute_only"] / row["combined"]["detail"]["timings"]["dp"]
            for r in results for row in r["rows"] if "recompute_only" in row["combined"]["detail"].get("timings", {})]
    if cost:
        taken = [f"{r['profile']} {r['link']} {row['percent']} %" for r in results for row in r["rows"]
                 if row["combined"]["detail"].get("recompute_only_decided")]
        out.append(f"the recompute-only reference solve took {min(cost):.2f}-{max(cost):.2f} x the offload fill's "
                   f"time (Note [Never slower than recompute only]); its plan was the faster one in exact bytes in "
                   f"{len(taken)} of {len(cost)} rows" + (f" ({', '.join(taken)})" if taken else ""))
    wins = sum(1 for r in results for row in r["rows"] if row["offload_only_best"] is not None
               and row["combined"]["feasible"] and row["offload_only_best"]["time_ms"] < row["combined"]["time_ms"])
    total = sum(1 for r in results for row in r["rows"] if row["offload_only_best"] is not None)
    out.append(f"offload only (best of [O]) beats combined in {wins} of {total} rows where it has a schedule")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--link-json", type=Path,
                    help="only this link: the JSON of torch_exec.offload.measure_link (e.g. from bench/gpu_session.py's "
                         "link step); results go to offload_curves_measured.{json,md}")
    args = ap.parse_args()
    stem = "offload_curves"
    if args.link_json is not None:
        data = json.loads(args.link_json.read_text())
        LINKS.clear()
        LINKS["measured"] = (data, f"measured by measure_link on {data.get('device', 'the GPU')} "
                                   f"({args.link_json.name})")
        stem = "offload_curves_measured"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    results = []
    for profile in args.profiles.split(","):
        for key in LINKS:
            results.append(run(profile, key, out))
            print(f"{profile} {key}: {results[-1]['curve_seconds']:.1f} s", flush=True)
    doc = {"device": f"CPU only: {cpu_description()}, {platform.platform()}",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "python bench/offload_curves.py " + " ".join(sys.argv[1:]),
           "percents": list(PERCENTS), "results": results}
    doc["findings"] = findings(results)
    doc["seconds"] = time.perf_counter() - t0
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=lambda v: None if isinstance(v, float)
                                                        and not math.isfinite(v) else str(v)))
    write_md(doc, out / f"{stem}.md")
    for f in doc["findings"]:
        print(f)
    print(f"total {doc['seconds']:.1f} s")


if __name__ == "__main__":
    main()
