"""How the CPU join DP's solve time grows with the branches' shape: the measurements behind
``torch_exec.auto.JOIN_DP_WORK`` (the cap on (l + 2)^k * k * l for a join auto_checkpoint finds).

    python bench/join_dp_work.py

Instance: k random branches of l stages each (``tests/conftest.py``'s ``random_chain``, seed 0, scale
1000), a turn of 1 + 1 ms with 10 B of tape, budget half the join's store-all peak, default bucket
(budget / 1024), ``solve_join(..., backend="cpu")``, one run each. Writes
bench/results/join_dp_work_cpu.json and .md.
"""
from __future__ import annotations

import datetime
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from _common import cpu_description  # noqa: E402
from conftest import random_chain  # noqa: E402

from gpusolve.join.bytesim import store_all_join_peak_bytes  # noqa: E402
from gpusolve.join.network import JoinNet, Turn  # noqa: E402
from gpusolve.join.solve import solve_join  # noqa: E402

SHAPES = [(2, 24), (2, 40), (2, 48), (3, 12), (3, 13), (3, 20), (3, 32), (4, 6), (4, 12)]


def main() -> int:
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    rows = []
    for k, n in SHAPES:
        branches = [random_chain(rng, n, scale=1000) for _ in range(k)]
        turn = Turn(t_fwd=1.0, t_bwd=1.0, tape_bytes=10, fwd_extra=0, bwd_extra=0)
        budget = int(0.5 * store_all_join_peak_bytes(JoinNet(branches, turn)))
        started = time.perf_counter()
        plan = solve_join(branches, turn, budget, backend="cpu")
        seconds = time.perf_counter() - started
        rows.append({"k": k, "l": n, "work": (n + 2) ** k * k * n, "solve_s": round(seconds, 3),
                     "buckets": plan.buckets, "feasible": plan.feasible})
        print(rows[-1], flush=True)
    meta = {"device": f"CPU: {cpu_description()}", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": "python bench/join_dp_work.py", "numpy": np.__version__}
    out = ROOT / "bench" / "results" / "join_dp_work_cpu"
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    lines = ["# CPU join DP solve time against the branches' shape", "",
             f"- device: {meta['device']}", f"- date: {meta['date']}", f"- command: `{meta['command']}`",
             "- k random branches of l stages, budget half the store-all peak, 1024 buckets, one run each", "",
             "| k | l | (l+2)^k * k * l | solve s |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['k']} | {r['l']} | {r['work']} | {r['solve_s']:.2f} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
