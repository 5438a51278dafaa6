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
  part runs" can do better, whatever its windows.

"closed" is the share of the gap between Swap k and the bound that the inner window closes. Times are
*simulated* (DP values on the profiles' measured H100 stage times), not runs.

    python bench/offload_windows.py [--out bench/results] [--profiles resnet50_b128,densenet121_b64]
        [--link 50GB/s] [--link-json bench/results/gpu_runs/.../link_measured.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, cpu_description  # noqa: E402
from gpusolve import Chain  # noqa: E402
from gpusolve.dp.cpu import solve_table  # noqa: E402
from gpusolve.dp.problem import Problem  # noqa: E402
from gpusolve.offload import Link  # noqa: E402
from gpusolve.offload.dp import SwapArrays, solve_tables  # noqa: E402
from gpusolve.simulate import store_all_peak_bytes  # noqa: E402

PERCENTS = (50, 35, 25)


def row(chain: Chain, percent: int, link: Link) -> dict:
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
    return {"percent": percent, "budget_bytes": budget, "bucket_bytes": bucket, **values,
            "closed": (values["bwd"] - values["inner"]) / gap if gap > 0 else None,
            "seconds": seconds, "total_seconds": time.perf_counter() - started}


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
    slow = max(rows, key=lambda br: br[1]["seconds"]["inner"] / max(br[1]["seconds"]["bwd"], 1e-9))
    out.append(f"the inner fill took up to {slow[1]['seconds']['inner'] / max(slow[1]['seconds']['bwd'], 1e-9):.0f}x "
               f"the Swap k fill ({slow[0]['profile']}, {slow[1]['percent']} %)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--profiles", default="resnet50_b128,densenet121_b64")
    ap.add_argument("--link", action="append", default=None, help="a rate such as 50GB/s (repeatable)")
    ap.add_argument("--link-json", type=Path, action="append", default=[],
                    help="a link measured by torch_exec.offload.measure_link (repeatable)")
    args = ap.parse_args()
    links = [(spec, Link.parse(spec)) for spec in (args.link or ([] if args.link_json else ["50GB/s"]))]
    for path in args.link_json:
        data = json.loads(path.read_text())
        links.append((f"measured on {data.get('device', 'a GPU')} ({path.name})", Link.from_dict(data)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = []
    for profile in args.profiles.split(","):
        chain = Chain.load(profile)
        for name, link in links:
            rows = [row(chain, p, link) for p in PERCENTS]
            results.append({"profile": profile, "link_name": name, "link": link.to_dict(), "rows": rows})
            print(f"{profile} {name}: " + ", ".join(f"{r['percent']} % {r['bwd']:.2f}/{r['inner']:.2f}/{r['any']:.2f}"
                                                   for r in rows), flush=True)
    doc = {"device": f"CPU only: {cpu_description()}, {platform.platform()}",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": command_line("offload_windows.py"), "results": results}
    doc["findings"] = findings(results)
    doc["seconds"] = time.perf_counter() - started
    (out / "offload_windows_cpu.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_md(doc, out / "offload_windows_cpu.md")
    for f in doc["findings"]:
        print(f)


if __name__ == "__main__":
    main()
