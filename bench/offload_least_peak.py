"""The combined class's least budget and least-peak policy on the bundled profiles: time of
``min_offload_bytes`` here and in another tree (``--before``, side by side in one run, CPU), and the
least-peak policy's simulated peak and time against the least budget and the DP's plan at a bucket of 1/1024
of it (what the fallback of Note [Exact candidates] (4) gives up).

    python bench/offload_least_peak.py [--before TREE] [--link 12GB/s] [--out bench/results/offload_least_peak_cpu.md]
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, cpu_description  # noqa: E402

PROFILES = ("vgg16_b64", "resnet50_b128", "densenet121_b64", "densenet121_fine_b32")
TIMER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from gpusolve import Chain
from gpusolve.offload import min_offload_bytes
out = {}
for path in sys.argv[2:]:
    chain = Chain.load(path)
    best = float("inf")
    for _ in range(3):
        clock = time.perf_counter()
        least = min_offload_bytes(chain)
        best = min(best, time.perf_counter() - clock)
    out[path] = [least, best]
print(json.dumps(out))
"""


def timed(tree: str, paths: list[str]) -> dict:
    run = subprocess.run([sys.executable, "-c", TIMER, tree, *paths], capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another tree to time min_offload_bytes in, side by side")
    parser.add_argument("--link", default="12GB/s")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "offload_least_peak_cpu.md"))
    args = parser.parse_args()
    from gpusolve import Chain
    from gpusolve.offload import Link, min_offload_bytes, solve_offload
    from gpusolve.offload.dp import min_offload_policy
    from gpusolve.schedule import policy_to_schedule
    from gpusolve.simulate import simulate

    paths = [str(ROOT / "gpusolve" / "profiles" / f"{name}.json") for name in PROFILES]
    here = timed(str(ROOT), paths)
    before = timed(args.before, paths) if args.before else {}
    link = Link.parse(args.link)
    lines = ["# The combined class's least budget and least-peak policy (CPU)", "",
             f"- device: {cpu_description()}", f"- date: {datetime.date.today().isoformat()}",
             f"- command: `{command_line('offload_least_peak.py')}`", f"- link: {args.link}", "",
             "| profile | N | least (B) | min_offload_bytes (s) | before (s) | least-peak policy: peak (B) | "
             "its time (ms) | DP plan at the least, bucket least/1024 (ms) |", "|---|---|---|---|---|---|---|---|"]
    for name, path in zip(PROFILES, paths, strict=True):
        chain = Chain.load(path)
        least, seconds = here[path]
        if before and before[path][0] != least:
            raise AssertionError(f"{name}: least {least} B here, {before[path][0]} B before")
        sim = simulate(chain, policy_to_schedule(min_offload_policy(chain, link), 0, chain.n), link=link)
        if sim.peak_bytes != least or least != min_offload_bytes(chain):
            raise AssertionError(f"{name}: least-peak policy peaks at {sim.peak_bytes} B, least {least} B")
        plan = solve_offload(chain, least, link, backend="cpu", progress=False)
        was = f"{before[path][1]:.3f}" if before else "-"
        lines.append(f"| {name} | {chain.n} | {least} | {seconds:.3f} | {was} | {sim.peak_bytes} | {sim.time_ms:.3f} | "
                     f"{plan.predicted_time_ms:.3f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
