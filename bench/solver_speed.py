"""Solver speed: gpusolve's CUDA and CPU backends against Rotor's C dynamic program.

    python bench/solver_speed.py --backends cuda,cpu,rotor-c

Instances: the four bundled profiles *unfused* (``Chain.from_profile(..., fuse_aliasing=False)``:
every measured stage stays a stage) and a synthetic 1000-stage chain. Budget: half of the chain's
store-all peak (at least 1.25 x the least feasible budget); bucket = ceil(budget / M) for M in --buckets. Solve time includes building the
bucketed problem, the table, and schedule recovery. A measurement predicted (linearly in M from
a smaller measured M) to exceed --max-seconds, or whose table does not fit in memory, is
extrapolated from the largest M measured and says so ("extrapolated_from_buckets").

Rotor's C solver: ``solver.c`` from the ``rockmate==2.0.0`` sdist on PyPI, downloaded and built at
benchmark time into a cache folder (its code is not part of this repository). Field mapping:
see ``RotorChain`` and bench/SOLVER_NOTES.md. Rotor gets ``mmax = M`` (the same number of buckets
as ours), and its plan is turned into our schedule (``rotor_schedule``) and simulated in exact
bytes with gpusolve's simulator: ``rotor_peak_bytes``, ``rotor_fits`` (peak within the budget)
and ``rotor_sim_time_ms`` per record. rockmate 2.0.0 leaves the gradient of a stage's own output
out of its tape threshold, so its plans can exceed the budget; the .md table marks those rows,
whose speed is not a like-for-like comparison.

Writes bench/results/solver_speed_<device>.json (a list of records) and a .md table beside it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpusolve import Chain  # noqa: E402
from gpusolve.baselines import store_all  # noqa: E402
from gpusolve.dp import cpu  # noqa: E402
from gpusolve.dp.problem import Problem  # noqa: E402
from gpusolve.schedule import Op, OpKind  # noqa: E402
from gpusolve.simulate import simulate  # noqa: E402

PROFILE_DIR = ROOT / "gpusolve" / "profiles"
PROFILES = ["densenet121_fine_b32", "densenet121_b64", "resnet50_b128", "vgg16_b64"]
SYNTHETIC = "synthetic_1000"
DEFAULT_BUCKETS = [1024, 4096, 16384, 65536]
ROTOR_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpusolve-bench" / "rotor"
HOST_FRACTION = 0.5
# H100 SXM HBM3 peak bandwidth (bytes/s), used when the device does not report one.
H100_BANDWIDTH = 3.35e12


# ---------------------------------------------------------------------------- instances
def synthetic_chain(n: int = 1000, seed: int = 0) -> Chain:
    """A deterministic random chain: ResNet-like sizes (MiB scale), times 0.05..1 ms."""
    rng = np.random.default_rng(seed)
    act = (rng.integers(1, 64, size=n) << 20).astype(np.int64)
    t = rng.uniform(0.05, 1.0, size=n)
    return Chain(t_fwd=t, t_fwd_nograd=t * 0.95, t_bwd=2 * t, act_bytes=act, grad_bytes=act,
                 tape_bytes=act * rng.integers(1, 4, size=n), fwd_nograd_extra=act // 2, fwd_grad_extra=act // 2,
                 bwd_extra=act, input_bytes=int(act[0]), names=[f"s{s}" for s in range(1, n + 1)],
                 provenance={"source": "synthetic", "seed": seed})


def load_instance(name: str) -> Chain:
    if name == SYNTHETIC:
        return synthetic_chain()
    return Chain.from_profile(PROFILE_DIR / f"{name}.json", fuse_aliasing=False)


def budget_of(chain: Chain) -> int:
    """Half the store-all peak, raised to 1.25 x the least feasible budget where that is larger."""
    from gpusolve.dp.minpeak import min_feasible_bytes
    return max(simulate(chain, store_all(chain)).peak_bytes // 2, min_feasible_bytes(chain) * 5 // 4)


# ---------------------------------------------------------------------------- backends
def solve_gpusolve(backend: str, chain: Chain, budget: int, buckets: int, timings: dict | None = None):
    """(seconds, optimal ms, problem) of one solve: Problem.build + table + recovery. For CUDA,
    ``timings`` receives the backend's seconds per phase (cuda.run's keys)."""
    if backend == "cuda":
        from gpusolve.dp import cuda
        import cupy
        run = lambda problem, m: cuda.run(problem, m, timings=timings)  # noqa: E731
        sync = cupy.cuda.get_current_stream().synchronize
    else:
        run, sync = cpu.run, (lambda: None)
    bucket = -(-budget // buckets)
    started = time.perf_counter()
    problem = Problem.build(chain, bucket, buckets)
    curve, policy = run(problem, buckets)
    sync()
    seconds = time.perf_counter() - started
    return seconds, float(curve[buckets]), problem


def cuda_warmup(chain: Chain, budget: int):
    from gpusolve.dp import cuda
    cuda.ensure_available()
    solve_gpusolve("cuda", chain, budget, 64)


def cuda_bandwidth_fraction(problem: Problem, seconds: float) -> dict:
    """Bytes the kernels must move (each allowed candidate's reads, written states) over time x peak."""
    from gpusolve.dp import cuda
    import cupy
    width = problem.buckets + 1
    band_reads = 0
    total_reads = 0
    n = problem.n
    for kind, a, b in cuda.launch_plan(n):
        if kind != "diag":
            continue
        d = a
        if d < 2:
            continue
        i = np.arange(n + 1 - d)
        ks = i[:, None] + np.arange(1, d)[None, :]
        thr = np.minimum(problem.thr_ckpt(i[:, None], (i + d)[:, None], ks), width)
        allowed = (width - thr).sum()
        total_reads += int(allowed) * 8
        if b:  # bulk checkpoints: each value feeds BAND candidates (left) / ~BAND (right)
            lo = (i + d)[:, None] - b + 1
            hi = i[:, None] + b - 1
            in_bulk = (ks >= lo) & (ks <= hi)
            bulk_allowed = ((width - thr) * in_bulk).sum()
            band_reads += int(bulk_allowed) * 8 * (1 - 1.5 / cuda.GEOMETRY.band)
    moved = total_reads - band_reads + problem.pairs * width * 4
    peak, source = peak_bandwidth(cupy, cupy.cuda.Device().id)
    return {"bytes_moved_model": int(moved), "peak_bandwidth_bytes_s": float(peak), "peak_bandwidth_source": source,
            "bandwidth_fraction": float(moved / seconds / peak)}


def peak_bandwidth(cupy, device_id: int) -> tuple[float, str]:
    """(bytes/s, where it comes from) of the device's memory: 2 x memory clock x bus width. CUDA 13 dropped
    ``memoryClockRate`` from ``cudaDeviceProp`` (CuPy 14's ``getDeviceProperties`` for CUDA 13 has no such
    key), so the clock is asked of ``cudaDeviceGetAttribute``; the H100 SXM figure only when neither says."""
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(device_id)
    clock_khz, bus_bits, source = props.get("memoryClockRate"), props.get("memoryBusWidth"), "cudaDeviceProp"
    if not clock_khz or not bus_bits:
        try:
            clock_khz = runtime.deviceGetAttribute(runtime.cudaDevAttrMemoryClockRate, device_id)
            bus_bits = runtime.deviceGetAttribute(runtime.cudaDevAttrGlobalMemoryBusWidth, device_id)
            source = "cudaDeviceGetAttribute"
        except Exception:  # an attribute this CUDA no longer has: the assumption below, and say so
            clock_khz = bus_bits = None
    if not clock_khz or not bus_bits:
        return H100_BANDWIDTH, "assumed (H100 SXM HBM3): the device reports no memory clock"
    return 2 * clock_khz * 1e3 * bus_bits / 8, source


# Rotor ------------------------------------------------------------------------
def build_rotor() -> object:
    """Download rockmate==2.0.0's sdist, build solver.c as rockmate.solvers.rk_rotor.csolver; return it."""
    pkg = ROTOR_CACHE / "pkg"
    target = pkg / "rockmate" / "solvers" / "rk_rotor"
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    lib = target / f"csolver{suffix}"
    if not lib.exists():
        ROTOR_CACHE.mkdir(parents=True, exist_ok=True)
        sdist = next(ROTOR_CACHE.glob("rockmate-2.0.0.tar.gz"), None)
        if sdist is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "rockmate==2.0.0", "--no-deps",
                            "--no-binary", ":all:", "-d", str(ROTOR_CACHE)], check=True,
                           stdout=subprocess.DEVNULL)
            sdist = ROTOR_CACHE / "rockmate-2.0.0.tar.gz"
        src = ROTOR_CACHE / "src"
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.endswith(("rk_rotor/solver.c", "rk_rotor/csequence.py"))]
            tar.extractall(src, members=members)
        target.mkdir(parents=True, exist_ok=True)
        for folder in (pkg / "rockmate", pkg / "rockmate" / "solvers", target):
            (folder / "__init__.py").touch()
        solver_c = next(src.rglob("rk_rotor/solver.c"))
        shutil.copy(next(src.rglob("rk_rotor/csequence.py")), target / "csequence.py")
        include = sysconfig.get_paths()["include"]
        cc = os.environ.get("CC", "gcc")
        subprocess.run([cc, "-O3", "-std=c99", "-shared", "-fPIC", f"-I{include}", str(solver_c), "-o", str(lib)],
                       check=True)
    if str(pkg) not in sys.path:
        sys.path.insert(0, str(pkg))
    return importlib.import_module("rockmate.solvers.rk_rotor.csolver")


