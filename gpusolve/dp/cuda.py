"""CUDA backend: raw CUDA C++ kernels (kernels/dp.cu, shipped as ``gpusolve.kernels``) run with CuPy.

The table lives on the device in the layout of :mod:`gpusolve.dp.problem` (one float32 row of M+1
buckets per pair, by diagonal), followed by one +inf sentinel row. Diagonals are solved in order;
each launch covers every (i, m) of a diagonal (see ``kernels/dp.cu`` for the kernels and
``bench/SOLVER_NOTES.md`` for the design). A policy is recovered on the device by one block that
visits the states in order and evaluates each state's checkpoints in parallel, several policies in
one launch (a block each: :meth:`DeviceTable.prefetch`); only the curve row and the visited states
(at most 2N - 1 quads per policy) are copied back, never the table.

Launch geometry has one home: :class:`Geometry`. Its values reach the kernels as ``#define`` lines
prepended to the NVRTC source (the header's ``#ifndef`` defaults serve ``nvcc`` and the host
harness), so the launches below and the kernels cannot disagree. Compiled modules are memoized per
(device, geometry).

The join and offload backends (:mod:`gpusolve.join.cuda`, :mod:`gpusolve.offload.cuda`) run after
this one and use its public helpers: :func:`geometry_source` (their NVRTC source),
:class:`ModuleCache` (compilation and its errors), :func:`import_cupy`, :class:`torch_device`,
:func:`check_device_memory`, :func:`add_time` and :meth:`DeviceTable.device_rows`.

The table and the uploaded side arrays stay on the device between solves (a per-device
*workspace*): a solve whose table is no larger reuses the buffer, identical side arrays are not
uploaded again. :func:`release` frees the workspace and empties CuPy's memory pool; call it
before handing the memory back to another allocator (torch).

This module imports without CuPy: :class:`Geometry`, :func:`device_arrays`, :func:`launch_plan`
and the memory estimates are plain NumPy, shared with the host harness that checks the kernel
arithmetic in CI.
"""
from __future__ import annotations

import gc
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailableError
from ..schedule import Policy
from .buckets import DEVICE_MEMORY_FRACTION, device_memory_message
from .problem import BYTES_PER_STATE, Problem
from .recover import build_policy

# Options handed to cupy.RawModule (CuPy adds -ftz=true, the arch and its include paths);
# bench/nvrtc_check.py compiles with exactly these.
COMPILE_OPTIONS = ("--std=c++14",)
KERNEL_NAMES = ("dp_diag", "dp_bulk", "dp_recover")
# Timing keys that are parts of others (device_setup's, recover's), not phases of their own: a sum of the
# phases leaves them out (bench/frontend_timings.py).
SUB_PHASES = ("device_check", "device_upload", "device_table", "recover_walks")
# One dp_recover launch walks up to this many policies, one block each (DeviceTable.prefetch): the
# optimum at the budget and every slack-band column a solve may try (Note [Exact candidates] in
# gpusolve/solve.py: up to 1 + 255 for its 8 tries), instead of one launch and copy back per policy.
RECOVERY_BATCH = 256
# CuPy rounds every allocation up to 512 bytes; 16 arrays of slack.
_ALLOC_SLACK = 16 * 512


