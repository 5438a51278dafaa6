"""CUDA backend: raw CUDA C++ kernels (kernels/dp.cu, shipped as ``gpusolve.kernels``) run with CuPy.

The table lives on the device in the layout of :mod:`gpusolve.dp.problem` (one float32 row of M+1
buckets per pair, by diagonal). Diagonals are solved in order; each launch covers every (i, m) of
a diagonal (see ``kernels/dp.cu`` for the kernels and ``bench/SOLVER_NOTES.md`` for the design).
The policy is recovered on the device by a one-thread kernel; only the curve row and the visited
states (at most 2N - 1 quads) are copied back, never the table.

This module imports without CuPy: :func:`device_arrays`, :func:`launch_plan` and the memory
estimates are plain NumPy, shared with the host harness that checks the kernel arithmetic in CI.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailableError
from ..schedule import Policy
from ..units import format_bytes
from .problem import BYTES_PER_STATE, Problem
from .recover import build_policy

# Must match kernels/dp_common.cuh.
DIAG_THREADS = 128
DIAG_MPT = 4
BAND = 8
BULK_THREADS = 128
# First band of the bulk (min-plus) kernel; below it the diagonal kernel does every checkpoint.
FIRST_BAND = 2 * BAND
# Fraction of free device memory the table (and its small side arrays) may take.
DEVICE_MEMORY_FRACTION = 0.9

_MODULE = None  # compiled cupy.RawModule, per process
_MODULE_ERROR: str | None = None


# ---------------------------------------------------------------------------- sources
def kernel_dir() -> Path:
    """Folder of the .cu/.cuh sources (installed package data, or the repository's kernels/)."""
    try:
        from .. import kernels  # type: ignore[attr-defined]  # installed as gpusolve.kernels
        return Path(kernels.__file__).parent
    except ImportError:
        return Path(__file__).resolve().parents[2] / "kernels"


def kernel_source() -> str:
    """dp.cu with dp_common.cuh inlined (one self-contained NVRTC translation unit)."""
    folder = kernel_dir()
    header = (folder / "dp_common.cuh").read_text()
    source = (folder / "dp.cu").read_text()
    return source.replace('#include "dp_common.cuh"', header)


# ---------------------------------------------------------------------------- host-side arrays
def device_arrays(problem: Problem) -> dict[str, np.ndarray]:
    """The kernels' inputs as NumPy arrays (dtype and order as the kernels read them).

    Threshold sizes are split into quotient (clamped to W: "never allowed") and remainder by the
    bucket, so the kernels evaluate ceil((grad[j] + nograd_peak[i, k]) / B) exactly without 64-bit
    division (see dp_common.cuh).
    """
    if np.dtype(problem.dtype) != np.float32:
        raise ValueError("the CUDA backend solves float32 tables only")
    width = problem.buckets + 1
    b = np.int64(problem.bucket_bytes)
    grad = problem.grad_bytes.astype(np.int64)
    peak = problem.nograd_peak.astype(np.int64)
    return {
        "t_tape": problem.t_tape.astype(np.float32),
        "prefix": problem.fwd_prefix.astype(np.float64),
        "act_b": problem.act_b.astype(np.int32),
        "tape_b": problem.tape_b.astype(np.int32),
        "grad_q": np.minimum(grad // b, width).astype(np.int32),
        "grad_r": (grad % b).astype(np.int64),
        "peak_q": np.ascontiguousarray(np.minimum(peak // b, width).astype(np.int32)),
        "peak_r": np.ascontiguousarray((peak % b).astype(np.int64)),
        "tape_fwd": problem.tape_fwd.astype(np.int64),
        "tape_need": problem.tape_need.astype(np.int64),
        "grad_bytes": grad,
    }


ARRAY_ORDER = ("t_tape", "prefix", "act_b", "tape_b", "grad_q", "grad_r", "peak_q", "peak_r",
               "tape_fwd", "tape_need", "grad_bytes")


def launch_plan(n: int, band: bool = True) -> list[tuple[str, int, int]]:
    """Kernel launches in order: ("diag", d, band_start) and ("bulk", band_start, band_len).

    With ``band`` the diagonals from FIRST_BAND on are grouped by BAND: one bulk launch (the
    checkpoints whose sub-pairs lie below the band) then one diag launch per diagonal (the rest).
    """
    plan: list[tuple[str, int, int]] = []
    d = 1
    while d <= n:
        if band and d >= FIRST_BAND:
            length = min(BAND, n - d + 1)
            plan.append(("bulk", d, length))
            for e in range(d, d + length):
                plan.append(("diag", e, d))
            d += length
        else:
            plan.append(("diag", d, 0))
            d += 1
    return plan


def grid(kind: str, n: int, width: int, a: int) -> tuple[int, int]:
    """(blocks along m, blocks along i) of a launch: a = d for diag, the band start for bulk."""
    if kind == "diag":
        return -(-width // (DIAG_THREADS * DIAG_MPT)), n + 1 - a
    return -(-width // BULK_THREADS), -(-(n + 1 - a) // BAND)


# ---------------------------------------------------------------------------- memory
def device_bytes(n: int, buckets: int) -> int:
    """Device bytes of a solve: the table (4 B per state) plus the side arrays."""
    pairs = n * (n + 1) // 2
    side = (n + 1) ** 2 * 12 + (n + 1) * 64 + (2 * n + 2) * 28 + 64
    return pairs * (buckets + 1) * BYTES_PER_STATE + side


def finest_fitting_bucket(budget_bytes: int, n: int, free_bytes: int) -> int:
    """The smallest bucket (bytes) whose table fits in ``free_bytes``."""
    pairs = n * (n + 1) // 2
    side = device_bytes(n, 0) - pairs * BYTES_PER_STATE
    columns = (free_bytes - side) // (pairs * BYTES_PER_STATE)  # = buckets + 1
    if columns < 2:
        return budget_bytes
    bucket = max(1, -(-budget_bytes // int(columns - 1)))
    while device_bytes(n, budget_bytes // bucket) > free_bytes:
        bucket += 1
    return bucket


def free_device_bytes() -> int:
    """Free device memory CuPy could use now: the driver's free bytes plus CuPy's pooled free blocks."""
    import cupy
    free, _total = cupy.cuda.runtime.memGetInfo()
    return int(free) + int(cupy.get_default_memory_pool().free_bytes())


def fit_bucket(budget_bytes: int, bucket_bytes: int, n: int, user_bucket: bool, notes: list[str]) -> int:
    """Check that the table at ``bucket_bytes`` fits on the device; coarsen it when the bucket was ours.

    Raises MemoryError (one line: bytes needed, finest bucket that fits) for a user's bucket.
    """
    try:
        with _torch_device():
            free = int(DEVICE_MEMORY_FRACTION * free_device_bytes())
    except Exception:  # no device information: let run() report what it can
        return bucket_bytes
    need = device_bytes(n, budget_bytes // bucket_bytes)
    if need <= free:
        return bucket_bytes
    finest = finest_fitting_bucket(budget_bytes, n, free)
    if user_bucket:
        raise MemoryError(_memory_message(need, n, budget_bytes // bucket_bytes, free, finest))
    notes.append(f"the CUDA table at bucket {format_bytes(bucket_bytes)} needs {format_bytes(need)} but "
                 f"{format_bytes(free)} of device memory is free; using bucket {format_bytes(finest)} "
                 f"({budget_bytes // finest} buckets), the finest that fits")
    return finest


def _memory_message(need: int, n: int, buckets: int, free: int, finest: int) -> str:
    return (f"the CUDA table needs {format_bytes(need)} ({need} B: {n * (n + 1) // 2} pairs x {buckets + 1} "
            f"buckets x {BYTES_PER_STATE} B) but {format_bytes(free)} of device memory is free; "
            f"use a bucket of at least {format_bytes(finest)} ({finest} B)")


# ---------------------------------------------------------------------------- availability
def _import_cupy():
    try:
        import cupy  # noqa: F401
    except ImportError as err:
        raise BackendUnavailableError(f"CuPy is not installed or cannot be imported ({_one_line(err)}); "
                                      f"pip install cupy-cuda12x (or cupy-cuda13x)") from None
    except Exception as err:  # CuPy present but broken (missing CUDA libraries, ...)
        raise BackendUnavailableError(f"CuPy cannot be imported: {type(err).__name__}: {_one_line(err)}") from None
    return cupy


def _one_line(err: BaseException) -> str:
    """The last non-empty line of an error (CuPy's import errors are a page long)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip() and not set(line.strip()) <= {"="}]
    return lines[-1] if lines else type(err).__name__


def ensure_available() -> None:
    """Raise BackendUnavailableError with the reason when the CUDA backend cannot run here."""
    cupy = _import_cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:
        raise BackendUnavailableError(f"CuPy sees no CUDA device ({type(err).__name__}: {_one_line(err)})") from None
    if count < 1:
        raise BackendUnavailableError("CuPy sees no CUDA device")
    with _torch_device():
        _module()


def _module():
    """The compiled RawModule (compiled once per process; CuPy caches it on disk)."""
    global _MODULE, _MODULE_ERROR
    if _MODULE is not None:
        return _MODULE
    if _MODULE_ERROR is not None:
        raise BackendUnavailableError(_MODULE_ERROR)
    cupy = _import_cupy()
    try:
        module = cupy.RawModule(code=kernel_source(), options=("--std=c++14",))
        for name in ("dp_diag", "dp_bulk", "dp_recover_kernel"):
            module.get_function(name)  # forces compilation now
    except Exception as err:
        first = str(err).strip().splitlines()
        _MODULE_ERROR = f"the CUDA kernels failed to compile: {type(err).__name__}: {' | '.join(first[:6])}"
        raise BackendUnavailableError(_MODULE_ERROR) from None
    _MODULE = module
    return module


class _torch_device:
    """Run on torch's current device and stream when torch (already imported) has CUDA.

    torch is not imported here: a process that trains with it has imported it already, and
    importing it only to look would cost seconds. Otherwise CuPy's current device and stream.
    """

    def __enter__(self):
        import cupy
        self._stack = []
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_available():
                device = cupy.cuda.Device(torch.cuda.current_device())
                device.__enter__()
                self._stack.append(device)
                stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
                stream.__enter__()
                self._stack.append(stream)
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        while self._stack:
            self._stack.pop().__exit__(None, None, None)
        return False


# ---------------------------------------------------------------------------- solve
def run(problem: Problem, m_top: int, progress=None, band: bool = True):
    """Solve on the device: returns (curve [M+1] float32 = C(0, N, m), policy at ``m_top`` or None)."""
    cupy = _import_cupy()
    with _torch_device():
        module = _module()
        n, width = problem.n, problem.buckets + 1
        need = device_bytes(n, problem.buckets)
        free = int(DEVICE_MEMORY_FRACTION * free_device_bytes())
        if need > free:
            finest = finest_fitting_bucket(problem.bucket_bytes * problem.buckets, n, free)
            raise MemoryError(_memory_message(need, n, problem.buckets, free, finest))
        pool = cupy.get_default_memory_pool()
        try:
            host = device_arrays(problem)
            dev = [cupy.asarray(host[name]) for name in ARRAY_ORDER]
            scalars = (np.int32(n), np.int32(width), np.int32(1 if problem.multi_tape else 0),
                       np.int64(problem.bucket_bytes))
            table = cupy.empty(problem.pairs * width, dtype=cupy.float32)
            diag = module.get_function("dp_diag")
            bulk = module.get_function("dp_bulk")
            for kind, a, b in launch_plan(n, band):
                gx, gy = grid(kind, n, width, a)
                if kind == "diag":
                    diag((gx, gy), (DIAG_THREADS,), (table, *dev, *scalars, np.int32(a), np.int32(b)))
                    if progress is not None:
                        progress(n + 1 - a)
                else:
                    bulk((gx, gy), (BULK_THREADS,), (table, *dev, *scalars, np.int32(a), np.int32(b)))
            top = int(problem.row(0, n))
            curve = table[top * width:(top + 1) * width].get()
            policy = None
            if 0 <= m_top < width and np.isfinite(curve[m_top]):
                policy = _recover_on_device(module, cupy, problem, table, dev, scalars, m_top)
            return curve, policy
        finally:
            table = dev = None  # noqa: F841  release before freeing the pool
            cupy.cuda.get_current_stream().synchronize()
            pool.free_all_blocks()


def _recover_on_device(module, cupy, problem: Problem, table, dev, scalars, m_top: int) -> Policy:
    n = problem.n
    nodes = 2 * n + 2
    out = cupy.zeros(4 * nodes, dtype=cupy.int32)
    stack = cupy.zeros(3 * nodes, dtype=cupy.int32)
    result = cupy.zeros(1, dtype=cupy.int32)
    module.get_function("dp_recover_kernel")((1,), (1,), (table, *dev, *scalars, np.int32(m_top), out,
                                                          np.int32(nodes), stack, np.int32(nodes), result))
    count = int(result.get()[0])
    if count < 0:
        raise RuntimeError(f"internal error: device recovery failed ({'infeasible state' if count == -1 else 'overflow'})")
    quads = out[:4 * count].get().reshape(count, 4)
    return policy_from_order(problem, quads)


def policy_from_order(problem: Problem, quads: np.ndarray) -> Policy:
    """Policy tree from the device walk's (i, j, m, k) quads, in recover_policy's visiting order."""
    return build_policy(problem, quads)
