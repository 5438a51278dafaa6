"""Static figures of the CUDA kernels from the cubin NVRTC builds for CuPy (no GPU needed).

    python bench/kernel_static.py                 # writes bench/results/kernel_static.json and .md
    python bench/kernel_static.py --check         # CI: fails when a figure misses its target
    python bench/kernel_static.py --estimate densenet121_fine_b32 --buckets 8192   # work counts, estimates

The cubin is the one ``cupy.RawModule`` gets on an sm_90 device (bench/nvrtc_check.py compiles it
through CuPy's own path). ``nvdisasm`` (the ``nvidia-cuda-nvdisasm`` wheel, or the CUDA toolkit's)
disassembles it; registers and spills come from the cubin and ptxas' report.

SASS instructions per k step and thread: every innermost loop of a kernel (a backward branch
whose range holds no other one) that does checkpoint arithmetic is a k loop; its k steps per
iteration are its FADD count over the FADDs one k step needs per thread (2 per candidate:
``dp_bulk`` evaluates BAND x BAND candidates per k, ``dp_diag`` MPT, ``dp_recover`` 1). The figure
is the longest path through the loop body (forward branches inside it taken or not, whichever
is longer) divided by the k steps per iteration: the instructions one thread issues for one k when
it does all the work. A kernel has one figure per k loop (``dp_bulk``: the unchecked and the
checked tile loop); the JSON gives the largest, the .md each loop. Counts are static: they say
nothing about latency or stalls, and estimates built on them are estimates.

``--estimate`` counts, for one instance and M (budget as in bench/solver_speed.py), the k steps the
kernels' threads execute under the launch plan, with the kernels' own early exits and dp_bulk's
tile decisions (exactly, from the thresholds; no table values needed), and turns them into time
*estimates* from stated H100 rates: instruction issue (SASS per k step x warps / issue rate) and
bytes (loads per k step x 4 B / achievable DRAM bandwidth). It prints; nothing is written.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import nvrtc_check  # noqa: E402
from gpusolve.dp import cuda  # noqa: E402

OUT = ROOT / "bench" / "results"
TARGET_BULK = 400  # SASS instructions per k step per thread (issue 8, item 5)

_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def nvdisasm_path() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia  # the nvidia-cuda-nvdisasm wheel: nvidia/cu13/bin/nvdisasm
        for base in nvidia.__path__:
            for candidate in sorted(Path(base).glob("cu*/bin/nvdisasm")):
                return str(candidate)
    except ImportError:
        pass
    raise SystemExit("kernel_static: nvdisasm not found; pip install nvidia-cuda-nvdisasm")


def disassemble(cubin: bytes) -> dict[str, list[dict]]:
    """kernel -> instructions [{"addr", "op", "text", "labels"}] in address order."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dp.cubin"
        path.write_bytes(cubin)
        text = subprocess.run([nvdisasm_path(), "-c", str(path)], capture_output=True, text=True, check=True).stdout
    kernels: dict[str, list[dict]] = {}
    current = None
    pending: list[str] = []
    for line in text.splitlines():
        m = re.match(r"^\s*\.section\s+\.text\.(\w+),", line)
        if m:
            current = kernels.setdefault(m.group(1), [])
            pending = []
            continue
        m = _LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = _INSN.match(line)
        if m and current is not None:
            body = m.group(2)
            pred = ""
            if body.startswith("@"):
                pred, body = body.split(None, 1)
            op = body.split()[0]
            current.append({"addr": int(m.group(1), 16), "op": op, "pred": pred, "text": body, "labels": pending})
            pending = []
    return kernels


def _ends_block(insn) -> bool:
    return insn["op"].startswith(("BRA", "EXIT", "RET", "BRX", "JMP", "BREAK"))


def loops(insns: list[dict]) -> list[tuple[int, int]]:
    """Innermost loops as (first, last) instruction indexes: backward branches to a label."""
    where = {label: idx for idx, insn in enumerate(insns) for label in insn["labels"]}
    back = []
    for idx, insn in enumerate(insns):
        if insn["op"].startswith("BRA"):
            m = _TARGET.search(insn["text"])
            if m and where.get(m.group(1), idx + 1) <= idx:
                back.append((where[m.group(1)], idx))
    return [(a, b) for a, b in back if not any((c, d) != (a, b) and a <= c and d <= b for c, d in back)]


