"""Join solver speed: the CPU join DP (NumPy) against the CUDA one (one launch per hyperplane).

    python bench/join_speed.py [--buckets 256,1024,4096,16384] [--repeats 3]

Instance: a two-branch join of the bundled profile ``resnet50_b128`` twice (``Chain.load``), a turn
of 0.5 + 0.5 ms with 1 MiB of tape and 1 MiB of backward workspace; budget half of the join's
store-all peak; bucket = ceil(budget / M) for each M. Per backend and M: the whole
``solve_join(..., backend=...)`` (problem build, chain tables, J, recovery, exact-byte candidates)
and its ``timings`` (``dp``: the J fill, chain tables included on the CPU; on CUDA ``chain_tables``,
``device_setup``, ``dp``, ``curve``, ``recover``), best of ``--repeats`` runs (CUDA: after one warm-up
solve that compiles the kernels). CUDA runs only when CuPy sees a device; otherwise the records
say it was skipped and why. Both backends' curves must be equal (checked when both run).

Writes bench/results/join_speed_<device>.json (records) and a .md table beside it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, cpu_description, number_list, slug  # noqa: E402
from gpusolve import Chain  # noqa: E402
from gpusolve.join import JoinNet, Turn, solve_join  # noqa: E402
from gpusolve.join.bytesim import store_all_join_peak_bytes  # noqa: E402

PROFILE = "resnet50_b128"


def instance() -> JoinNet:
    return JoinNet([Chain.load(PROFILE), Chain.load(PROFILE)],
                   Turn(t_fwd=0.5, t_bwd=0.5, tape_bytes=1 << 20, bwd_extra=1 << 20))


def cuda_status() -> tuple[bool, str]:
    """(available, device name or the reason it is not)."""
    try:
        from gpusolve.join import cuda as join_cuda
        join_cuda.ensure_available()
        import cupy
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        return True, name.decode() if isinstance(name, bytes) else str(name)
    except Exception as err:  # BackendUnavailableError, or anything CuPy raises without a device
        return False, f"{type(err).__name__}: {err}"


def measure(net: JoinNet, budget: int, buckets: int, backend: str, repeats: int) -> dict:
    best = None
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter()
        plan = solve_join(net.branches, net.turn, budget, bucket=-(-budget // buckets), backend=backend)
        seconds = time.perf_counter() - started
        if best is None or seconds < best[0]:
            best = (seconds, plan)
    seconds, plan = best
    return {"backend": backend, "buckets": plan.buckets, "bucket_bytes": plan.bucket_bytes,
            "solve_seconds": round(seconds, 4), "timings": {k: round(v, 4) for k, v in plan.timings.items()},
            "predicted_time_ms": plan.predicted_time_ms, "decided_by": plan.decided_by,
            "_curve": plan.curve.time_ms}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--buckets", type=number_list(int), default="256,1024,4096,16384",
                        help="comma-separated M values")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    net = instance()
    budget = store_all_join_peak_bytes(net) // 2
    has_cuda, cuda_text = cuda_status()
    device = cuda_text if has_cuda else cpu_description()
    date = _dt.date.today().isoformat()
    command = command_line("join_speed.py", argv)
    print(f"device: {device}; CUDA: {'yes' if has_cuda else 'skipped (' + cuda_text + ')'}", flush=True)
    if has_cuda:  # compile outside the measurements
        solve_join(net.branches, net.turn, budget, bucket=-(-budget // 64), backend="cuda")
    records = []
    for m in args.buckets:
        cpu = measure(net, budget, m, "cpu", args.repeats)
        rows = [cpu]
        if has_cuda:
            gpu = measure(net, budget, m, "cuda", args.repeats)
            gpu["curve_equal_to_cpu"] = bool(np.array_equal(gpu["_curve"], cpu["_curve"]))
            gpu["speedup_vs_cpu"] = round(cpu["solve_seconds"] / gpu["solve_seconds"], 2)
            rows.append(gpu)
        else:
            rows.append({"backend": "cuda", "buckets": cpu["buckets"], "skipped": f"no usable CUDA device: {cuda_text}"})
        for rec in rows:
            rec.pop("_curve", None)
            rec.update(instance=f"{PROFILE} x 2", budget_bytes=budget)
            print(json.dumps(rec), flush=True)
            records.append(rec)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"join_speed_{slug(device)}"
    meta = {"device": device, "date": date, "command": command, "cuda": "ran" if has_cuda else f"skipped: {cuda_text}"}
    (out / f"{stem}.json").write_text(json.dumps({**meta, "records": records}, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(records, meta))
    print(f"wrote {out / stem}.json and .md")
    return 0


def markdown(records, meta) -> str:
    lines = [f"# Join solver speed on {meta['device']}", "",
             f"Date: {meta['date']}. Command: `{meta['command']}`", "",
             f"Instance: two branches `{PROFILE}` ({Chain.load(PROFILE).n} stages each as loaded), turn 0.5 + 0.5 ms, 1 MiB tape, 1 MiB "
             f"backward workspace; budget = half the join's store-all peak. Solve = the whole `solve_join` (problem, "
             f"chain tables, J, recovery, exact-byte candidates), best of the repeats; `dp` = the J fill "
             f"(with the chain tables on the CPU). CUDA: {meta['cuda']}.", "",
             "| M | backend | solve s | dp s | predicted ms | decided by |", "| --- | --- | --- | --- | --- | --- |"]
    for r in records:
        if "skipped" in r:
            lines.append(f"| {r['buckets']} | {r['backend']} | skipped | | | |")
            continue
        lines.append(f"| {r['buckets']} | {r['backend']} | {r['solve_seconds']:.3f} | {r['timings'].get('dp', 0):.3f} | "
                     f"{r['predicted_time_ms']:.3f} | {r['decided_by']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
