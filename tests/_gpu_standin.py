"""A rehearsal of the solvers' ``gpu`` tests without a GPU: the CPU DPs stand in for the CUDA ones.

A GPU is lent to few sessions, for minutes (``bench/gpu_session.py``), so a ``gpu`` test whose own
logic is wrong (a budget below the chain's minimum, a field that was renamed) must not wait for a
device to show it: ``pytest --gpu-standin -m gpu`` (tests/conftest.py) runs the ``gpu`` tests of
:data:`SOLVER_FILES` with

- each CUDA backend's ``fill`` (the chain's ``run`` calls its ``fill``) answered by its CPU DP: the chain's
  :func:`gpusolve.dp.cpu.fill`, the join's :func:`gpusolve.join.dp.fill_join`, the offload's
  :func:`gpusolve.offload.dp.fill`, their tables handed over as the device handles the backends
  return (:class:`gpusolve.join.cuda.DeviceJoinTable`, :class:`gpusolve.offload.cuda.DeviceOffloadTable`
  over :class:`HostArray` memory), with the phase timings the device fills report;
- ``ensure_available`` answering yes and the device holding :data:`FREE_BYTES`.

So a CUDA-against-CPU comparison compares the CPU with itself: the rehearsal says nothing of the
kernels (tests/test_kernel_host.py and its twins check their arithmetic), only that each test runs
to its end. Tests marked ``device_state`` read the device's own state (CuPy's memory pool, the free
device memory): they are skipped, as are the torch ``gpu`` tests (torch has no CUDA here).
"""
from __future__ import annotations

import sys

import numpy as np

from _kernel_host import HostArray, fake_cupy

# The test files whose ``gpu`` tests run under the stand-in.
SOLVER_FILES = ("test_cuda.py", "test_join_cuda.py", "test_offload_cuda.py")
FREE_BYTES = 80 << 30  # an H100's memory, roughly


def sits_out(item) -> str | None:
    """Why the ``gpu`` test ``item`` is not rehearsed, or None when it runs on the stand-in."""
    if item.path.name not in SOLVER_FILES:
        return "--gpu-standin rehearses the solvers' gpu tests only"
    if "device_state" in item.keywords:
        return "--gpu-standin: reads the device's own state"
    return None


def _timed(timings: dict | None, *phases: str) -> None:
    """The phases a device fill reports, at 0 s where the CPU fill has no such phase."""
    if timings is not None:
        for phase in phases:
            timings.setdefault(phase, 0.0)


def chain_fill(problem, progress=None, timings=None, band=True, geometry=None):
    """:func:`gpusolve.dp.cuda.fill` answered by :func:`gpusolve.dp.cpu.fill`."""
    from gpusolve.dp import cpu
    table = cpu.fill(problem, progress, timings)
    _timed(timings, "device_setup", "curve")
    table.device_rows = lambda: table.table.reshape(-1).view(HostArray)  # what the join's fill copies
    return table


def join_fill(jp, progress=None, timings=None, geometry=None, chain_geometry=None):
    """:func:`gpusolve.join.cuda.fill` answered by :func:`gpusolve.join.dp.fill_join`."""
    from gpusolve.join import cuda as join_cuda
    from gpusolve.join.dp import fill_join
    ref = fill_join(jp, progress, timings)
    _timed(timings, "chain_tables", "device_setup", "curve")
    offsets, total = join_cuda.chain_table_offsets(jp)
    ctab = np.zeros(max(total, 1), dtype=np.float32)
    for b, table in enumerate(ref.ctables):
        if table is not None:
            ctab[offsets[b]:offsets[b] + table.size] = table.reshape(-1)
    return join_cuda.DeviceJoinTable(jp, ref.table.reshape(-1).copy().view(HostArray), ctab.view(HostArray), timings)


def offload_fill(problem, chain, link, progress=None, timings=None, geometry=None):
    """:func:`gpusolve.offload.cuda.fill` answered by :func:`gpusolve.offload.dp.fill` (the device's 8 bytes
    per state: both planes in one buffer)."""
    from gpusolve.offload import cuda as offload_cuda
    from gpusolve.offload.dp import fill
    ref = fill(problem, chain, link, timings=timings)
    _timed(timings, "device_setup", "curve")
    flat = np.concatenate([ref.planes[0].reshape(-1), ref.planes[1].reshape(-1)]).view(HostArray)
    return offload_cuda.DeviceOffloadTable(problem, ref.swap, flat, ref.curve.copy())


def install() -> None:
    """Replace the CUDA backends by their CPU DPs for the rest of the process (a pytest run)."""
    sys.modules["cupy"] = fake_cupy()
    from gpusolve.dp import cuda as chain_cuda
    from gpusolve.join import cuda as join_cuda
    from gpusolve.offload import cuda as offload_cuda

    for module in (chain_cuda, join_cuda, offload_cuda):
        module.ensure_available = lambda geometry=None: None
    chain_cuda.free_device_bytes = lambda: FREE_BYTES
    chain_cuda.fill = chain_fill  # chain_cuda.run calls it too
    join_cuda.fill = join_fill
    offload_cuda.fill = offload_fill