def longest_path(insns: list[dict], first: int, last: int) -> int:
    """Instructions on the longest path from ``first`` to the back branch at ``last``, following
    forward branches and fall-throughs inside [first, last]."""
    where = {label: idx for idx, insn in enumerate(insns) for label in insn["labels"]}
    best = {first: 1}
    for idx in range(first, last):
        if idx not in best:
            continue
        insn = insns[idx]
        succ = []
        unconditional = not insn["pred"] or insn["pred"] == "@PT"
        if not (_ends_block(insn) and unconditional):
            succ.append(idx + 1)
        if insn["op"].startswith("BRA"):
            m = _TARGET.search(insn["text"])
            if m and first < where.get(m.group(1), -1) <= last:
                succ.append(where[m.group(1)])
        for nxt in succ:
            best[nxt] = max(best.get(nxt, 0), best[idx] + 1)
    if last not in best:
        raise ValueError("the loop's back branch is not reachable from its head by forward edges")
    return best[last]


def fadds_per_k(kernel: str, geometry: cuda.Geometry) -> int:
    """FADDs one thread needs for one k (two per candidate it evaluates)."""
    return 2 * {"dp_bulk": geometry.band ** 2, "dp_diag": geometry.diag_mpt, "dp_recover": 1}[kernel]


def analyse(geometry: cuda.Geometry, arch: str = nvrtc_check.DEFAULT_ARCH) -> tuple[list[dict], list[dict]]:
    """(records for the JSON, per-loop detail) of the kernels compiled for ``geometry``."""
    result = nvrtc_check.compile_like_rawmodule(cuda.kernel_source(geometry), cuda.COMPILE_OPTIONS, arch)
    problems = nvrtc_check.check(result, "kernel_static")
    if problems:
        raise SystemExit("kernel_static: " + "; ".join(problems))
    cubin_info = nvrtc_check.cubin_kernels(result.cubin)
    report = nvrtc_check.parse_report(result.report)
    sass = disassemble(result.cubin)
    records, detail = [], []
    for name in cuda.KERNEL_NAMES:
        insns = sass[name]
        per_k = []
        for first, last in loops(insns):
            body = insns[first:last + 1]
            fadds = sum(1 for i in body if i["op"].startswith("FADD"))
            if not fadds:
                continue
            need = fadds_per_k(name, geometry)
            if fadds % need:
                raise SystemExit(f"kernel_static: a loop of {name} has {fadds} FADDs, not a multiple of {need} per k")
            steps = fadds // need
            path = longest_path(insns, first, last)
            ops = {}
            for i in body:
                key = i["op"].split(".")[0]
                ops[key] = ops.get(key, 0) + 1
            if name == "dp_bulk":
                what = "checked tile" if ops.get("ISETP", 0) >= geometry.band ** 2 else "unchecked tile (all thresholds pass)"
            elif name == "dp_diag":
                what = "edge k of a staged tile"
            else:
                what = "a thread's share of one state's k"
            detail.append({"kernel": name, "loop": what, "first": insns[first]["addr"], "last": insns[last]["addr"],
                           "static_instructions": last - first + 1, "longest_path": path, "k_steps": steps,
                           "per_k_step": path / steps, "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))})
            per_k.append(path / steps)
        info = report.get(name, {})
        records.append({"kernel": name, "registers": cubin_info[name]["registers"],
                        "spill_bytes": info.get("spill_stores", 0) + info.get("spill_loads", 0),
                        "sass_instructions_per_k_step": round(max(per_k), 1) if per_k else None})
    return records, detail


# ---------------------------------------------------------------------------- estimates
H100_SMS = 132
H100_CLOCK = 1.755e9        # Hz: H100 SXM sustained clock under load (boost 1.98 GHz)
H100_ISSUE = H100_SMS * 4 * H100_CLOCK  # warp instructions per second (4 schedulers per SM)
H100_DRAM = 3.35e12 * 0.85  # B/s: HBM3 peak x an achievable fraction


def work_counts(problem, geometry: cuda.Geometry) -> dict:
    """Thread k steps of dp_bulk (unchecked / checked tiles, staging tiles) and dp_diag for ``problem``,
    following the kernels' control flow (thresholds only)."""
    import numpy as np
    n, width = problem.n, problem.buckets + 1
    band, bt, ktile = geometry.band, geometry.bulk_threads, geometry.bulk_ktile
    never = np.iinfo(np.int64).max
    out = {"bulk_unchecked": 0, "bulk_checked": 0, "bulk_tiles": 0, "bulk_blocks": 0,
           "diag_steps": 0, "diag_blocks": 0, "diag_states": 0}
    plan = cuda.launch_plan(n, True, geometry)
    gx_b = -(-width // bt)
    block_min = np.arange(gx_b) * bt
    block_max = np.minimum(block_min + bt - 1, width - 1)
    mload = np.minimum(np.arange(gx_b * bt), width - 1).reshape(gx_b, bt)
    p = np.arange(band)[:, None]
    q = np.arange(band)[None, :]
    for kind, a, b in plan:
        if kind != "bulk":
            continue
        D, L = a, b
        for i0 in range(0, n + 1 - D, band):
            k_end = min(i0 + band - 1 + D - 1, n - 1)
            ks = np.arange(i0 + 1, k_end + 1)
            if len(ks) == 0:
                continue
            i = (i0 + p) + 0 * q
            j = i + D + q
            live = (q < L) & (j <= n)
            lo, hi = j - D + 1, i + D - 1
            K = ks[:, None, None]
            thr = np.where(live & (K > i), problem.thr_ckpt(np.clip(i, 0, n), np.clip(j, 0, n), np.clip(K, 0, n)), 0)
            thr = np.minimum(thr, width)
            stop = np.where(live & (K <= hi), np.where(K <= i, 0, thr), never).reshape(len(ks), -1).min(axis=1)
            in_range = live & (K >= lo) & (K <= hi) & (K > i)
            max_thr = np.where(in_range, thr, 0).reshape(len(ks), -1).max(axis=1)
            min_thr = np.where(in_range, thr, never).reshape(len(ks), -1).min(axis=1)
            tiles = range(0, len(ks), ktile)
            for bx in range(gx_b):
                out["bulk_blocks"] += 1
                for t0 in tiles:
                    if stop[t0] > block_max[bx]:
                        break
                    out["bulk_tiles"] += 1
                    sl = slice(t0, t0 + ktile)
                    if max_thr[sl].max() <= block_min[bx]:
                        out["bulk_unchecked"] += bt * len(ks[sl])
                    else:
                        out["bulk_checked"] += int((mload[bx][None, :] >= min_thr[sl][:, None]).sum())
    mpt, dt = geometry.diag_mpt, geometry.diag_threads
    gx_d = -(-width // (dt * mpt))
    m_last = (np.arange(gx_d)[:, None] * dt * mpt + np.arange(dt)[None, :] + (mpt - 1) * dt).ravel()
    my_max = np.minimum(m_last, width - 1)
    for kind, d, band_start in plan:
        if kind != "diag":
            continue
        out["diag_blocks"] += gx_d * (n + 1 - d)
        out["diag_states"] += width * (n + 1 - d)
        for i in range(n + 1 - d):
            j = i + d
            if band_start > 0:
                lo, hi = j - band_start + 1, i + band_start - 1
                ks = np.concatenate([np.arange(i + 1, lo), np.arange(hi + 1, j)])
            else:
                ks = np.arange(i + 1, j)
            if len(ks) == 0:
                continue
            thr = np.sort(np.minimum(problem.thr_ckpt(i, j, ks), width))  # nondecreasing already
            out["diag_steps"] += int(np.searchsorted(thr, my_max, side="right").sum())
    return out


def estimate(instance: str, buckets: int, records: list[dict], detail: list[dict], geometry: cuda.Geometry) -> str:
    import solver_speed
    from gpusolve.dp.problem import Problem
    chain = solver_speed.load_instance(instance)
    budget = solver_speed.budget_of(chain)
    problem = Problem.build(chain, -(-budget // buckets), buckets)
    w = work_counts(problem, geometry)
    loops = {}
    for d in detail:
        loops.setdefault(d["kernel"], []).append(d["per_k_step"])
    unchecked, checked = min(loops["dp_bulk"]), max(loops["dp_bulk"])
    diag_k = max(loops["dp_diag"])
    warp = 32
    bulk_issue = (w["bulk_unchecked"] * unchecked + w["bulk_checked"] * checked) / warp / H100_ISSUE
    bulk_bytes = (w["bulk_unchecked"] + w["bulk_checked"]) * (3 * geometry.band - 1) * 4
    diag_issue = w["diag_steps"] * diag_k / warp / H100_ISSUE
    diag_bytes = w["diag_steps"] * 2 * geometry.diag_mpt * 4 + w["diag_states"] * 12
    lines = [f"{instance}, N = {problem.n}, M = {buckets}: {problem.pairs} pairs, table "
             f"{(problem.pairs + 1) * (buckets + 1) * 4 / 1e9:.2f} GB",
             f"dp_bulk: {w['bulk_unchecked']:.3e} unchecked + {w['bulk_checked']:.3e} checked thread k steps "
             f"({w['bulk_tiles']} staged tiles in {w['bulk_blocks']} blocks)",
             f"  issue (ESTIMATE, {unchecked:.0f}/{checked:.0f} SASS per k step, 100 % issue efficiency): "
             f"{bulk_issue * 1e3:.1f} ms",
             f"  loads {bulk_bytes / 1e9:.1f} GB from L1/L2; DRAM between half (right rows shared by neighbouring "
             f"i-blocks through L2) and all of it: {bulk_bytes / 2 / H100_DRAM * 1e3:.1f}-"
             f"{bulk_bytes / H100_DRAM * 1e3:.1f} ms (ESTIMATE)",
             f"dp_diag: {w['diag_steps']:.3e} thread k steps ({diag_k:.0f} SASS each), {w['diag_blocks']} blocks",
             f"  issue {diag_issue * 1e3:.1f} ms; bytes {diag_bytes / 1e9:.1f} GB: {diag_bytes / H100_DRAM * 1e3:.1f} ms "
             f"(ESTIMATE, no reuse across launches assumed)",
             f"rates: {H100_ISSUE:.3e} warp instructions/s, {H100_DRAM:.3e} B/s"]
    return "\n".join(lines)


def markdown(records, detail, geometry, date, command, versions) -> str:
    lines = ["# Static figures of the CUDA kernels (sm_90 cubin from NVRTC, as cupy.RawModule builds it)", "",
             f"Date: {date}. Command: `{command}`. {versions}. No GPU: compiled and disassembled only.", "",
             f"Geometry: `{geometry}`.", "",
             "| kernel | registers | spill bytes | SASS instructions per k step and thread (worst k loop) |",
             "| --- | --- | --- | --- |"]
    for r in records:
        value = "no k loop" if r["sass_instructions_per_k_step"] is None else f"{r['sass_instructions_per_k_step']:.1f}"
        lines.append(f"| {r['kernel']} | {r['registers']} | {r['spill_bytes']} | {value} |")
    lines += ["", "Each k loop (innermost loop doing checkpoint arithmetic; addresses in the SASS of `nvdisasm -c`):", "",
              "| kernel | k loop | SASS addresses | instructions in the body | longest path | k steps per iteration | per k step | most frequent opcodes |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for d in detail:
        top = ", ".join(f"{k} {v}" for k, v in list(d["ops"].items())[:8])
        lines.append(f"| {d['kernel']} | {d['loop']} | {d['first']:#06x}-{d['last']:#06x} | {d['static_instructions']} | "
                     f"{d['longest_path']} | {d['k_steps']} | {d['per_k_step']:.1f} | {top} |")
    lines += ["", "Method: bench/kernel_static.py's docstring. The figures are static instruction counts, not times."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check the targets (no files written)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--estimate", metavar="INSTANCE", help="print work counts and time estimates for INSTANCE")
    parser.add_argument("--buckets", type=int, default=8192, help="M for --estimate")
    args = parser.parse_args(argv)
    import cupy
    from cupy.cuda import compiler
    major, minor = compiler._get_nvrtc_version()
    disasm = subprocess.run([nvdisasm_path(), "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    versions = f"CuPy {cupy.__version__}, NVRTC {major}.{minor}, nvdisasm {disasm.split(',')[-1].strip()}"
    records, detail = analyse(cuda.GEOMETRY)
    for r in records:
        print(json.dumps(r))
    for d in detail:
        print(f"  {d['kernel']} {d['loop']} {d['first']:#06x}-{d['last']:#06x}: {d['longest_path']} on the longest path, "
              f"{d['k_steps']} k step(s): {d['per_k_step']:.1f} per k step")
    if args.estimate:
        print(estimate(args.estimate, args.buckets, records, detail, cuda.GEOMETRY))
        return 0
    bulk = next(r for r in records if r["kernel"] == "dp_bulk")
    failures = [f"{r['kernel']} spills {r['spill_bytes']} B" for r in records if r["spill_bytes"]]
    if bulk["sass_instructions_per_k_step"] is None or bulk["sass_instructions_per_k_step"] > TARGET_BULK:
        failures.append(f"dp_bulk: {bulk['sass_instructions_per_k_step']} SASS instructions per k step "
                        f"(target <= {TARGET_BULK})")
    if args.check:
        for f in failures:
            print(f"FAIL {f}", file=sys.stderr)
        print("kernel_static: " + ("FAILED" if failures else "ok"))
        return 1 if failures else 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_static.json").write_text(json.dumps(records, indent=1) + "\n")
    command = "python bench/kernel_static.py " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / "kernel_static.md").write_text(markdown(records, detail, cuda.GEOMETRY, _dt.date.today().isoformat(),
                                                   command.strip(), versions))
    print(f"wrote {out / 'kernel_static.json'} and .md")
    if failures:
        print("targets missed: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
