"""Every CUDA kernel once on small instances, for ``compute-sanitizer`` (memcheck, racecheck):

    compute-sanitizer --tool memcheck python3 bench/gpu_sanitize.py
    compute-sanitizer --tool racecheck python3 bench/gpu_sanitize.py

The chain DP (diagonal and banded bulk kernels, recovery), the join DP and the offload DP each solve a
small random instance on CUDA and on the CPU; the optimal times must agree (the tests compare the tables
bit for bit; here the point is the sanitizer's report, so the check is kept short). Chains are long
enough (40 stages) for the bulk kernel's bands to run. Exits 1 on a disagreement; needs CuPy and a GPU
(``--smoke``: both sides on the CPU, to check this script without one).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import random_chain  # noqa: E402
from gpusolve import solve  # noqa: E402
from gpusolve.dp import cuda as dp_cuda  # noqa: E402
from gpusolve.errors import BackendUnavailableError  # noqa: E402
from gpusolve.join import Turn, solve_join  # noqa: E402
from gpusolve.offload import Link, solve_offload  # noqa: E402
from gpusolve.simulate import store_all_peak_bytes  # noqa: E402


def agree(what: str, cpu: float, other: float, device: str) -> bool:
    ok = bool(np.isclose(cpu, other, rtol=1e-5, atol=0.0))
    print(f"{what}: cpu {cpu:.6f} ms, {device} {other:.6f} ms {'ok' if ok else 'DIFFERENT'}", flush=True)
    return ok


def main() -> int:
    device = "cpu" if "--smoke" in sys.argv[1:] else "cuda"
    if device == "cuda":
        try:
            dp_cuda.ensure_available()
        except BackendUnavailableError as err:
            print(f"gpu_sanitize: {err} (--smoke runs both sides on the CPU)", file=sys.stderr)
            return 2
        import cupy
        cupy.cuda.set_allocator(None)  # plain cudaMalloc per array: memcheck cannot see overruns inside a pool
    rng = np.random.default_rng(2026)
    ok = True
    chain = random_chain(rng, 40, scale=1000)
    budget = store_all_peak_bytes(chain) // 3
    for buckets in (64, 300):  # two widths: partial blocks at the table's right edge
        bucket = max(1, budget // buckets)
        cpu, cuda = (solve(chain, budget, bucket=bucket, backend=b) for b in ("cpu", device))
        ok &= agree(f"chain DP, M = {buckets}", cpu.predicted_time_ms, cuda.predicted_time_ms, device)
    # the batched walk (DeviceTable.prefetch: one dp_recover block per column, each its own buffer slices)
    from gpusolve.dp import cpu as dp_cpu
    from gpusolve.dp.problem import Problem
    problem = Problem.build(chain, max(1, budget // 300), 300)
    host = dp_cpu.fill(problem)
    table = (dp_cuda if device == "cuda" else dp_cpu).fill(problem)
    feasible = [int(m) for m in np.flatnonzero(np.isfinite(host.curve))]
    if hasattr(table, "prefetch"):
        table.prefetch(feasible)
    same = all(table.policy(m) == host.policy(m) for m in feasible)
    print(f"batched walks of {len(feasible)} columns: {'ok' if same else 'DIFFERENT'}", flush=True)
    ok &= same
    branches = [random_chain(rng, 12, scale=1000), random_chain(rng, 9, scale=1000)]
    turn = Turn(t_fwd=0.5, t_bwd=0.5, tape_bytes=500, bwd_extra=100)
    peak = sum(store_all_peak_bytes(b) for b in branches)
    cpu, cuda = (solve_join(branches, turn, peak // 2, backend=b) for b in ("cpu", device))
    ok &= agree("join DP", cpu.predicted_time_ms, cuda.predicted_time_ms, device)
    link = Link(200.0, 200.0, 0.01)
    cpu, cuda = (solve_offload(chain, budget, link, backend=b) for b in ("cpu", device))
    ok &= agree("offload DP", cpu.predicted_time_ms, cuda.predicted_time_ms, device)
    print("all agree" if ok else "DISAGREEMENT", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
