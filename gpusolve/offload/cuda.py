"""CUDA backend of the combined recompute + offload DP: kernels/offload.cu run with CuPy.

Both planes C(i, j, m, 0) and C(i, j, m, 1) live on the device in one float32 buffer, plane 0 then
plane 1, each in the chain table layout of :mod:`gpusolve.dp.problem` (no sentinel row). Diagonals
d = 1..N are filled in order, one ``offload_diag`` launch each, covering every (i, m) of the diagonal on
both planes (kernels/offload_common.cuh: the CPU's float order, so both planes equal
:func:`gpusolve.offload.dp.solve_tables`' bit for bit). There is no banded bulk variant (the chain
backend's ``dp_bulk``): every checkpoint and swap is evaluated by the diagonal kernel.

Inputs: the chain arrays of :func:`gpusolve.dp.cuda.device_arrays` (reused as they are) and the
:class:`~gpusolve.offload.dp.SwapArrays` built on the host (w_off, e_overlap, e_full rounded once
there; pre_b as int32 clamped to W).

Recovery copies back only what it reads: :class:`DeviceOffloadTable` is an
:class:`~gpusolve.offload.dp.OffloadTable` whose planes are :class:`DevicePlane` views, and its
``policy`` is the CPU's walk and tie-break (:func:`gpusolve.offload.dp.recover`, unchanged), each of
its reads an element gather on the device: O(j - i) floats per visited state, at most 2N - 1 states
per policy. Only the curve row C(0, N, ., 0) is copied back after the fill, never the table
(:meth:`DeviceOffloadTable.host_planes` does, for tests).

Launch geometry has one home, :class:`OffloadGeometry`, whose values reach the kernel as ``#define``
lines prepended to the NVRTC source (offload_common.cuh's ``#ifndef`` defaults serve ``nvcc`` and the
host harness); :func:`gpusolve.dp.cuda.geometry_source` assembles that source and
:class:`gpusolve.dp.cuda.ModuleCache` memoizes the compiled modules per (device, geometry), as for the
chain backend.

This module imports without CuPy: :class:`OffloadGeometry`, :func:`kernel_source`,
:func:`device_arrays`, :func:`launch_plan` and the memory estimates are plain NumPy, shared with the
host harness that checks the kernel arithmetic in CI (tests/test_offload_kernel_host.py).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from ..chain import Chain
from ..dp import cuda as chain_cuda
from ..dp.problem import Problem
from ..errors import BackendUnavailableError  # noqa: F401  (callers catch offload.cuda.BackendUnavailableError)
from ..units import exact_bytes, format_bytes
from .dp import OffloadTable, SwapArrays
from .link import Link

COMPILE_OPTIONS = chain_cuda.COMPILE_OPTIONS
KERNEL_NAMES = ("offload_diag",)
SWAP_ORDER = ("w_off", "e_overlap", "e_full", "pre_b")
# Kernel arguments after the planes, in order; the scalars (n, width, multi_tape, bucket, d) follow.
ARRAY_ORDER = (*chain_cuda.ARRAY_ORDER, *SWAP_ORDER)
PLANES = 2  # float32 tables on the device per (i, j, m)
_MAX_GRID_Y = 65535
_ALLOC_SLACK = 24 * 512


# ---------------------------------------------------------------------------- launch geometry
@dataclass(frozen=True)
class OffloadGeometry:
    """Launch geometry of ``offload_diag``: the one place these numbers are written (``defines()``: the
    ``OL_*`` macros of kernels/offload_common.cuh)."""

    threads: int = 128  # threads per block; a block owns one pair of the diagonal
    mpt: int = 2        # buckets per thread (two planes each)
    ktile: int = 32     # k values staged in shared memory per tile

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"OffloadGeometry.{name} must be a positive int, got {value!r}")
        if self.threads % 32 or self.threads > 1024:
            raise ValueError(f"OffloadGeometry.threads must be a multiple of 32 and at most 1024, got {self.threads}")
        if self.ktile > self.threads:
            raise ValueError(f"OffloadGeometry.ktile ({self.ktile}) must not exceed threads ({self.threads})")

    @property
    def block_buckets(self) -> int:
        """Buckets one block covers along m."""
        return self.threads * self.mpt

    def defines(self) -> dict[str, int]:
        """The kernel's macros (names as in kernels/offload_common.cuh)."""
        return {"OL_THREADS": self.threads, "OL_MPT": self.mpt, "OL_KTILE": self.ktile}


GEOMETRY = OffloadGeometry()


