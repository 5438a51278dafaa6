"""CUDA backend of the join DP: kernels/join.cu (one launch per hyperplane) run with CuPy.

The branch chain tables C^b are filled on the device by the chain backend (:mod:`gpusolve.dp.cuda`,
unchanged) and copied device to device into one buffer (the chain backend reuses its workspace for
the next branch); the J table (one float32 row of M+1 buckets per state, :class:`JoinProblem`'s row
order) is then filled by hyperplanes |s| = d, d = sum(l) .. 0, one ``join_plane`` launch each
(Note [Hyperplanes] in :mod:`gpusolve.join.dp`). Only the curve row J(0, 0, .) is copied back after
the fill.

Recovery reads on demand: :class:`DeviceJoinTable` is a :class:`~gpusolve.join.dp.JoinTable` whose
J table and chain tables are device views (:class:`DeviceRows`); the host walk of
:meth:`JoinTable.policy` (the one statement of the tie-break) copies back only the rows and elements
it reads: at each visited state its successors' rows (at most 1 + sum(l) rows) and the chain rows of
its checkpoints, then single elements for the branch segments' chain policies. The table is never
copied back whole (:meth:`DeviceJoinTable.host_table` does, for tests).

Launch geometry has one home, :class:`JoinGeometry`, whose values reach the kernel as ``#define``
lines prepended to the NVRTC source (join_common.cuh's ``#ifndef`` defaults serve ``nvcc`` and the
host harness); :func:`gpusolve.dp.cuda.geometry_source` assembles that source and
:class:`gpusolve.dp.cuda.ModuleCache` memoizes the compiled modules per (device, geometry), as for the
chain backend.

This module imports without CuPy: :class:`JoinGeometry`, :func:`kernel_source`,
:func:`device_arrays`, :func:`launch_plan` and the memory estimates are plain NumPy, shared with the
host harness that checks the kernel arithmetic in CI (tests/test_join_kernel_host.py).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from ..dp import cuda as chain_cuda
from ..dp.problem import ceil_div
from ..errors import BackendUnavailableError  # noqa: F401  (callers catch join.cuda.BackendUnavailableError)
from ..units import exact_bytes, format_bytes
from .dp import JoinProblem, JoinTable

COMPILE_OPTIONS = chain_cuda.COMPILE_OPTIONS
KERNEL_NAMES = ("join_plane",)
# Per-branch arrays taken from gpusolve.dp.cuda.device_arrays, concatenated over the branches.
BRANCH_ARRAYS = ("t_tape", "prefix", "act_b", "tape_b", "tape_fwd", "tape_need")  # l_b + 1 entries
BRANCH_SQUARE = ("peak_q", "peak_r")                                                 # (l_b + 1)^2 entries
# Kernel arguments after (J, ctab, plane_rows, plane_start), in order; the scalars follow
# (k, width, bucket, turn_need, t_turn).
ARRAY_ORDER = ("row_u", "row_release", "row_others", "meta", *BRANCH_ARRAYS, *BRANCH_SQUARE)
META_COLUMNS = 8  # JN_META; columns JN_LEN, JN_MULTI, JN_STRIDE, JN_FLAGGED, JN_OFF1, JN_OFF2, JN_CTAB
_MAX_GRID_Y = 65535
_ALLOC_SLACK = 32 * 512


# ---------------------------------------------------------------------------- launch geometry
@dataclass(frozen=True)
class JoinGeometry:
    """Launch geometry of ``join_plane``: the one place these numbers are written (``defines()``:
    the ``JN_*`` macros of kernels/join_common.cuh)."""

    threads: int = 128   # threads per block; a block owns one state of the hyperplane
    mpt: int = 2         # buckets per thread

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"JoinGeometry.{name} must be a positive int, got {value!r}")
        if self.threads % 32 or self.threads > 1024:
            raise ValueError(f"JoinGeometry.threads must be a multiple of 32 and at most 1024, got {self.threads}")

    @property
    def block_buckets(self) -> int:
        return self.threads * self.mpt

    def defines(self) -> dict[str, int]:
        return {"JN_THREADS": self.threads, "JN_MPT": self.mpt}


GEOMETRY = JoinGeometry()


# ---------------------------------------------------------------------------- sources
def kernel_source(geometry: JoinGeometry | None = None) -> str:
    """The NVRTC translation unit: the geometry's #defines, then join.cu with its headers inlined."""
    return chain_cuda.geometry_source(geometry or GEOMETRY, "join.cu")


