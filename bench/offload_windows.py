"""Wider copy windows for Swap k: what the one the DP can price exactly gains, against the any-window bound.

For each profile, link and budget (50 / 35 / 25 % of the store-all peak), on one discretised problem
(bucket = budget / 1024, as ``solve_offload``), the top value C(0, N, M, 0) of:

- recompute only: the chain DP (``gpusolve.dp.cpu.solve_table``);
- Swap k: the combined DP as shipped (copies overlap the no-grad forwards and bwd(k+1));
- inner window: Swap k plus Note [Inner window]'s candidate (``gpusolve/offload/dp.py``: a_i on the host
  only while the right part's right part runs; the copies overlap every no-grad forward to a_k2 and the
  whole recompute-only solve of (k, k2)); exact for its schedule (``tests/test_offload_windows.py``),
  O(N^4 M), so not run on ``densenet121_fine_b32``;
- any-window bound (Note [Any-window bound]): no schedule of the class "a_i on the host while the right
  part runs" can do better on the same discretised problem (sizes rounded up to the bucket), whatever
  its windows. A schedule in exact bytes can: at a finer bucket the bound may drop a little (``--hoist``
  found 103.33 ms under a 103.36 ms bound on ResNet-50 at 12.2 GB/s, 25 %).

"closed" is the share of the gap between Swap k and the bound that the inner window closes.

With ``--hoist``, an *achievable* figure beside the bound: plans the combined DP solves for a faster
virtual link (1.4x and 2x the real one) and its plan for the real link, each simulated over the real
link after a local search that moves every ``prefetch`` earlier and every ``release`` later (one op at
a time, to the position that lowers the simulated time most, until none does) with the peak within
the budget: schedules with wider windows than Swap k's, checked by the simulator (time and peak), not
optimal, and achievable in the simulator's model (the executor has not run such schedules: a
prefetch moved into a run of tapes changes how it splits the run into autograd segments).

Times are *simulated* (DP values and two-timeline simulations on the profiles' measured H100 stage
times), not runs.

    python bench/offload_windows.py [--out bench/results] [--profiles resnet50_b128,densenet121_b64]
        [--link 50GB/s] [--link-json bench/results/gpu_runs/.../link_measured.json] [--hoist]
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, cpu_description  # noqa: E402
from gpusolve import Chain  # noqa: E402
from gpusolve.dp.cpu import solve_table  # noqa: E402
from gpusolve.dp.problem import Problem  # noqa: E402
from gpusolve.offload import Link, solve_offload  # noqa: E402
from gpusolve.offload.dp import SwapArrays, solve_tables  # noqa: E402
from gpusolve.schedule import OpKind  # noqa: E402
from gpusolve.simulate import ScheduleError, simulate, store_all_peak_bytes  # noqa: E402

PERCENTS = (50, 35, 25)
VIRTUAL = (1.4, 2.0)  # --hoist: plans solved for these multiples of the real link's bandwidths


def fit_time(chain: Chain, ops: list, budget: int, link: Link) -> float:
    """Simulated time (ms) of ``ops`` over ``link``; inf where its peak exceeds ``budget`` or the order is
    not a schedule (a prefetch before its release, a release after its prefetch)."""
    try:
        r = simulate(chain, ops, link=link)
    except ScheduleError:
        return float("inf")
    return r.time_ms if r.peak_bytes <= budget else float("inf")


def hoisted(chain: Chain, schedule: list, budget: int, link: Link) -> tuple[float, list]:
    """The local search of the module docstring on ``schedule`` over ``link``: (simulated time in ms,
    schedule) after moving prefetches earlier and releases later within ``budget``; inf if it does not
    fit as is."""
    def time_of(ops) -> float:
        return fit_time(chain, ops, budget, link)

    ops, best = list(schedule), time_of(schedule)
    improved = np.isfinite(best)
    while improved:
        improved = False
        for at, op in enumerate(ops):
            if op.kind not in (OpKind.PREFETCH, OpKind.RELEASE):
                continue
            rest = ops[:at] + ops[at + 1:]
            targets = range(at - 1, -1, -1) if op.kind is OpKind.PREFETCH else range(at + 1, len(ops))
            found = min(((time_of(rest[:to] + [op] + rest[to:]), to) for to in targets), default=(best, at))
            if found[0] < best:
                best, ops, improved = found[0], rest[:found[1]] + [op] + rest[found[1]:], True
                break
    return best, ops


def achievable(chain: Chain, budget: int, link: Link) -> dict:
    """The best :func:`hoisted` time over the plans for the real link and for :data:`VIRTUAL` faster ones."""
    out = {}
    for factor in (1.0, *VIRTUAL):
        virtual = Link(link.d2h_bytes_per_ms * factor, link.h2d_bytes_per_ms * factor, link.latency_ms)
        plan = solve_offload(chain, budget, virtual, backend="cpu")
        out[str(factor)] = {"swaps": plan.swaps, "as_emitted": fit_time(chain, plan.schedule, budget, link),
                            "hoisted": hoisted(chain, plan.schedule, budget, link)[0]}
    return out


def row(chain: Chain, percent: int, link: Link, hoist: bool = False) -> dict:
    budget = store_all_peak_bytes(chain) * percent // 100
    bucket = max(1, budget // 1024)
    problem = Problem.build(chain, bucket, budget // bucket)
    top = problem.row(0, problem.n), problem.buckets
    swap = SwapArrays.build(problem, chain, link)
    started = time.perf_counter()
    recompute = solve_table(problem)
    values, seconds = {"recompute": float(recompute[top])}, {}
    for windows in ("bwd", "inner", "any"):
        clock = time.perf_counter()
        planes = solve_tables(problem, swap, windows=windows, recompute=recompute if windows == "inner" else None)
        values[windows] = float(planes[0][top])
        seconds[windows] = time.perf_counter() - clock
    gap = values["bwd"] - values["any"]
    out = {"percent": percent, "budget_bytes": budget, "bucket_bytes": bucket, **values,
           "closed": (values["bwd"] - values["inner"]) / gap if gap > 0 else None, "seconds": seconds}
    if hoist:
        clock = time.perf_counter()
        out["achievable"] = achievable(chain, budget, link)
        seconds["hoist"] = time.perf_counter() - clock
    out["total_seconds"] = time.perf_counter() - started
    return out


def write_md(doc: dict, path: Path) -> None:
    lines = ["# Wider copy windows: the inner window against Swap k and the any-window bound (simulated)", "",
             f"- device: {doc['device']} (solvers on the CPU; DP values on the bundled H100 profiles' stage times, "
             "not runs)", f"- date: {doc['date']}", f"- command: `{doc['command']}`",
             "- bucket: budget / 1024; all four values from the same discretised problem; ms", ""]
    for block in doc["results"]:
        lines += [f"## {block['profile']}, {block['link_name']}", "",
                  "| budget | recompute only | Swap k | inner window | any-window bound | inner gains | closed | "
                  "inner fill s |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in block["rows"]:
            closed = "-" if r["closed"] is None else f"{100 * r['closed']:.0f} %"
            lines.append(f"| {r['percent']} % | {r['recompute']:.2f} | {r['bwd']:.2f} | {r['inner']:.2f} | "
                         f"{r['any']:.2f} | {r['bwd'] - r['inner']:.2f} | {closed} | {r['seconds']['inner']:.1f} |")
        lines.append("")
        if all("achievable" in r for r in block["rows"]):
            lines += ["Achievable with wider windows (`--hoist`): simulated over this link, peak within the budget; "
                      "swaps / as emitted / after the local search, per plan (solved for x the real link):", "",
                      "| budget | " + " | ".join(f"plan for {f}x" for f in ("1.0", *map(str, VIRTUAL))) +
                      " | best | vs the solver's plan |", "| ---: |" + " ---: |" * (len(VIRTUAL) + 3)]
            for r in block["rows"]:
                cells = [f"{a['swaps']} / {a['as_emitted']:.2f} / {a['hoisted']:.2f}" for a in r["achievable"].values()]
                best = min(a["hoisted"] for a in r["achievable"].values())
                shipped = r["achievable"]["1.0"]["as_emitted"]
                lines.append(f"| {r['percent']} % | " + " | ".join(cells) + f" | {best:.2f} | {best - shipped:+.2f} |")
            lines.append("")
    lines += ["## Findings", ""] + [f"- {f}" for f in doc["findings"]]
    path.write_text("\n".join(lines) + "\n")


def findings(results: list[dict]) -> list[str]:
    rows = [(b, r) for b in results for r in b["rows"]]
    out = []
    b, r = max(rows, key=lambda br: br[1]["bwd"] - br[1]["inner"])
    out.append(f"largest gain of the inner window over Swap k: {r['bwd'] - r['inner']:.2f} ms "
               f"({100 * (r['bwd'] - r['inner']) / r['bwd']:.2f} % of the step; {b['profile']}, {b['link_name']}, "
               f"{r['percent']} %: {r['bwd']:.2f} -> {r['inner']:.2f} ms)")
    b, r = max(rows, key=lambda br: br[1]["bwd"] - br[1]["any"])
    out.append(f"largest room under Swap k left by the bound: {r['bwd'] - r['any']:.2f} ms ({b['profile']}, "
               f"{b['link_name']}, {r['percent']} %), of which the inner window takes {r['bwd'] - r['inner']:.2f} ms")
    hoisted_rows = [(b, r, min(a["hoisted"] for a in r["achievable"].values()), r["achievable"]["1.0"]["as_emitted"])
                    for b, r in rows if "achievable" in r]
    if hoisted_rows:
        b, r, best, shipped = min(hoisted_rows, key=lambda t: t[2] - t[3])
        out.append(f"largest gain of a schedule with wider windows found by the local search (--hoist) over the "
                   f"solver's plan: {shipped - best:.2f} ms ({shipped:.2f} -> {best:.2f} ms; the bound: {r['any']:.2f}; "
                   f"{b['profile']}, {b['link_name']}, {r['percent']} %)")
    slow = max(rows, key=lambda br: br[1]["seconds"]["inner"] / max(br[1]["seconds"]["bwd"], 1e-9))
    out.append(f"the inner fill took up to {slow[1]['seconds']['inner'] / max(slow[1]['seconds']['bwd'], 1e-9):.0f}x "
               f"the Swap k fill ({slow[0]['profile']}, {slow[1]['percent']} %)")
    return out


def run_study(script: str, doc: str, row_of, summary_of, findings_of, write_md_of, extra_args=None) -> None:
    """The command line of this script and of ``bench/offload_tapes.py``: for each profile and link (``--link``
    rates, ``--link-json`` measured links; 50 GB/s by default), ``row_of(chain, percent, link, args)`` at
    each of :data:`PERCENTS`, printed with ``summary_of(row)``; the record ``<out>/<script stem>_cpu.json``
    (device, date, command, results, ``findings_of(results)``) and its ``.md`` (``write_md_of``)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--profiles", default="resnet50_b128,densenet121_b64")
    ap.add_argument("--link", action="append", default=None, help="a rate such as 50GB/s or inf (repeatable)")
    ap.add_argument("--link-json", type=Path, action="append", default=[],
                    help="a link measured by torch_exec.offload.measure_link (repeatable)")
    if extra_args is not None:
        extra_args(ap)
    args = ap.parse_args()
    try:  # every input read before anything runs: a bad one is one line and exit 2
        links = [(spec, Link.parse(spec)) for spec in (args.link or ([] if args.link_json else ["50GB/s"]))]
        for path in args.link_json:
            data = json.loads(path.read_text())
            try:
                links.append((f"measured on {data.get('device', 'a GPU')} ({path.name})", Link.from_dict(data)))
            except KeyError as err:
                raise ValueError(f"{path}: no field {err} (torch_exec.offload.measure_link writes a link's JSON)")
        chains = [(profile, Chain.load(profile)) for profile in args.profiles.split(",")]
    except (OSError, ValueError) as err:
        ap.exit(2, f"{ap.prog}: {err}\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = []
    for profile, chain in chains:
        for name, link in links:
            rows = [row_of(chain, p, link, args) for p in PERCENTS]
            results.append({"profile": profile, "link_name": name, "link": link.to_dict(), "rows": rows})
            print(f"{profile} {name}: " + ", ".join(summary_of(r) for r in rows), flush=True)
    record = {"device": f"CPU only: {cpu_description()}, {platform.platform()}",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": command_line(script), "results": results}
    record["findings"] = findings_of(results)
    record["seconds"] = time.perf_counter() - started
    stem = Path(script).stem + "_cpu"
    (out / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    write_md_of(record, out / f"{stem}.md")
    for f in record["findings"]:
        print(f)


def main() -> None:
    def hoist(ap):
        ap.add_argument("--hoist", action="store_true",
                        help="also the achievable figure of the local search (module docstring; minutes on densenet121_b64)")

    run_study("offload_windows.py", __doc__, lambda chain, p, link, args: row(chain, p, link, args.hoist),
              lambda r: f"{r['percent']} % {r['bwd']:.2f}/{r['inner']:.2f}/{r['any']:.2f}", findings, write_md, hoist)


if __name__ == "__main__":
    main()