class RotorChain:
    """Rotor's chain fields (rk_rotor/solver.c get_rk_chain), from a gpusolve chain at one bucket.

    Rotor stage r = 0..ln is our stage s = r + 1 (ln = N - 1); one option (nb_sol = 1) per stage;
    sizes in buckets (ceil). cw[r] = a_r (r = 0..N; Rotor counts a sub-chain's input and the
    gradient of its output as cw), cbw[r + 1] = [tape of stage r + 1], fw/bw = t_fwd/t_bwd,
    fwd_tmp/bwd_tmp = fwd_grad_extra/bwd_extra, ff_fw = t_fwd_nograd, ff_fwd_tmp = fwd_nograd_extra.
    """

    def __init__(self, chain: Chain, bucket: int):
        a = chain.padded()
        q = lambda v: [int(-(-int(x) // bucket)) for x in v]  # noqa: E731
        n = chain.n
        self.ln = n - 1
        self.cw = q(a["act_bytes"])                              # N + 1 = ln + 2 entries
        self.cbw = [[0]] + [[v] for v in q(a["tape_bytes"][1:])]  # index r + 1 = stage r + 1
        self.fw = [[float(v)] for v in a["t_fwd"][1:]]
        self.bw = [[float(v)] for v in a["t_bwd"][1:]]
        self.fwd_tmp = [[v] for v in q(a["fwd_grad_extra"][1:])]
        self.bwd_tmp = [[v] for v in q(a["bwd_extra"][1:])]
        self.ff_fwd_tmp = q(a["fwd_nograd_extra"][1:])
        self.ff_fw = [float(v) for v in a["t_fwd_nograd"][1:]]
        self.nb_sol = [1] * n


def solve_rotor(chain: Chain, budget: int, buckets: int):
    """(seconds, Rotor's optimal ms, Rotor's sequence or None) at mmax = M buckets."""
    csolver = build_rotor()
    bucket = -(-budget // buckets)
    result: dict = {}

    def work():
        started = time.perf_counter()
        rc = RotorChain(chain, bucket)
        mmax = buckets  # Rotor's budget in buckets, as ours (it already keeps the input a_0 outside)
        table = csolver.RkTable(rc, mmax)
        opt = table.get_opt(mmax)
        try:
            sequence = table.build_sequence(mmax)
        except ValueError:
            sequence = None  # infeasible: no sequence
        result["seconds"] = time.perf_counter() - started
        result["opt"] = float(opt)
        result["sequence"] = sequence
        del table

    # Rotor recurses in C and build_sequence keeps ln^2 pointers on the stack: run with a big stack.
    old = threading.stack_size(1 << 30)
    try:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(old)
    if "seconds" not in result:
        raise RuntimeError("rotor solve failed")
    return result["seconds"], result["opt"], result["sequence"]


def rotor_schedule(sequence, n: int) -> list[Op]:
    """Our schedule of a Rotor sequence, parsed by the recursion of solver.c's build_sequence.

    Rotor stage r is our stage r + 1 (ln = N - 1). ``Fe(r)`` / ``Bwd(r)``: FWD_TAPE / BWD of r + 1;
    ``Fc(a)`` then ``Fn(a+1) .. Fn(j-1)``: FWD_NOGRAD of a + 1 (keeping its input) .. j, i.e. the
    checkpoint a_j, followed by the solve of (j, b), then (a, j - 1); Rotor frees a_j implicitly
    after the first, we say it (FREE(j)). ``Loss`` (Rotor's solve of its last stage, r = ln): record
    and back-propagate stage N, which is what its table costs for it.
    """
    ln = n - 1
    ops: list[Op] = []
    pos = 0

    def take(kind: str, index=None):
        nonlocal pos
        if pos >= len(sequence):
            raise ValueError(f"Rotor sequence ends early: expected {kind}({index})")
        op = sequence[pos]
        name = type(op).__name__
        if name != kind or (index is not None and op.index != index):
            raise ValueError(f"Rotor sequence op {pos} is {op}, expected {kind}({index})")
        pos += 1
        return op

    tasks: list[tuple] = [("solve", 0, ln)]
    while tasks:
        task = tasks.pop()
        if task[0] == "bwd":
            take("SeqBlockBwd", task[1])
            ops.append(Op(OpKind.BWD, task[1] + 1))
            continue
        if task[0] == "free":
            ops.append(Op(OpKind.FREE, task[1]))
            continue
        _, lo, hi = task
        if lo > hi:
            continue
        if lo == ln:
            take("SeqLoss")
            ops += [Op(OpKind.FWD_TAPE, n), Op(OpKind.BWD, n)]
            continue
        if pos < len(sequence) and type(sequence[pos]).__name__ == "SeqBlockFe":
            take("SeqBlockFe", lo)
            ops.append(Op(OpKind.FWD_TAPE, lo + 1))
            tasks += [("bwd", lo), ("solve", lo + 1, hi)]
            continue
        take("SeqBlockFc", lo)
        ops.append(Op(OpKind.FWD_NOGRAD, lo + 1, keep_input=True))
        j = lo + 1
        while pos < len(sequence) and type(sequence[pos]).__name__ == "SeqBlockFn" and sequence[pos].index == j:
            take("SeqBlockFn", j)
            ops.append(Op(OpKind.FWD_NOGRAD, j + 1))
            j += 1
        tasks += [("solve", lo, j - 1), ("free", j), ("solve", j, hi)]
    if pos != len(sequence):
        raise ValueError(f"Rotor sequence has {len(sequence) - pos} ops left over")
    return ops


def rotor_plan_record(chain: Chain, budget: int, sequence) -> dict:
    """Rotor's plan simulated in exact bytes by gpusolve's simulator."""
    if sequence is None:
        return {"rotor_peak_bytes": None, "rotor_fits": None, "rotor_sim_time_ms": None}
    sim = simulate(chain, rotor_schedule(sequence, chain.n))
    return {"rotor_peak_bytes": int(sim.peak_bytes), "rotor_fits": bool(sim.peak_bytes <= budget),
            "rotor_sim_time_ms": float(sim.time_ms)}


# ---------------------------------------------------------------------------- memory estimates
def host_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def fits(backend: str, n: int, buckets: int) -> bool:
    width = buckets + 1
    if backend == "cpu":
        need = n * (n + 1) // 2 * width * 4 * 2  # table + working blocks
        return need <= HOST_FRACTION * host_available()
    if backend == "rotor-c":
        need = (n ** 2) * width * 12  # double opt + int what per (m, a, b)
        return need <= HOST_FRACTION * host_available()
    from gpusolve.dp import cuda
    return cuda.device_bytes(n, buckets) <= 0.9 * cuda.free_device_bytes()


# ---------------------------------------------------------------------------- driver
def device_name(backends: list[str]) -> str:
    if "cuda" in backends:
        try:
            import cupy
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            name = props["name"]
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:
            pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or "cpu"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()


def measure(backend, chain, budget, buckets, timings=None):
    """(seconds, optimal ms, extra): extra is the problem (ours) or Rotor's sequence."""
    gc.collect()
    if backend == "rotor-c":
        return solve_rotor(chain, budget, buckets)
    return solve_gpusolve(backend, chain, budget, buckets, timings)


def measure_backend(name, chain, budget, backend, bucket_list, args, device, date, records) -> None:
    """Every M of ``bucket_list`` for one instance and backend, appended to ``records`` as measured
    (or extrapolated linearly in M beyond ``args.max_seconds``)."""
    if backend == "cuda":
        cuda_warmup(chain, budget)  # compile + first-launch costs out of the timings
    probe_s, _, _ = measure(backend, chain, budget, args.probe_buckets)
    rate = probe_s / (args.probe_buckets + 1)  # seconds per bucket column (linear in M)
    last = None  # (buckets, seconds) of the largest measured M
    for m in bucket_list:
        rec = {"instance": name, "stages": chain.n, "fused_aliasing": False if name != SYNTHETIC else None,
               "budget_bytes": int(budget), "buckets": m, "bucket_bytes": int(-(-budget // m)),
               "backend": backend, "device": device, "date": date}
        predicted = rate * (m + 1)
        if predicted <= args.max_seconds and fits(backend, chain.n, m):
            timings: dict = {}
            seconds, opt, extra = measure(backend, chain, budget, m, timings)
            rec.update(solve_seconds=seconds, optimal_ms=opt if np.isfinite(opt) else None)
            if backend == "cuda":
                repeat: dict = {}  # the same solve again: table and side arrays already on the device
                rec.update(solve_seconds_repeat=measure(backend, chain, budget, m, repeat)[0],
                           cuda_timings=timings, cuda_timings_repeat=repeat)
                rec.update(cuda_bandwidth_fraction(extra, seconds))
            if backend == "rotor-c":
                rec.update(rotor_plan_record(chain, budget, extra))
            last = (m, seconds)
            rate = seconds / (m + 1)
        else:
            if last is None:  # measure at the largest power-of-two M that is predicted to fit
                mp = args.probe_buckets
                while (mp * 2 < m and rate * (2 * mp + 1) <= args.max_seconds
                       and fits(backend, chain.n, 2 * mp)):
                    mp *= 2
                seconds = probe_s if mp == args.probe_buckets else measure(backend, chain, budget, mp)[0]
                last = (mp, seconds)
            m0, s0 = last
            rec.update(solve_seconds=s0 * (m + 1) / (m0 + 1), optimal_ms=None,
                       extrapolated_from_buckets=m0,
                       note=f"extrapolated linearly in M from a measured solve at M={m0} "
                            f"({s0:.3f} s); optimal time not computed at this M")
        print(json.dumps(rec), flush=True)
        records.append(rec)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="cuda,cpu,rotor-c")
    parser.add_argument("--instances", default=",".join(PROFILES + [SYNTHETIC]))
    parser.add_argument("--buckets", default=",".join(map(str, DEFAULT_BUCKETS)))
    parser.add_argument("--max-seconds", type=float, default=60.0,
                        help="longest single measurement; longer ones are extrapolated from a smaller M")
    parser.add_argument("--probe-buckets", type=int, default=64, help="M of the first (timing probe) solve")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--tag", default="", help="suffix of the output files' names (solver_speed_<device>_<tag>)")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    instances = [i for i in args.instances.split(",") if i]
    bucket_list = sorted(int(b) for b in args.buckets.split(","))
    for b in backends:
        if b not in ("cuda", "cpu", "rotor-c"):
            parser.error(f"unknown backend {b!r}")
    device = device_name(backends)
    date = _dt.date.today().isoformat()
    records = []
    for name in instances:
        chain = load_instance(name)
        budget = budget_of(chain)
        for backend in backends:
            try:
                measure_backend(name, chain, budget, backend, bucket_list, args, device, date, records)
            except Exception as err:  # e.g. Rotor's C DP does not build there: the other backends go on
                rec = {"instance": name, "stages": chain.n, "backend": backend, "device": device, "date": date,
                       "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
                print(json.dumps(rec), flush=True)
                records.append(rec)
        write(records, args, device, date, argv)  # after every instance: a killed run keeps what it did
    return 0


def write(records, args, device, date, argv) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"solver_speed_{slug(device)}" + (f"_{slug(args.tag)}" if args.tag else "")
    (out / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
    command = "python bench/solver_speed.py " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / f"{stem}.md").write_text(markdown(records, device, date, command))
    print(f"wrote {out / stem}.json and .md", flush=True)


def markdown(records, device, date, command) -> str:
    lines = [f"# Solver speed on {device}", "", f"Date: {date}. Command: `{command}`", "",
             "Profiles are unfused (`Chain.from_profile(..., fuse_aliasing=False)`); budget = max(half the "
             "store-all peak, 1.25 x the least feasible budget); solve time includes problem build, table and schedule recovery. "
             "`~` marks a time extrapolated linearly in M from the solve at the M in parentheses. "
             "Rotor's optimal time is under Rotor's own memory model (see bench/SOLVER_NOTES.md), so "
             "it differs from ours. Rotor runs with mmax = M; its plan is simulated in exact bytes by our "
             "simulator: **over** marks a plan whose peak exceeds the budget (its speed is then not comparable "
             "with a solver whose plans fit).", "",
             "| instance | stages | M | backend | solve s | optimal ms | Rotor plan peak (budget) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['instance']} | {r['stages']} | | {r['backend']} | failed: {r['error']} | | |")
            continue
        t = f"{r['solve_seconds']:.3f}"
        if "extrapolated_from_buckets" in r:
            t = f"~{r['solve_seconds']:.1f} (M={r['extrapolated_from_buckets']})"
        opt = "" if r.get("optimal_ms") is None else f"{r['optimal_ms']:.3f}"
        peak = ""
        if r.get("rotor_peak_bytes") is not None:
            verdict = "fits" if r["rotor_fits"] else "**over**"
            peak = (f"{r['rotor_peak_bytes'] / 2**30:.3f} GiB ({r['budget_bytes'] / 2**30:.3f} GiB): {verdict}")
            if not r["rotor_fits"]:
                t += " (plan over budget)"
        lines.append(f"| {r['instance']} | {r['stages']} | {r['buckets']} | {r['backend']} | {t} | {opt} | {peak} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