# ---------------------------------------------------------------------------- host-side arrays
def chain_table_offsets(jp: JoinProblem) -> tuple[list[int], int]:
    """Element offset of each branch's chain table in the one buffer holding them, and its size."""
    width = jp.buckets + 1
    offsets, total = [], 0
    for p in jp.problems:
        offsets.append(total)
        if p is not None:
            total += p.pairs * width
    return offsets, total


def device_arrays(jp: JoinProblem) -> dict:
    """The kernel's inputs as NumPy arrays (dtype and order as the kernel reads them), plus
    ``planes`` ((start, count) of each hyperplane in ``plane_rows``) and the scalars."""
    if np.dtype(jp.dtype) != np.float32:
        raise ValueError("the CUDA backend solves float32 tables only")
    k, width = jp.net.k, jp.buckets + 1
    if jp.release.max(initial=0) + width >= 2**31 - 1:
        raise ValueError("the join CUDA backend needs R(f) + M + 1 < 2^31 buckets")
    offsets, _ = chain_table_offsets(jp)
    meta = np.zeros((k, META_COLUMNS), dtype=np.int64)
    parts: dict[str, list] = {name: [] for name in BRANCH_ARRAYS + BRANCH_SQUARE}
    off1 = off2 = 0
    for b, p in enumerate(jp.problems):
        length = jp.lengths[b]
        meta[b] = (length, int(p is not None and p.multi_tape), jp.stride[b], int(jp.radix[b] == length + 2),
                   off1, off2, offsets[b], 0)
        if p is None:
            continue
        arrays = chain_cuda.device_arrays(p)
        for name in BRANCH_ARRAYS:
            parts[name].append(arrays[name])
        for name in BRANCH_SQUARE:
            parts[name].append(np.ascontiguousarray(arrays[name]).reshape(-1))
        off1 += length + 1
        off2 += (length + 1) ** 2
    dtypes = {"t_tape": np.float32, "prefix": np.float64, "act_b": np.int32, "tape_b": np.int32,
              "tape_fwd": np.int64, "tape_need": np.int64, "peak_q": np.int32, "peak_r": np.int64}
    out = {name: (np.concatenate(parts[name]) if parts[name] else np.zeros(0)).astype(dtypes[name])
           for name in parts}
    counts = [len(rows) for rows in jp.planes]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    out.update(
        plane_rows=np.concatenate(jp.planes).astype(np.int64),
        row_u=np.ascontiguousarray(jp.u.astype(np.int32)),
        row_release=jp.release.astype(np.int32),
        row_others=np.ascontiguousarray(jp.others.astype(np.int64)),
        meta=meta,
        planes=[(int(starts[d]), counts[d]) for d in range(len(counts))],
        k=k, width=width, bucket=int(jp.bucket_bytes),
        turn_need=int(min(ceil_div(jp.turn_need, jp.bucket_bytes), width)),
        t_turn=np.float32(jp.t_turn),
    )
    return out