# ---------------------------------------------------------------------------- launch geometry
@dataclass(frozen=True)
class Geometry:
    """Launch geometry of the kernels: the one place these numbers are written.

    ``defines()`` gives the ``DP_*`` macros of ``kernels/dp_common.cuh``; :func:`kernel_source`
    prepends them to the NVRTC source and the tests build the host harness with them.
    """

    diag_threads: int = 128   # dp_diag: threads per block
    diag_mpt: int = 4         # dp_diag: buckets per thread
    ktile: int = 32           # dp_diag: k values staged per tile
    band: int = 8             # dp_bulk: diagonals per band, band x band pairs per block
    bulk_threads: int = 128   # dp_bulk: threads per block, one bucket each
    bulk_ktile: int = 8       # dp_bulk: k values staged per tile
    rec_threads: int = 256    # dp_recover: threads of a block (one block per policy walked)

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Geometry.{name} must be a positive int, got {value!r}")
        for name in ("diag_threads", "bulk_threads", "rec_threads"):
            value = getattr(self, name)
            if value % 32 or value > 1024:
                raise ValueError(f"Geometry.{name} must be a multiple of 32 and at most 1024, got {value}")
        if self.ktile > self.diag_threads:
            raise ValueError(f"Geometry.ktile ({self.ktile}) must not exceed diag_threads ({self.diag_threads})")
        if self.bulk_ktile > self.bulk_threads:
            raise ValueError(f"Geometry.bulk_ktile ({self.bulk_ktile}) must not exceed bulk_threads "
                             f"({self.bulk_threads})")

    @property
    def first_band(self) -> int:
        """First diagonal of the first bulk band; below it dp_diag does every checkpoint."""
        return 2 * self.band

    def defines(self) -> dict[str, int]:
        """The kernels' macros (names as in kernels/dp_common.cuh)."""
        return {"DP_DIAG_THREADS": self.diag_threads, "DP_DIAG_MPT": self.diag_mpt, "DP_KTILE": self.ktile,
                "DP_BAND": self.band, "DP_BULK_THREADS": self.bulk_threads, "DP_BULK_KTILE": self.bulk_ktile,
                "DP_REC_THREADS": self.rec_threads}


GEOMETRY = Geometry()


# ---------------------------------------------------------------------------- sources
def kernel_dir() -> Path:
    """Folder of the .cu/.cuh sources (installed package data, or the repository's kernels/)."""
    try:
        from .. import kernels  # type: ignore[attr-defined]  # installed as gpusolve.kernels
        return Path(kernels.__file__).parent
    except ImportError:
        return Path(__file__).resolve().parents[2] / "kernels"


def inline_source(name: str, seen: set | None = None) -> str:
    """``name`` from the kernel folder with its quoted #includes inlined once each (NVRTC gets one
    translation unit; ``#pragma once`` dropped)."""
    seen = set() if seen is None else seen
    if name in seen:
        return ""
    seen.add(name)
    text = (kernel_dir() / name).read_text().replace("#pragma once\n", "", 1)
    return re.sub(r'^#include "([^"]+)"\n', lambda m: inline_source(m.group(1), seen), text, flags=re.M)


def geometry_source(geometry, entry: str) -> str:
    """The NVRTC translation unit of a backend: ``geometry.defines()`` as #define lines (naming the
    geometry's class, their one home), then ``entry`` (a .cu of the kernel folder) with its headers
    inlined (:func:`inline_source`). The headers' ``#ifndef`` defaults yield to these #defines."""
    defines = "".join(f"#define {name} {value}\n" for name, value in geometry.defines().items())
    kind = type(geometry)
    return f"// launch geometry: {kind.__module__}.{kind.__qualname__}\n" + defines + inline_source(entry)


def kernel_source(geometry: Geometry | None = None) -> str:
    """The NVRTC translation unit: the geometry's #defines, then dp.cu with dp_common.cuh inlined."""
    return geometry_source(geometry or GEOMETRY, "dp.cu")


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


def launch_plan(n: int, band: bool = True, geometry: Geometry | None = None) -> list[tuple[str, int, int]]:
    """Kernel launches in order: ("diag", d, band_start) and ("bulk", band_start, band_len).

    With ``band`` the diagonals from ``geometry.first_band`` on are grouped by ``geometry.band``: one
    bulk launch (the checkpoints whose sub-pairs lie below the band) then one diag launch per
    diagonal (the rest).
    """
    geometry = geometry or GEOMETRY
    plan: list[tuple[str, int, int]] = []
    d = 1
    while d <= n:
        if band and d >= geometry.first_band:
            length = min(geometry.band, n - d + 1)
            plan.append(("bulk", d, length))
            for e in range(d, d + length):
                plan.append(("diag", e, d))
            d += length
        else:
            plan.append(("diag", d, 0))
            d += 1
    return plan