# ---------------------------------------------------------------------------- sources
def kernel_source(geometry: OffloadGeometry | None = None) -> str:
    """The NVRTC translation unit: the geometry's #defines, then offload.cu with its headers inlined."""
    return chain_cuda.geometry_source(geometry or GEOMETRY, "offload.cu")


# ---------------------------------------------------------------------------- host-side arrays
def device_arrays(problem: Problem, swap: SwapArrays) -> dict[str, np.ndarray]:
    """The kernel's inputs as NumPy arrays (dtype and order as the kernel reads them): the chain
    backend's arrays and the swap terms."""
    arrays = chain_cuda.device_arrays(problem)  # float32 tables only (raises otherwise)
    width = problem.buckets + 1
    n = problem.n
    arrays.update(
        w_off=np.ascontiguousarray(swap.w_off, dtype=np.float32).reshape((n + 1) ** 2),
        e_overlap=np.ascontiguousarray(swap.e_overlap, dtype=np.float32).reshape((n + 1) ** 2),
        e_full=np.ascontiguousarray(swap.e_full, dtype=np.float32),
        # Compared with m - act_b[k] <= M only: clamping to W keeps every comparison and fits int32.
        pre_b=np.minimum(swap.pre_b, width).astype(np.int32),
    )
    return arrays


def scalars(problem: Problem) -> tuple:
    """(n, width, multi_tape, bucket), the scalar arguments before d, typed as the kernel reads them."""
    return (np.int32(problem.n), np.int32(problem.buckets + 1), np.int32(1 if problem.multi_tape else 0),
            np.int64(problem.bucket_bytes))


