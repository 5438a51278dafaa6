"""The chain DP's table fill under other launch geometries (``gpusolve.dp.cuda.Geometry``): which is fastest?

    python bench/geometry_sweep.py [--profile densenet121_fine_b32] [--buckets 8192] [--repeats 5]
                                   [--geometry band=8 --geometry band=12,bulk_ktile=4 ...] [--out DIR]

On the H100 (2026-11-26, bench/SOLVER_NOTES.md "Measured on an H100") dp_bulk is DRAM-bound: each staged
k costs a thread DP_BAND + (2 DP_BAND - 1) loads for DP_BAND^2 candidates, so a wider band moves fewer
bytes per candidate (band 8: 0.36 loads per candidate, 10: 0.29, 12: 0.24) at the price of more
registers (NVRTC for sm_90: 124, 164, 217, no spill) and more edge checkpoints for dp_diag (about band - 1
per pair). What wins is measured here, not predicted: for each geometry one fill compiles and warms
it, then ``--repeats`` fills of the issue's reference instance (densenet121_fine_b32 unfused, half its
store-all peak, 8192 buckets) give the median of ``dp`` (launches to synchronisation; ``cuda.run``'s
timings). Every geometry's curve and policy must equal the default geometry's bit for bit (the kernels
compute the same minimums in any geometry; the host harness checks two of them in CI): a row that
differs is an error, not a timing.

Writes ``geometry_sweep_<gpu>.json`` and ``.md`` (device, date, command). Needs a CUDA device: without
one it says so in one line and exits 2.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpusolve import BackendUnavailableError, store_all_peak_bytes  # noqa: E402
from gpusolve.dp import cuda  # noqa: E402
from gpusolve.dp.problem import Problem  # noqa: E402
from _common import command_line, slug, unfused_profile_or_exit  # noqa: E402

DEFAULT_GEOMETRIES = (
    "",                                # the default (the reference every other row is compared with)
    "band=6", "band=10", "band=12",    # bytes per candidate against registers and edge work
    "band=12,bulk_ktile=4",
    "bulk_ktile=16", "bulk_threads=256",
    "diag_mpt=2", "diag_mpt=8", "ktile=64",
)


def parse_geometry(text: str) -> cuda.Geometry:
    """``"band=12,bulk_ktile=4"`` -> ``Geometry(band=12, bulk_ktile=4)`` (the rest the defaults); ``""``
    the default. Unknown names and values that are not positive ints are one-line errors."""
    names = {f.name for f in fields(cuda.Geometry)}
    values = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if name not in names:
            raise ValueError(f"geometry {text!r}: unknown field {name!r}; fields: {', '.join(sorted(names))}")
        try:
            values[name] = int(value)
        except ValueError:
            raise ValueError(f"geometry {text!r}: {name} needs an int, got {value!r}") from None
    return cuda.Geometry(**values)


def label(geometry: cuda.Geometry) -> str:
    """The fields that differ from the default, as ``name=value`` (``default`` when none)."""
    default = asdict(cuda.Geometry())
    diff = [f"{k}={v}" for k, v in asdict(geometry).items() if default[k] != v]
    return ",".join(diff) or "default"


def measure(problem: Problem, geometry: cuda.Geometry, repeats: int) -> dict:
    """One warm-up fill (compiles the geometry's kernels), then ``repeats`` timed fills and recoveries."""
    import cupy
    table = cuda.fill(problem, geometry=geometry)
    policy = table.policy(problem.buckets)
    curve = table.curve.copy()
    dps, recovers = [], []
    for _ in range(repeats):
        timings: dict = {}
        table = cuda.fill(problem, timings=timings, geometry=geometry)
        table.policy(problem.buckets)
        dps.append(timings["dp"] * 1e3)
        recovers.append(timings.get("recover", 0.0) * 1e3)
    module = cuda._MODULES.get(geometry)
    regs = {name: int(module.get_function(name).num_regs) for name in cuda.KERNEL_NAMES}
    cupy.cuda.get_current_stream().synchronize()
    return {"curve": curve, "policy": policy, "dp_ms": statistics.median(dps), "dp_ms_each": dps,
            "recover_ms": statistics.median(recovers), "registers": regs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="densenet121_fine_b32")
    parser.add_argument("--buckets", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--geometry", action="append", help="fields that differ from the default, e.g. band=12 "
                        "(repeatable; default: a sweep of band, k tiles, threads and buckets per thread)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    try:
        geometries = [parse_geometry(g) for g in ([""] + (args.geometry or list(DEFAULT_GEOMETRIES[1:])))]
    except ValueError as err:
        parser.exit(2, f"geometry_sweep.py: {err}\n")
    try:
        cuda.ensure_available()
    except BackendUnavailableError as err:
        parser.exit(2, f"geometry_sweep.py: {err}\n")
    import cupy
    chain = unfused_profile_or_exit(parser, ROOT / "gpusolve" / "profiles" / f"{args.profile}.json")
    budget = store_all_peak_bytes(chain) // 2
    problem = Problem.build(chain, -(-budget // args.buckets), args.buckets)
    device = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    device = device.decode() if isinstance(device, bytes) else device
    rows, reference = [], None
    for geometry in dict.fromkeys(geometries):  # the default first, once
        row = {"geometry": label(geometry), **asdict(geometry)}
        started = time.perf_counter()
        try:
            got = measure(problem, geometry, args.repeats)
        except Exception as err:  # a geometry that does not compile or launch: its one line, the sweep goes on
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            rows.append(row)
            print(f"{row['geometry']}: {row['error']}", flush=True)
            continue
        if reference is None:
            reference = got
        same = bool(np.array_equal(got["curve"], reference["curve"])) and got["policy"] == reference["policy"]
        row.update(dp_ms=got["dp_ms"], dp_ms_each=got["dp_ms_each"], recover_ms=got["recover_ms"],
                   registers=got["registers"], same_as_default=same, seconds=time.perf_counter() - started)
        if not same:
            row["error"] = "curve or policy differs from the default geometry's"
        rows.append(row)
        print(f"{row['geometry']}: dp {got['dp_ms']:.2f} ms, registers {got['registers']}, same {same}", flush=True)
    cuda.release()
    record = {"device": device, "date": dt.datetime.now(dt.timezone.utc).isoformat(),
              "command": command_line("geometry_sweep.py", argv), "profile": args.profile, "buckets": args.buckets,
              "budget_bytes": int(budget), "repeats": args.repeats, "cupy": cupy.__version__, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"geometry_sweep_{slug(device)}"
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    stem.with_suffix(".md").write_text("\n".join(report(record)) + "\n")
    # nonzero where a geometry computes another curve or policy, or the default fails: a geometry that does not
    # compile or launch is a row of the record, not a failed step (bench/gpu_session.py would rerun it at every GPU)
    return 1 if any(r.get("same_as_default") is False for r in rows) or "dp_ms" not in rows[0] else 0


def report(record: dict) -> list[str]:
    lines = [f"# Chain DP fill under other launch geometries on {record['device']}", "",
             f"Date {record['date']}; command `{record['command']}`; CuPy {record['cupy']}. {record['profile']} unfused "
             f"at half its store-all peak ({record['budget_bytes']} B), {record['buckets']} buckets; median of "
             f"{record['repeats']} fills after one warm-up.", "",
             "| geometry | dp (ms) | recovery (ms) | registers (dp_bulk / dp_diag) | same curve and policy |",
             "| --- | ---: | ---: | --- | --- |"]
    for r in record["rows"]:
        if "dp_ms" not in r:
            lines.append(f"| {r['geometry']} | - | - | - | {r['error']} |")
            continue
        regs = r["registers"]
        lines.append(f"| {r['geometry']} | {r['dp_ms']:.2f} | {r['recover_ms']:.2f} | {regs.get('dp_bulk')} / "
                     f"{regs.get('dp_diag')} | {'yes' if r['same_as_default'] else 'NO'} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