def grid(kind: str, n: int, width: int, a: int, geometry: Geometry | None = None) -> tuple[int, int]:
    """(blocks along m, blocks along i) of a launch: a = d for diag, the band start for bulk."""
    geometry = geometry or GEOMETRY
    if kind == "diag":
        return -(-width // (geometry.diag_threads * geometry.diag_mpt)), n + 1 - a
    return -(-width // geometry.bulk_threads), -(-(n + 1 - a) // geometry.band)


def block(kind: str, geometry: Geometry | None = None) -> int:
    """Threads per block of a launch kind ("diag", "bulk", "recover")."""
    geometry = geometry or GEOMETRY
    return {"diag": geometry.diag_threads, "bulk": geometry.bulk_threads, "recover": geometry.rec_threads}[kind]


# ---------------------------------------------------------------------------- memory
def _side_bytes(n: int) -> int:
    """Device bytes besides the table: the side arrays, the recovery buffers (a whole batch),
    allocation rounding."""
    nodes = 2 * n + 2
    return (n + 1) ** 2 * 12 + (n + 1) * 56 + RECOVERY_BATCH * (7 * nodes + 2) * 4 + _ALLOC_SLACK


def device_bytes(n: int, buckets: int) -> int:
    """Device bytes of a solve: the table (4 B per state, plus the +inf sentinel row) and the rest."""
    rows = n * (n + 1) // 2 + 1
    return rows * (buckets + 1) * BYTES_PER_STATE + _side_bytes(n)


def finest_fitting_bucket(budget_bytes: int, n: int, free_bytes: int) -> int:
    """The smallest bucket (bytes) whose table fits in ``free_bytes``."""
    rows = n * (n + 1) // 2 + 1
    columns = (free_bytes - _side_bytes(n)) // (rows * BYTES_PER_STATE)  # = buckets + 1
    if columns < 2:
        return budget_bytes
    bucket = max(1, -(-budget_bytes // int(columns - 1)))
    while device_bytes(n, budget_bytes // bucket) > free_bytes:
        bucket += 1
    return bucket


def free_device_bytes() -> int:
    """Device memory a solve could use now: the driver's free bytes, CuPy's pooled free blocks, and
    what this module's workspace holds on the current device (it is released before a larger
    table is allocated)."""
    import cupy
    free, _total = cupy.cuda.runtime.memGetInfo()
    held = _workspace_bytes(cupy.cuda.Device().id)
    return int(free) + int(cupy.get_default_memory_pool().free_bytes()) + held


def solve_free_bytes() -> int:
    """Device bytes a solve may take now on torch's (or CuPy's) current device: the fraction
    :data:`gpusolve.dp.buckets.DEVICE_MEMORY_FRACTION` of :func:`free_device_bytes`."""
    with torch_device():
        return _usable_device_bytes()


def _usable_device_bytes() -> int:
    return int(DEVICE_MEMORY_FRACTION * free_device_bytes())


def check_device_memory(need: int, message) -> None:
    """Raise ``MemoryError(message(free))`` when a solve needing ``need`` device bytes does not fit in
    the bytes a solve may take now (``free``, as :func:`solve_free_bytes`). Call inside
    :class:`torch_device`; the three CUDA backends check their tables with it before allocating."""
    free = _usable_device_bytes()
    if need > free:
        raise MemoryError(message(free))


# ---------------------------------------------------------------------------- availability
def import_cupy():
    """The ``cupy`` module, or BackendUnavailableError saying why it cannot be imported (and how to
    install it)."""
    try:
        import cupy  # noqa: F401
    except ImportError as err:
        raise BackendUnavailableError(f"CuPy is not installed or cannot be imported ({_one_line(err)}); "
                                      f"pip install 'gpusolve[cuda13]' (CUDA 13 drivers, torch cu13x) or "
                                      f"'gpusolve[cuda12]' (CUDA 12)") from None
    except Exception as err:  # CuPy present but broken (missing CUDA libraries, ...)
        raise BackendUnavailableError(f"CuPy cannot be imported: {type(err).__name__}: {_one_line(err)}") from None
    return cupy


def _one_line(err: BaseException) -> str:
    """The last non-empty line of an error (CuPy's import errors are a page long)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip() and not set(line.strip()) <= {"="}]
    return lines[-1] if lines else type(err).__name__


def ensure_available(geometry: Geometry | None = None) -> None:
    """Raise BackendUnavailableError with the reason when the CUDA backend cannot run here."""
    cupy = import_cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:
        raise BackendUnavailableError(f"CuPy sees no CUDA device ({type(err).__name__}: {_one_line(err)})") from None
    if count < 1:
        raise BackendUnavailableError("CuPy sees no CUDA device")
    with torch_device():
        _MODULES.get(geometry or GEOMETRY)


class ModuleCache:
    """Compiled ``cupy.RawModule`` objects of one backend's kernels, memoized per (device, geometry); a
    geometry whose source failed to compile or load keeps its one-line error (raised again, not
    recompiled). Shared by the chain, join and offload backends.

    ``source(geometry)`` gives the NVRTC source, ``kernel_names`` the kernels loaded at once (so a
    failure shows here, not at the first launch), ``what`` names them in the error ("the CUDA join
    kernel")."""

    def __init__(self, source, kernel_names: tuple[str, ...], what: str):
        self.source, self.kernel_names, self.what = source, tuple(kernel_names), what
        self._modules: dict = {}  # (device id, geometry) -> compiled cupy.RawModule
        self._errors: dict = {}   # (device id, geometry) -> one-line compile error

    def get(self, geometry, timings: dict | None = None):
        """The compiled RawModule for the current device and ``geometry`` (compiled once per process;
        CuPy also caches the binary on disk). Compile time goes to ``timings["compile"]``."""
        cupy = import_cupy()
        key = (cupy.cuda.Device().id, geometry)
        module = self._modules.get(key)
        if module is not None:
            return module
        if key in self._errors:
            raise BackendUnavailableError(self._errors[key])
        started = time.perf_counter()
        try:
            module = cupy.RawModule(code=self.source(geometry), options=COMPILE_OPTIONS)
            for name in self.kernel_names:
                module.get_function(name)  # forces compilation and loading now
        except Exception as err:
            first = str(err).strip().splitlines()
            self._errors[key] = (f"{self.what} failed to compile or load: {type(err).__name__}: "
                                 f"{' | '.join(first[:6])}")
            raise BackendUnavailableError(self._errors[key]) from None
        add_time(timings, "compile", time.perf_counter() - started)
        self._modules[key] = module
        return module

    def ensure_available(self, geometry) -> None:
        """For kernels that run after the chain backend's (join, offload): raise
        BackendUnavailableError with the reason when the chain backend cannot run here (no CuPy, no
        device, the chain kernels fail) or these kernels fail to compile or load at ``geometry``."""
        ensure_available()
        with torch_device():
            self.get(geometry)


_MODULES = ModuleCache(kernel_source, KERNEL_NAMES, "the CUDA kernels")


class _TorchStreamHandle:
    """The CUDA stream protocol over a raw handle, for a torch whose streams lack ``__cuda_stream__``."""

    def __init__(self, ptr: int):
        self._ptr = int(ptr)

    def __cuda_stream__(self):
        return (0, self._ptr)


def _external_stream(cupy, torch_stream, device_id: int):
    """A CuPy stream over torch's: ``Stream.from_external`` (CuPy >= 14), else ``ExternalStream``."""
    if hasattr(cupy.cuda.Stream, "from_external"):
        obj = torch_stream if hasattr(torch_stream, "__cuda_stream__") else _TorchStreamHandle(torch_stream.cuda_stream)
        return cupy.cuda.Stream.from_external(obj)
    return cupy.cuda.ExternalStream(torch_stream.cuda_stream, device_id)


class torch_device:
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
                index = torch.cuda.current_device()
                device = cupy.cuda.Device(index)
                device.__enter__()
                self._stack.append(device)
                stream = _external_stream(cupy, torch.cuda.current_stream(), index)
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


# ---------------------------------------------------------------------------- workspace
class _Workspace:
    """Device buffers kept between solves on one device: the table, the side arrays (with the host
    arrays they were uploaded from, to skip identical uploads) and the recovery buffers."""

    def __init__(self):
        self.table = None
        self.host: dict[str, np.ndarray] = {}
        self.dev: dict = {}
        self.recovery = None  # (m_tops, out, stack, result), for self.batch walks of self.nodes states
        self.nodes = 0
        self.batch = 0

    def held_bytes(self) -> int:
        arrays = [self.table, *self.dev.values(), *(self.recovery or ())]
        return sum(int(a.nbytes) for a in arrays if a is not None)

    def table_for(self, cupy, elements: int):
        """A float32 buffer of at least ``elements``: the kept one when large enough."""
        if self.table is None or self.table.size < elements:
            self.table = None
            cupy.get_default_memory_pool().free_all_blocks()  # the old buffer goes back before the new one
            self.table = cupy.empty(elements, dtype=cupy.float32)
        return self.table

    def upload(self, cupy, host: dict[str, np.ndarray]) -> list:
        """Device copies of ``host`` in ARRAY_ORDER; arrays equal to the last upload are reused."""
        out = []
        for name in ARRAY_ORDER:
            arr = host[name]
            old = self.host.get(name)
            dev = self.dev.get(name)
            same_shape = old is not None and old.shape == arr.shape and old.dtype == arr.dtype
            if not (same_shape and np.array_equal(old, arr)):
                if same_shape:
                    dev.set(arr)
                else:
                    dev = cupy.asarray(arr)
                self.dev[name] = dev
                self.host[name] = arr
            out.append(dev)
        return out

    def recovery_buffers(self, cupy, nodes: int, batch: int = 1):
        """(m_tops, out, stack, result) for ``batch`` walks of at most ``nodes`` states (dp_recover's
        block b uses the b-th slice of each); the kept ones when large enough."""
        if self.recovery is None or self.nodes < nodes or self.batch < batch:
            nodes, batch = max(nodes, self.nodes), max(batch, self.batch)
            self.recovery = (cupy.empty(batch, dtype=cupy.int32), cupy.empty(4 * nodes * batch, dtype=cupy.int32),
                             cupy.empty(3 * nodes * batch, dtype=cupy.int32), cupy.empty(batch, dtype=cupy.int32))
            self.nodes, self.batch = nodes, batch
        return self.recovery


_WORKSPACES: dict[int, _Workspace] = {}  # device id -> workspace


def _workspace_bytes(device_id: int) -> int:
    ws = _WORKSPACES.get(device_id)
    return ws.held_bytes() if ws is not None else 0


def workspace_bytes() -> int:
    """Device bytes the workspaces hold now (all devices)."""
    return sum(ws.held_bytes() for ws in _WORKSPACES.values())


def release() -> None:
    """Free the workspace on every device and empty CuPy's memory pool there (a no-op when CuPy was
    never imported or sees no device). Call before returning the memory to another allocator
    such as torch's."""
    cupy = sys.modules.get("cupy")
    devices = list(_WORKSPACES)
    _WORKSPACES.clear()
    if cupy is None:
        return
    if not devices:
        try:
            devices = [cupy.cuda.Device().id]
        except Exception:  # no device: no pool to empty
            return
    # A solve's device arrays can outlive it in a reference cycle (an exception's traceback holds the
    # frames that hold them): collect before emptying, or their blocks stay taken from training. On the
    # H100, after 25 gpu tests, 271 987 200 B stayed in CuPy's pool past release() (its holder was not
    # identified on the device; bench/results/gpu_runs/2026-11-26_nvidia_h100_80gb_hbm3/pytest_gpu.txt).
    gc.collect()
    pool = cupy.get_default_memory_pool()
    for device_id in devices:
        with cupy.cuda.Device(device_id):
            cupy.cuda.Device().synchronize()
            pool.free_all_blocks()


# ---------------------------------------------------------------------------- solve
def add_time(timings: dict | None, key: str, seconds: float) -> None:
    """Add ``seconds`` to ``timings[key]`` when ``timings`` is a dict (the backends' phase timings)."""
    if timings is not None:
        timings[key] = timings.get(key, 0.0) + seconds


def run(problem: Problem, m_top: int, progress=None, band: bool = True, timings: dict | None = None,
        geometry: Geometry | None = None):
    """Solve on the device: returns (curve [M+1] float32 = C(0, N, m), policy at ``m_top`` or None).

    ``timings``, when a dict, receives seconds per phase (added to what is there): ``"dp"`` the
    table fill (launch to device synchronisation), ``"recover"`` device recovery, copy back and the
    host policy tree (its device part, launches to copy back: ``"recover_walks"``),
    ``"device_setup"`` memory check, arrays, uploads and allocation (its parts:
    ``"device_check"``, ``"device_upload"``, ``"device_table"``), ``"curve"`` the curve's download,
    and ``"compile"`` when the kernels were compiled now.
    """
    table = fill(problem, progress, timings, band=band, geometry=geometry)
    return table.curve, table.policy(m_top)


class DeviceTable:
    """A filled table in the device workspace: its curve C(0, N, m) and policies recovered on demand
    (:meth:`policy`, on the device). Valid until the next solve on this device or :func:`release`."""

    def __init__(self, problem, module, table, dev, scalars, workspace, geometry, timings):
        self.problem, self._module, self._table, self._dev = problem, module, table, dev
        self._scalars, self._workspace, self._geometry, self._timings = scalars, workspace, geometry, timings
        self.curve = None
        self._walked: dict[int, np.ndarray | str] = {}  # m -> the device walk's quads, or why it failed

    def device_rows(self):
        """The filled table on the device, flat (pairs x (M+1) float32, without the sentinel row): a
        view into the workspace, valid until the next solve on this device (copy it to keep it)."""
        return self._table[:self.problem.pairs * (self.problem.buckets + 1)]

    def _feasible(self, m: int) -> bool:
        return 0 <= m < len(self.curve) and bool(np.isfinite(self.curve[m]))

    def prefetch(self, ms) -> None:
        """Walk the policies at every feasible ``m`` of ``ms`` on the device in one launch (one block
        each, :data:`RECOVERY_BATCH` per launch) and keep their quads on the host: :meth:`policy` then
        builds them without a launch. ``gpusolve.solve`` names every column its exact candidates may
        try (Note [Exact candidates]): one launch and one copy back instead of one per try. A walk that
        fails is reported by :meth:`policy` for its column only (most of these columns are never asked for)."""
        todo = sorted({int(m) for m in ms if self._feasible(int(m))} - self._walked.keys())
        if not todo:
            return
        started = time.perf_counter()
        with torch_device():
            for at in range(0, len(todo), RECOVERY_BATCH):
                part = todo[at:at + RECOVERY_BATCH]
                self._walked.update(zip(part, _walk_on_device(self._module, self.problem, self._table, self._dev,
                                                              self._scalars, part, self._workspace, self._geometry)))
        seconds = time.perf_counter() - started
        add_time(self._timings, "recover", seconds)
        add_time(self._timings, "recover_walks", seconds)

    def policy(self, m: int) -> Policy | None:
        """The optimal policy at ``m`` buckets, or None where the curve is infinite."""
        if not self._feasible(int(m)):
            return None
        started = time.perf_counter()
        quads = self._walked.get(int(m))
        if quads is None:
            with torch_device():
                quads, = _walk_on_device(self._module, self.problem, self._table, self._dev, self._scalars, [int(m)],
                                         self._workspace, self._geometry)
            self._walked[int(m)] = quads
            add_time(self._timings, "recover_walks", time.perf_counter() - started)
        if isinstance(quads, str):
            raise RuntimeError(quads)
        policy = policy_from_order(self.problem, quads)
        add_time(self._timings, "recover", time.perf_counter() - started)
        return policy


def fill(problem: Problem, progress=None, timings: dict | None = None, band: bool = True,
         geometry: Geometry | None = None) -> DeviceTable:
    """Fill the table on the device (see :func:`run` for ``timings``); returns a :class:`DeviceTable`."""
    geometry = geometry or GEOMETRY
    cupy = import_cupy()
    with torch_device():
        module = _MODULES.get(geometry, timings)
        started_setup = time.perf_counter()
        stream = cupy.cuda.get_current_stream()
        n, width = problem.n, problem.buckets + 1
        need = device_bytes(n, problem.buckets)
        check_device_memory(need, lambda free: device_memory_message(
            need, n, problem.buckets, free, finest_fitting_bucket(problem.bucket_bytes * problem.buckets, n, free)))
        # device_setup's parts, each synchronised (on the H100 a first solve's device_setup took 83 ms at
        # M = 8192 and 3.4 ms at M = 16384: bench/SOLVER_NOTES.md): "device_check", "device_upload", "device_table"
        clock = time.perf_counter()
        add_time(timings, "device_check", clock - started_setup)
        ws = _WORKSPACES.setdefault(cupy.cuda.Device().id, _Workspace())
        dev = ws.upload(cupy, device_arrays(problem))
        stream.synchronize()
        clock, before = time.perf_counter(), clock
        add_time(timings, "device_upload", clock - before)
        pairs = problem.pairs
        table = ws.table_for(cupy, (pairs + 1) * width)
        table[pairs * width:(pairs + 1) * width].fill(np.inf)  # the sentinel row
        ws.recovery_buffers(cupy, 2 * n + 2)  # one walk; prefetch grows them to its batch
        scalars = (np.int32(n), np.int32(width), np.int32(1 if problem.multi_tape else 0),
                   np.int64(problem.bucket_bytes))
        stream.synchronize()
        started_dp = time.perf_counter()
        add_time(timings, "device_table", started_dp - clock)
        add_time(timings, "device_setup", started_dp - started_setup)
        diag = module.get_function("dp_diag")
        bulk = module.get_function("dp_bulk")
        for kind, a, b in launch_plan(n, band, geometry):
            args = (table, *dev, *scalars, np.int32(a), np.int32(b))
            (diag if kind == "diag" else bulk)(grid(kind, n, width, a, geometry), (block(kind, geometry),), args)
            if progress is not None and kind == "diag":
                progress(n + 1 - a)
        stream.synchronize()
        started_curve = time.perf_counter()
        add_time(timings, "dp", started_curve - started_dp)
        top = int(problem.row(0, n))
        handle = DeviceTable(problem, module, table, dev, scalars, ws, geometry, timings)
        handle.curve = table[top * width:(top + 1) * width].get()
        add_time(timings, "curve", time.perf_counter() - started_curve)
        return handle


def _walk_on_device(module, problem: Problem, table, dev, scalars, ms: list[int], workspace,
                    geometry: Geometry) -> list[np.ndarray | str]:
    """The device walks of the policies at ``ms`` (one dp_recover launch, block b at ms[b]): their
    (i, j, m, k) quads in visiting order, one int32 array [count, 4] per m, copied back at once (the
    whole output region: a strided read would make a device copy no memory check counts); the error
    message instead for a walk that failed."""
    cupy = import_cupy()
    nodes, batch = 2 * problem.n + 2, len(ms)
    m_tops, out, stack, result = workspace.recovery_buffers(cupy, nodes, batch)
    m_tops[:batch].set(np.asarray(ms, dtype=np.int32))
    module.get_function("dp_recover")((batch,), (block("recover", geometry),),
                                      (table, *dev, *scalars, m_tops, out, np.int32(nodes), stack, np.int32(nodes),
                                       result))
    counts = result[:batch].get()
    walks = out[:4 * nodes * batch].get().reshape(batch, 4 * nodes)
    return [walks[b, :4 * c].reshape(c, 4) if c >= 0 else
            f"internal error: device recovery at m = {ms[b]} failed ({'infeasible state' if c == -1 else 'overflow'})"
            for b, c in enumerate(counts.tolist())]


def policy_from_order(problem: Problem, quads: np.ndarray) -> Policy:
    """Policy tree from the device walk's (i, j, m, k) quads, in recover_policy's visiting order."""
    return build_policy(problem, quads)