def launch_plan(n: int, width: int, geometry: OffloadGeometry | None = None) -> list[tuple[int, tuple[int, int]]]:
    """Launches in order: (d, (blocks along m, blocks along i)) for d = 1..N."""
    geometry = geometry or GEOMETRY
    gx = -(-width // geometry.block_buckets)
    if n + 1 > _MAX_GRID_Y:
        raise ValueError(f"{n} stages need {n} blocks along i, more than CUDA's {_MAX_GRID_Y}")
    return [(d, (gx, n + 1 - d)) for d in range(1, n + 1)]


# ---------------------------------------------------------------------------- memory
def _side_bytes(n: int) -> int:
    """Device bytes besides the planes: the chain arrays, the swap arrays, allocation rounding."""
    return (n + 1) ** 2 * 20 + (n + 1) * 64 + _ALLOC_SLACK


def device_bytes(n: int, buckets: int) -> int:
    """Device bytes of a solve: both planes (2 x 4 B per state) and the side arrays."""
    return PLANES * (n * (n + 1) // 2) * (buckets + 1) * 4 + _side_bytes(n)


def finest_fitting_bucket(budget_bytes: int, n: int, free_bytes: int) -> int:
    """The smallest bucket (bytes) whose planes fit in ``free_bytes`` (the budget itself if none does)."""
    pairs = max(1, n * (n + 1) // 2)
    columns = (free_bytes - _side_bytes(n)) // (PLANES * pairs * 4)  # = buckets + 1
    if columns < 2:
        return budget_bytes
    bucket = max(1, -(-budget_bytes // int(columns - 1)))
    while bucket < budget_bytes and device_bytes(n, budget_bytes // bucket) > free_bytes:
        bucket += 1
    return bucket


def _memory_message(problem: Problem, need: int, free: int) -> str:
    finest = finest_fitting_bucket(problem.bucket_bytes * problem.buckets, problem.n, free)
    return (f"the offload DP's two planes need {format_bytes(need)} of device memory at {problem.buckets} buckets "
            f"but {format_bytes(free)} may be used; use a bucket of at least {exact_bytes(finest)}")


# ---------------------------------------------------------------------------- availability
_MODULES = chain_cuda.ModuleCache(kernel_source, KERNEL_NAMES, "the CUDA offload kernel")


def ensure_available(geometry: OffloadGeometry | None = None) -> None:
    """Raise BackendUnavailableError with the reason when the offload CUDA backend cannot run here (no
    CuPy, no device, the chain kernels or the offload kernel fail to compile or load)."""
    _MODULES.ensure_available(geometry or GEOMETRY)


# ---------------------------------------------------------------------------- on-demand reads
class DevicePlane:
    """One plane (pairs x W float32) on the device, read element by element: ``plane[rows, cols]``
    (scalars or int arrays, broadcast, NumPy's index rules) gathers those elements on the device and
    copies only them back. Counts the bytes it copies in ``copied`` (shared by the views of a solve)."""

    def __init__(self, dev, offset: int, rows: int, width: int, copied: list):
        self._dev, self._offset = dev, int(offset)
        self.shape = (int(rows), int(width))
        self.dtype = np.dtype(np.float32)
        self._copied = copied

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        if not (isinstance(key, tuple) and len(key) == 2):
            raise TypeError("a device plane is read as plane[rows, cols]")
        rows, cols = np.broadcast_arrays(np.asarray(key[0], dtype=np.int64), np.asarray(key[1], dtype=np.int64))
        if rows.size == 0:
            return np.empty(rows.shape, dtype=np.float32)
        flat = []
        for index, size in ((rows, self.shape[0]), (cols, self.shape[1])):
            if np.any(index < -size) or np.any(index >= size):
                raise IndexError(f"index out of bounds for a device plane of shape {self.shape}")
            flat.append(np.where(index < 0, index + size, index))
        positions = self._offset + flat[0] * self.shape[1] + flat[1]
        import cupy
        out = self._dev[cupy.asarray(positions.reshape(-1))].get().reshape(rows.shape)
        self._copied[0] += out.nbytes
        return out[()] if out.ndim == 0 else out


class DeviceOffloadTable(OffloadTable):
    """Both planes filled on the device: ``curve`` (copied back) and policies recovered by
    :meth:`OffloadTable.policy` over :class:`DevicePlane` reads (the CPU's walk and tie-break,
    unchanged). ``copied_bytes`` counts what recovery copied back. Holds the device buffer until dropped."""

    def __init__(self, problem: Problem, swap: SwapArrays, planes_dev, curve: np.ndarray):
        self.problem, self.swap = problem, swap
        self._planes_dev = planes_dev
        self._copied = [0]
        pairs, width = problem.pairs, problem.buckets + 1
        self.planes = tuple(DevicePlane(planes_dev, s * pairs * width, pairs, width, self._copied) for s in (0, 1))
        self.curve = curve

    @property
    def copied_bytes(self) -> int:
        return int(self._copied[0])

    def host_planes(self) -> tuple[np.ndarray, np.ndarray]:
        """Both planes copied back whole (pairs x (M+1) each); for tests and debugging."""
        pairs, width = self.problem.pairs, self.problem.buckets + 1
        both = self._planes_dev[:PLANES * pairs * width].get().reshape(PLANES, pairs, width)
        return both[0], both[1]


# ---------------------------------------------------------------------------- solve
def fill(problem: Problem, chain: Chain, link: Link, progress=None, timings: dict | None = None,
         geometry: OffloadGeometry | None = None) -> DeviceOffloadTable:
    """Fill both planes for ``chain`` (discretised as ``problem``) over ``link`` on the device, as
    :func:`gpusolve.offload.dp.fill` on the CPU; returns a :class:`DeviceOffloadTable`.

    ``timings`` receives seconds: ``"device_setup"`` (memory check, arrays, uploads, allocation),
    ``"dp"`` (the launches to device synchronisation), ``"curve"`` and, when compiled now,
    ``"compile"``. ``progress(pairs)`` is called after each diagonal's launch."""
    geometry = geometry or GEOMETRY
    cupy = chain_cuda.import_cupy()
    with chain_cuda.torch_device():
        module = _MODULES.get(geometry, timings)
        started = time.perf_counter()
        n, width = problem.n, problem.buckets + 1
        need = device_bytes(n, problem.buckets)
        chain_cuda.check_device_memory(need, lambda free: _memory_message(problem, need, free))
        swap = SwapArrays.build(problem, chain, link)
        arrays = device_arrays(problem, swap)
        dev = [cupy.asarray(arrays[name]) for name in ARRAY_ORDER]
        planes = cupy.empty(max(1, PLANES * problem.pairs * width), dtype=cupy.float32)
        args_tail = scalars(problem)
        plan = launch_plan(n, width, geometry)
        stream = cupy.cuda.get_current_stream()
        stream.synchronize()
        started_dp = time.perf_counter()
        chain_cuda.add_time(timings, "device_setup", started_dp - started)
        kernel = module.get_function("offload_diag")
        for d, grid in plan:
            kernel(grid, (geometry.threads,), (planes, *dev, *args_tail, np.int32(d)))
            if progress is not None:
                progress(grid[1])
        stream.synchronize()
        started_curve = time.perf_counter()
        chain_cuda.add_time(timings, "dp", started_curve - started_dp)
        top = int(problem.row(0, n))
        curve = planes[top * width:(top + 1) * width].get()
        chain_cuda.add_time(timings, "curve", time.perf_counter() - started_curve)
        return DeviceOffloadTable(problem, swap, planes, curve)


__all__ = ["OffloadGeometry", "GEOMETRY", "DeviceOffloadTable", "DevicePlane", "device_arrays", "device_bytes",
           "ensure_available", "fill", "kernel_source", "launch_plan"]
