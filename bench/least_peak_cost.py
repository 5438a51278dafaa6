"""The host cost of the least-peak DP (gpusolve/dp/minpeak.py) that a solve near the least budget pays, trees side
by side in one run (Note [Exact candidates] (4) of gpusolve/solve.py).

    python bench/least_peak_cost.py --roots OLD_TREE NEW_TREE [--profile densenet121_fine_b32] [--repeat 5] [--out NAME]

For each tree (each run in its own process, the trees taking turns): the wall time of ``min_peak_tables`` on the
profile, and how many fills a ``solve_budgets`` call with four budgets near the least (densenet121_b64, CPU
backend) makes, with the seconds of its plans' "minimum" and "schedule" phases. Writes bench/results/<NAME>.md
(default least_peak_cost_cpu).
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import cpu_description  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from gpusolve import Chain
from gpusolve.dp import minpeak
from gpusolve.solve import solve_budgets
chain = Chain.from_profile(sys.argv[2])
clock = time.perf_counter()
minpeak.min_peak_tables(chain)
seconds = time.perf_counter() - clock
small = Chain.from_profile(sys.argv[3])
real, fills = minpeak.min_peak_tables, []
minpeak.min_peak_tables = lambda c: fills.append(1) or real(c)
low = int(real(small)[0][0, small.n])
b = low // 2048  # budgets within N + 2 buckets of the least: each plan takes the least-peak candidate
top, below = solve_budgets(small, low + 40 * b, [low + 20 * b, low + 5 * b, low], bucket=b, backend="cpu",
                           progress=False)
phases = sum(p.timings.get("minimum", 0.0) + p.timings.get("schedule", 0.0) for p in [top, *below])
print(json.dumps({"seconds": seconds, "fills": len(fills), "phases": phases}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roots", nargs="+", required=True, help="trees to compare (their gpusolve is imported)")
    ap.add_argument("--profile", default="densenet121_fine_b32")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="least_peak_cost_cpu")
    args = ap.parse_args()
    profiles = HERE.parent / "gpusolve" / "profiles"
    runs: dict[str, list[dict]] = {root: [] for root in args.roots}
    for _ in range(args.repeat):
        for root in args.roots:
            out = subprocess.run([sys.executable, "-c", CHILD, root, str(profiles / f"{args.profile}.json"),
                                  str(profiles / "densenet121_b64.json")], check=True, capture_output=True, text=True)
            runs[root].append(json.loads(out.stdout.strip().splitlines()[-1]))
    lines = [f"# Least-peak DP host cost, {datetime.date.today()}", "",
             f"Device: {cpu_description()} (CPU; compare the trees with each other: they ran in turns, one run).",
             f"Command: `python bench/least_peak_cost.py {' '.join(sys.argv[1:])}`", "",
             f"| tree | min_peak_tables on {args.profile}, median of {args.repeat} (s) | all runs (s) | "
             f"fills for 4 plans near the least (densenet121_b64) | their minimum + schedule phases, median (s) |",
             "|---|---|---|---|---|"]
    for root, rows in runs.items():
        rev = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"], capture_output=True, text=True)
        root = f"{root} ({rev.stdout.strip() or 'not a git tree'})"
        seconds = [r["seconds"] for r in rows]
        lines.append(f"| {root} | {statistics.median(seconds):.3f} | {', '.join(f'{t:.3f}' for t in seconds)} | "
                     f"{rows[0]['fills']} | {statistics.median(r['phases'] for r in rows):.3f} |")
    (HERE / "results" / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