def launch_plan(jp: JoinProblem, geometry: JoinGeometry | None = None, arrays: dict | None = None) -> list:
    """Launches in order: (d, plane_start, count, grid) for d = sum(l) .. 0, grid = (count, buckets blocks)."""
    geometry = geometry or GEOMETRY
    planes = (arrays or device_arrays(jp))["planes"]
    width = jp.buckets + 1
    gy = -(-width // geometry.block_buckets)
    if gy > _MAX_GRID_Y:
        raise ValueError(f"{width} buckets need {gy} blocks along m, more than CUDA's {_MAX_GRID_Y}; use a larger "
                         f"JoinGeometry.mpt or fewer buckets")
    return [(d, start, count, (count, gy)) for d, (start, count) in reversed(list(enumerate(planes))) if count]


# ---------------------------------------------------------------------------- memory
def device_bytes_for(net, buckets: int) -> int:
    """Device bytes of a join solve of ``net`` at ``buckets``: the J table, the chain tables, the chain
    backend's workspace for the largest branch (table and sentinel row), side arrays and rounding."""
    rows = 1
    for n in net.lengths:  # JoinProblem's layout: u_b in 0..l_b (+1 when the turn frees its inputs)
        rows *= n + 2 if n > 0 and net.turn.frees_inputs else n + 1
    lengths = [n for n in net.lengths if n > 0]
    width = buckets + 1
    ctab = sum(n * (n + 1) // 2 for n in lengths) * width
    chain_ws = max((chain_cuda.device_bytes(n, buckets) for n in lengths), default=0)
    side = rows * (net.k * 12 + 4 + 8) + sum((n + 1) ** 2 * 12 + (n + 1) * 40 for n in lengths)
    return (rows * width + ctab) * 4 + chain_ws + side + _ALLOC_SLACK


def device_bytes(jp: JoinProblem) -> int:
    """:func:`device_bytes_for` of a built problem."""
    return device_bytes_for(jp.net, jp.buckets)


def choose_device_bucket(net, budget_bytes: int, bucket, default_bucket: int, notes: list[str]) -> int:
    """The bucket for a CUDA join solve: ``bucket`` (the user's, already checked) when its tables fit
    the device, else ``MemoryError`` naming the finest that fits; without a user bucket
    ``default_bucket``, coarsened (with a note) until they fit."""
    free = chain_cuda.solve_free_bytes()
    chosen = bucket if bucket is not None else default_bucket
    need = device_bytes_for(net, budget_bytes // chosen)
    if need <= free:
        return chosen
    if device_bytes_for(net, 1) > free:
        raise MemoryError(f"the join tables need {format_bytes(device_bytes_for(net, 1))} of device memory even "
                          f"with 1 bucket but {format_bytes(free)} may be used; solve fewer or shorter branches")
    lo, hi = chosen, max(chosen, budget_bytes)  # the finest bucket that fits: need falls as the bucket grows
    while lo < hi:
        mid = (lo + hi) // 2
        if device_bytes_for(net, budget_bytes // mid) <= free:
            hi = mid
        else:
            lo = mid + 1
    finest = lo
    if bucket is not None:
        raise MemoryError(f"the join tables need {format_bytes(need)} of device memory at bucket "
                          f"{format_bytes(chosen)} but {format_bytes(free)} may be used; use a bucket of at least "
                          f"{exact_bytes(finest)}")
    notes.append(f"the join tables at bucket {format_bytes(chosen)} need {format_bytes(need)} of device memory but "
                 f"{format_bytes(free)} may be used; using bucket {format_bytes(finest)}")
    return finest


# ---------------------------------------------------------------------------- availability
_MODULES = chain_cuda.ModuleCache(kernel_source, KERNEL_NAMES, "the CUDA join kernel")


def ensure_available(geometry: JoinGeometry | None = None) -> None:
    """Raise BackendUnavailableError with the reason when the join CUDA backend cannot run here
    (no CuPy, no device, the chain kernels or the join kernel fail to compile or load)."""
    _MODULES.ensure_available(geometry or GEOMETRY)


# ---------------------------------------------------------------------------- on-demand reads
class DeviceRows:
    """A rows x W float32 table on the device, read on demand: ``view[i]`` (one row) and
    ``view[rows]`` (an int array of rows) copy only those rows back; ``reshape(-1)`` gives the flat
    view that :func:`gpusolve.dp.recover.table_lookup` indexes element by element. Counts what it
    copies in ``copied`` (a one-element list shared by the views of one solve)."""

    def __init__(self, dev, copied: list):
        self._dev = dev
        self.shape = tuple(int(v) for v in dev.shape)
        self.dtype = np.dtype(np.float32)
        self._copied = copied
        self._rows: dict[int, np.ndarray] = {}  # rows already copied back (a filled table never changes)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        import cupy
        if len(self.shape) == 1:  # flat view: single elements, no cache
            out = self._dev[cupy.asarray(np.asarray(index, dtype=np.int64))].get()
            self._copied[0] += out.nbytes
            return out
        if isinstance(index, (int, np.integer)):
            return self[np.array([index], dtype=np.int64)][0]
        index = np.asarray(index, dtype=np.int64)
        missing = np.unique(index[[int(r) not in self._rows for r in index.reshape(-1)]]) if index.size else index
        if len(missing):
            fetched = self._dev[cupy.asarray(missing)].get()
            self._copied[0] += fetched.nbytes
            self._rows.update(zip(missing.tolist(), fetched, strict=True))
        out = np.empty(index.shape + self.shape[1:], dtype=self.dtype)
        for pos, r in np.ndenumerate(index):
            out[pos] = self._rows[int(r)]
        return out

    def reshape(self, *shape):
        if shape not in ((-1,), ((-1,),)):
            raise ValueError("a device table view reshapes only to (-1,)")
        return DeviceRows(self._dev.reshape(-1), self._copied)


class _ChainOnDevice:
    """What :class:`JoinTable` needs of a filled chain table: ``.table``."""

    def __init__(self, table: DeviceRows):
        self.table = table


# Tables up to this size are copied to the host whole at the first recovery: on the H100 (2026-11-26,
# join_speed_nvidia_h100_80gb_hbm3.json) recovery and candidates read row by row took 0.10-0.55 s against a
# 1 ms fill for two ResNet-50 branches, whose J and chain tables hold 1.1-16.4 MB at 256-4095 buckets
# (slower than the CPU backend's 0.03-0.44 s).
HOST_COPY_BYTES = 256 << 20


class DeviceJoinTable(JoinTable):
    """A J table filled on the device: ``curve`` (copied back) and policies recovered by
    :meth:`JoinTable.policy` (the CPU's walk and tie-break, unchanged), over the tables copied to the
    host whole where they hold at most :data:`HOST_COPY_BYTES`, else over on-demand reads.
    ``copied_bytes`` counts what recovery copied back. Holds the device buffers until dropped."""

    def __init__(self, jp: JoinProblem, table_dev, ctab_dev, timings: dict | None):
        width = jp.buckets + 1
        self._copied = [0]
        self._on_host = False
        self._table_dev, self._ctab_dev = table_dev, ctab_dev
        offsets, _ = chain_table_offsets(jp)
        chains = [None if p is None else
                  _ChainOnDevice(DeviceRows(ctab_dev[offsets[b]:offsets[b] + p.pairs * width].reshape(p.pairs, width),
                                            self._copied))
                  for b, p in enumerate(jp.problems)]
        super().__init__(jp, DeviceRows(table_dev.reshape(jp.rows, width), self._copied), chains, timings)

    @property
    def copied_bytes(self) -> int:
        return int(self._copied[0])

    def policy(self, m: int):
        if not self._on_host and self._table_dev.nbytes + self._ctab_dev.nbytes <= HOST_COPY_BYTES:
            self.table = self.host_table()
            self.ctables = self.host_chain_tables()
            self._copied[0] += self.table.nbytes + sum(t.nbytes for t in self.ctables if t is not None)
            self._on_host = True
        return super().policy(m)

    def host_table(self) -> np.ndarray:
        """The whole J table copied back (rows x (M+1)); for tests and debugging."""
        return self._table_dev.reshape(self.problem.rows, self.problem.buckets + 1).get()

    def host_chain_tables(self) -> list:
        """Every branch chain table copied back (None for an empty branch)."""
        width = self.problem.buckets + 1
        offsets, _ = chain_table_offsets(self.problem)
        return [None if p is None else self._ctab_dev[offsets[b]:offsets[b] + p.pairs * width].get()
                .reshape(p.pairs, width) for b, p in enumerate(self.problem.problems)]


# ---------------------------------------------------------------------------- solve
def fill(jp: JoinProblem, progress=None, timings: dict | None = None, geometry: JoinGeometry | None = None,
         chain_geometry=None) -> DeviceJoinTable:
    """Fill the chain tables and J on the device; returns a :class:`DeviceJoinTable`.

    ``timings`` receives seconds: ``"chain_tables"`` (the chain backend's fills and the device
    copies), ``"device_setup"`` (memory check, arrays, uploads, allocation), ``"dp"`` (the
    hyperplane launches to device synchronisation), ``"curve"`` and, when compiled now, ``"compile"``.
    ``progress(rows)`` is called after each hyperplane's launch."""
    geometry = geometry or GEOMETRY
    cupy = chain_cuda.import_cupy()
    with chain_cuda.torch_device():
        module = _MODULES.get(geometry, timings)
        started = time.perf_counter()
        need = device_bytes(jp)
        chain_cuda.check_device_memory(need, lambda free: (
            f"the join tables need {format_bytes(need)} of device memory at {jp.buckets} buckets but "
            f"{format_bytes(free)} may be used; use a coarser bucket"))
        width = jp.buckets + 1
        offsets, total = chain_table_offsets(jp)
        ctab = cupy.empty(max(total, 1), dtype=cupy.float32)
        chain_timings: dict = {}
        for b, p in enumerate(jp.problems):
            if p is None:
                continue
            handle = chain_cuda.fill(p, timings=chain_timings, geometry=chain_geometry)
            # The chain backend keeps its table in a per-device workspace that the next fill reuses:
            # copy it (device to device, without the sentinel row) into this solve's buffer.
            ctab[offsets[b]:offsets[b] + p.pairs * width] = handle.device_rows()
        chain_cuda.add_time(timings, "compile", chain_timings.get("compile", 0.0))
        clock = time.perf_counter()
        chain_cuda.add_time(timings, "chain_tables", clock - started)
        arrays = device_arrays(jp)
        plan = launch_plan(jp, geometry, arrays)
        plane_rows = cupy.asarray(arrays["plane_rows"])
        dev = {name: cupy.asarray(arrays[name]) for name in ARRAY_ORDER}
        table = cupy.empty(jp.rows * width, dtype=cupy.float32)
        scalars = (np.int32(arrays["k"]), np.int32(width), np.int64(arrays["bucket"]),
                   np.int32(arrays["turn_need"]), np.float32(arrays["t_turn"]))
        stream = cupy.cuda.get_current_stream()
        stream.synchronize()
        started_dp = time.perf_counter()
        chain_cuda.add_time(timings, "device_setup", started_dp - clock)
        kernel = module.get_function("join_plane")
        for _d, start, count, grid in plan:
            args = (table, ctab, plane_rows, np.int64(start), *(dev[name] for name in ARRAY_ORDER), *scalars)
            kernel(grid, (geometry.threads,), args)
            if progress is not None:
                progress(count)
        stream.synchronize()
        started_curve = time.perf_counter()
        chain_cuda.add_time(timings, "dp", started_curve - started_dp)
        handle = DeviceJoinTable(jp, table, ctab, timings)
        handle._copied[0] = 0  # the curve row is not recovery's
        chain_cuda.add_time(timings, "curve", time.perf_counter() - started_curve)
        return handle
