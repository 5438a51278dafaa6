"""The one discretisation decision: how many bytes one memory bucket holds.

Every caller that needs a bucket asks :func:`choose_bucket` (the solver front end, the baselines'
uniform-cost solver through :func:`uniform_buckets`, the benchmarks). The rules:

- Default: the budget over :data:`DEFAULT_BUCKETS` buckets of the backend (fine enough that halving
  it moves the optimum by < 0.5 % on the bundled profiles, ``bench/results/bucket_halving.md``).
- A user's bucket is checked (at least 1 byte, at most the budget) and never changed.
- The table must fit: host memory for the CPU backend (two tables, :mod:`gpusolve.dp.cpu`), device
  memory for CUDA (:func:`gpusolve.dp.cuda.device_bytes`, counting what the solver's own workspace
  already holds as free). Our default bucket is coarsened to the finest that fits, with a note; a
  user's bucket that does not fit raises ``MemoryError`` naming the finest that does.
"""
from __future__ import annotations

import os

from ..units import exact_bytes, format_bytes, parse_bytes, whole_bytes

# Buckets per budget when the caller leaves the bucket to us.
DEFAULT_BUCKETS = {"cpu": 1024, "cuda": 8192}
# Fraction of available host memory a CPU table may take.
HOST_MEMORY_FRACTION = 0.6
# Fraction of free device memory the CUDA table (and its side arrays) may take.
DEVICE_MEMORY_FRACTION = 0.9
# The uniform-cost baseline's table: at most this many buckets, fewer for long chains.
UNIFORM_BUCKETS = 1024


def default_bucket(budget_bytes: int, backend: str) -> int:
    """Our bucket for ``budget_bytes`` on ``backend`` ("cpu" or "cuda"), before any memory check."""
    return max(1, -(-int(budget_bytes) // DEFAULT_BUCKETS[backend]))


def parse_bucket(bucket) -> int | None:
    """A user's bucket in whole bytes, at least 1 (one-line ``ValueError`` naming the value otherwise); None
    (the solver chooses) stays None."""
    if bucket is None:
        return None
    fix = "a bucket must be at least 1 byte (leave it out to let the solver choose)"  # not the 0 B of a size
    bucket_bytes = parse_bytes(whole_bytes(bucket, "bucket", percent=False), "bucket", fix)
    if bucket_bytes < 1:
        raise ValueError(f"bucket {bucket!r} is {bucket_bytes} whole bytes: {fix}")
    return bucket_bytes


def check_user_bucket(budget_bytes: int, bucket) -> int:
    """A user's bucket in bytes (:func:`parse_bucket`), validated against the budget (one-line
    ``ValueError`` otherwise)."""
    bucket_bytes = parse_bucket(bucket)
    if bucket_bytes > budget_bytes:
        raise ValueError(f"bucket {format_bytes(bucket_bytes)} is larger than the budget {format_bytes(budget_bytes)}; "
                         f"use a bucket of at most the budget (for example budget / 1024)")
    return bucket_bytes


def choose_bucket(budget_bytes: int, n: int, backend: str, bucket=None, notes: list[str] | None = None,
                  tables: float = 1.0) -> int:
    """The bucket (bytes) to solve a chain of ``n`` stages within ``budget_bytes`` on ``backend``.

    ``bucket`` is the user's (None: ours). Notes on coarsening are appended to ``notes``. ``tables``: the
    host tables as a multiple of the chain DP's (the offload DP keeps 3 where the chain DP keeps 2: 1.5).
    """
    notes = notes if notes is not None else []
    user = bucket is not None
    bucket_bytes = check_user_bucket(budget_bytes, bucket) if user else default_bucket(budget_bytes, backend)
    if backend == "cuda":
        return _fit_device(budget_bytes, bucket_bytes, n, user, notes)
    return _fit_host(budget_bytes, bucket_bytes, n, user, notes, tables)


def table_fits_host(n: int, buckets: int, tables: float = 1.0) -> tuple[bool, int, int]:
    """(fits, bytes needed, bytes allowed) of the CPU backend's tables for ``n`` stages, ``buckets``
    (``tables`` times the chain DP's, :func:`choose_bucket`)."""
    from .cpu import host_bytes_for
    need = int(host_bytes_for(n, buckets) * tables)
    available = available_host_bytes()
    allowed = int(HOST_MEMORY_FRACTION * available) if available else need
    return need <= allowed, need, allowed


def _fit_host(budget_bytes: int, bucket_bytes: int, n: int, user: bool, notes: list[str], tables: float = 1.0) -> int:
    from .cpu import host_bytes_for
    fits, need, allowed = table_fits_host(n, budget_bytes // bucket_bytes, tables)
    if fits:
        return bucket_bytes
    per_column = max(1, int((host_bytes_for(n, 1) - host_bytes_for(n, 0)) * tables))
    columns = max(1, (allowed - int(host_bytes_for(n, 0) * tables)) // per_column)  # buckets + 1
    finest = -(-budget_bytes // max(int(columns) - 1, 1))
    while finest < budget_bytes and not table_fits_host(n, budget_bytes // finest, tables)[0]:
        finest += max(1, finest // 1000)
    if user:
        raise MemoryError(f"the CPU solver needs {format_bytes(need)} for {n * (n + 1) // 2} pairs x "
                          f"{budget_bytes // bucket_bytes + 1} buckets but {format_bytes(allowed)} of host memory "
                          f"may be used; use a bucket of at least {exact_bytes(finest)}")
    notes.append(f"the CPU table at bucket {format_bytes(bucket_bytes)} needs {format_bytes(need)} but "
                 f"{format_bytes(allowed)} of host memory may be used; using bucket {format_bytes(finest)} "
                 f"({budget_bytes // finest} buckets), the finest that fits")
    return finest


def _fit_device(budget_bytes: int, bucket_bytes: int, n: int, user: bool, notes: list[str]) -> int:
    from . import cuda
    try:
        free = cuda.solve_free_bytes()
    except Exception as err:  # no device information: the backend reports what it can when it runs
        notes.append(f"device memory could not be read ({type(err).__name__}); the table size was not checked")
        return bucket_bytes
    need = cuda.device_bytes(n, budget_bytes // bucket_bytes)
    if need <= free:
        return bucket_bytes
    finest = cuda.finest_fitting_bucket(budget_bytes, n, free)
    if user:
        raise MemoryError(device_memory_message(need, n, budget_bytes // bucket_bytes, free, finest))
    notes.append(f"the CUDA table at bucket {format_bytes(bucket_bytes)} needs {format_bytes(need)} but "
                 f"{format_bytes(free)} of device memory is free; using bucket {format_bytes(finest)} "
                 f"({budget_bytes // finest} buckets), the finest that fits")
    return finest


def device_memory_message(need: int, n: int, buckets: int, free: int, finest: int) -> str:
    """The one message for a CUDA table that does not fit the device."""
    return (f"the CUDA table needs {format_bytes(need)} ({need} B: {n * (n + 1) // 2} pairs x {buckets + 1} "
            f"buckets x 4 B) but {format_bytes(free)} of device memory is free; "
            f"use a bucket of at least {exact_bytes(finest)}")


def uniform_buckets(n: int) -> int:
    """Buckets of the uniform-cost baseline's table: 1024, fewer for long chains so that its
    O(N^3 M / 6) work stays near 5e8 (a baseline should not cost more than the optimum)."""
    return int(min(UNIFORM_BUCKETS, max(64, 3e9 / max(n, 1) ** 3)))


def available_host_bytes() -> int:
    """Host memory available now (bytes; 0 when it cannot be read)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
