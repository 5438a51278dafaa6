"""Front end of the solver: budget and bucket handling, backend choice, plan assembly."""
from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from .chain import Chain
from .dp.minpeak import min_feasible_bytes
from .dp.problem import BYTES_PER_STATE, Problem
from .errors import BackendUnavailableError, FallbackWarning, InfeasibleBudgetError
from .schedule import Op, Policy, policy_to_schedule, schedule_to_json
from .simulate import simulate, store_all_time_ms
from .units import format_bytes, parse_bytes

# Default number of memory buckets when the caller leaves the bucket to us.
DEFAULT_BUCKETS = {"cpu": 1024, "cuda": 8192}
# Fraction of available host memory the CPU table may take.
HOST_MEMORY_FRACTION = 0.6
# Above this many candidate evaluations a CPU solve shows a progress bar (on a terminal).
PROGRESS_THRESHOLD = 2e9


@dataclass
class Curve:
    """Optimal time (ms) for every budget m * bucket bytes, m = 0..M; inf where infeasible."""

    budget_bytes: np.ndarray
    time_ms: np.ndarray

    def feasible(self) -> "Curve":
        keep = np.isfinite(self.time_ms)
        return Curve(self.budget_bytes[keep], self.time_ms[keep])


@dataclass
class Plan:
    """The result of :func:`solve`. Times in ms, sizes in bytes, ``solve_seconds`` wall-clock seconds."""

    feasible: bool
    predicted_time_ms: float
    predicted_peak_bytes: int
    budget_bytes: int
    bucket_bytes: int
    buckets: int
    backend: str
    solve_seconds: float
    curve: Curve
    schedule: list[Op]
    policy: Policy | None = None
    min_feasible_bytes: int = 0
    store_all_time_ms: float = 0.0
    bytes_per_state: int = BYTES_PER_STATE
    notes: list[str] = field(default_factory=list)

    @property
    def overhead(self) -> float:
        """Predicted time over plain autograd's, minus 1 (0.16 = 16 % slower)."""
        return self.predicted_time_ms / self.store_all_time_ms - 1.0 if self.store_all_time_ms else 0.0

    def summary(self) -> str:
        """A few human-readable lines."""
        if not self.feasible:
            return (f"infeasible at budget {format_bytes(self.budget_bytes)} "
                    f"(minimum {format_bytes(self.min_feasible_bytes)})")
        return (f"budget {format_bytes(self.budget_bytes)}, bucket {format_bytes(self.bucket_bytes)} "
                f"({self.buckets} buckets), backend {self.backend}, solved in {self.solve_seconds * 1e3:.1f} ms\n"
                f"predicted step {self.predicted_time_ms:.2f} ms (+{100 * self.overhead:.1f} % over store-all "
                f"{self.store_all_time_ms:.2f} ms), peak {format_bytes(self.predicted_peak_bytes)}, "
                f"{len(self.schedule)} ops")

    def to_dict(self) -> dict:
        """JSON-ready dict (the CLI's ``solve --json``)."""
        finite = np.isfinite(self.curve.time_ms)
        return {"feasible": self.feasible, "predicted_time_ms": self.predicted_time_ms,
                "predicted_peak_bytes": self.predicted_peak_bytes, "budget_bytes": self.budget_bytes,
                "bucket_bytes": self.bucket_bytes, "buckets": self.buckets, "backend": self.backend,
                "solve_seconds": self.solve_seconds, "min_feasible_bytes": self.min_feasible_bytes,
                "store_all_time_ms": self.store_all_time_ms, "overhead": self.overhead,
                "bytes_per_state": self.bytes_per_state, "notes": self.notes,
                "curve": {"budget_bytes": [int(b) for b in self.curve.budget_bytes[finite]],
                          "time_ms": [float(t) for t in self.curve.time_ms[finite]]},
                "schedule": schedule_to_json(self.schedule)}


def solve(chain: Chain, budget, bucket=None, backend: str = "auto", strict: bool = True,
          progress: bool | None = None) -> Plan:
    """Optimal checkpointing plan for ``chain`` within ``budget`` bytes (int or e.g. ``"6GiB"``).

    ``bucket`` is the memory granularity in bytes (default: the budget over 1024 buckets on the
    CPU, 8192 on CUDA). Sizes are rounded up to buckets and the budget down, so the plan never
    exceeds the budget. ``backend`` is ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when CuPy sees a
    device, else the CPU with a :class:`FallbackWarning`). With ``strict`` an infeasible budget
    raises :class:`InfeasibleBudgetError` naming the minimum; otherwise the plan has
    ``feasible=False``. The budget counts everything but the chain's input a_0.
    """
    started = time.perf_counter()
    if not isinstance(chain, Chain):
        raise TypeError(f"solve() needs a gpusolve.Chain, got {type(chain).__name__}")
    budget_bytes = parse_bytes(budget, "budget")
    notes: list[str] = []
    name, runner = _pick_backend(backend, notes)
    min_bytes = min_feasible_bytes(chain)
    if budget_bytes < min_bytes:
        message = _below_minimum(budget_bytes, min_bytes)
        if strict:
            raise InfeasibleBudgetError(message, min_bytes)
        return _infeasible_plan(chain, budget_bytes, bucket, name, started, min_bytes, notes + [message])
    bucket_bytes = _bucket(budget_bytes, bucket, name)
    if name == "cuda":  # the device table must fit: coarsen our default bucket (noted), or fail for the user's
        from .dp import cuda
        bucket_bytes = cuda.fit_bucket(budget_bytes, bucket_bytes, chain.n, bucket is not None, notes)
    buckets = budget_bytes // bucket_bytes
    problem = Problem.build(chain, bucket_bytes, buckets)
    if name == "cpu":
        _check_host_memory(problem, budget_bytes)
    work = problem.pairs * max(problem.n, 1) / 3 * (buckets + 1)
    show = progress if progress is not None else (sys.stderr.isatty() and work > PROGRESS_THRESHOLD)
    curve_row, policy = _run_with_progress(runner, problem, buckets, show)
    curve = Curve(np.arange(buckets + 1, dtype=np.int64) * bucket_bytes, curve_row.astype(np.float64))
    if policy is None:
        finite = np.flatnonzero(np.isfinite(curve_row))
        at_bucket = f"{format_bytes(curve.budget_bytes[finite[0]])}" if len(finite) else "beyond this budget"
        message = (f"no plan fits {format_bytes(budget_bytes)} at bucket {format_bytes(bucket_bytes)}: rounding sizes "
                   f"up to buckets costs too much (exact minimum {format_bytes(min_bytes)}, at this bucket "
                   f"{at_bucket}); use a finer bucket or a larger budget")
        if strict:
            raise InfeasibleBudgetError(message, min_bytes)
        return _infeasible_plan(chain, budget_bytes, bucket_bytes, name, started, min_bytes, notes + [message])
    schedule = policy_to_schedule(policy, 0, chain.n)
    sim = simulate(chain, schedule)
    if sim.peak_bytes > budget_bytes:  # an invariant of the bucket rounding; never silent
        raise AssertionError(f"internal error: plan peak {sim.peak_bytes} B exceeds budget {budget_bytes} B")
    return Plan(feasible=True, predicted_time_ms=sim.time_ms, predicted_peak_bytes=sim.peak_bytes,
                budget_bytes=budget_bytes, bucket_bytes=bucket_bytes, buckets=buckets, backend=name,
                solve_seconds=time.perf_counter() - started, curve=curve, schedule=schedule, policy=policy,
                min_feasible_bytes=min_bytes, store_all_time_ms=store_all_time_ms(chain),
                bytes_per_state=_bytes_per_state(name, problem), notes=notes)


def _bytes_per_state(backend: str, problem: Problem) -> int:
    """Table bytes per (i, j, m) state: the CPU keeps a shifted copy of the values, CUDA does not."""
    if backend == "cpu":
        from .dp.cpu import host_bytes
        return host_bytes(problem) // (problem.pairs * (problem.buckets + 1))
    return BYTES_PER_STATE


def _infeasible_plan(chain, budget_bytes, bucket, backend, started, min_bytes, notes) -> Plan:
    bucket_bytes = parse_bytes(bucket, "bucket") if bucket is not None else 0
    return Plan(feasible=False, predicted_time_ms=float("inf"), predicted_peak_bytes=0, budget_bytes=budget_bytes,
                bucket_bytes=bucket_bytes, buckets=0, backend=backend,
                solve_seconds=time.perf_counter() - started,
                curve=Curve(np.zeros(0, dtype=np.int64), np.zeros(0)), schedule=[],
                min_feasible_bytes=min_bytes, store_all_time_ms=store_all_time_ms(chain), notes=notes)


def check_budget(chain: Chain, budget, bucket=None) -> int:
    """The checks :func:`solve` makes before solving, for callers that solve with ``strict=False``:
    raises :class:`InfeasibleBudgetError` below the exact minimum budget and ``ValueError`` for a
    bucket larger than the budget. Returns the minimum feasible budget (bytes)."""
    budget_bytes = parse_bytes(budget, "budget")
    min_bytes = min_feasible_bytes(chain)
    if budget_bytes < min_bytes:
        raise InfeasibleBudgetError(_below_minimum(budget_bytes, min_bytes), min_bytes)
    if bucket is not None:
        _bucket(budget_bytes, bucket, "cpu")
    return min_bytes


def _below_minimum(budget_bytes: int, min_bytes: int) -> str:
    return (f"budget {format_bytes(budget_bytes)} ({budget_bytes} B) is below the minimum feasible budget "
            f"{format_bytes(min_bytes)} ({min_bytes} B) for this chain; raise the budget")


def _bucket(budget_bytes: int, bucket, backend: str) -> int:
    if bucket is None:
        return max(1, -(-budget_bytes // DEFAULT_BUCKETS[backend]))
    bucket_bytes = parse_bytes(bucket, "bucket")
    if bucket_bytes < 1:
        raise ValueError("bucket must be at least 1 byte")
    if bucket_bytes > budget_bytes:
        raise ValueError(f"bucket {format_bytes(bucket_bytes)} is larger than the budget {format_bytes(budget_bytes)}; "
                         f"use a bucket of at most the budget (for example budget / 1024)")
    return bucket_bytes


def _pick_backend(backend: str, notes: list[str]):
    from .dp import cpu
    if backend == "cpu":
        return "cpu", cpu.run
    if backend not in ("cuda", "auto"):
        raise ValueError(f"backend {backend!r} is not one of 'auto', 'cpu', 'cuda'")
    try:
        from .dp import cuda
        cuda.ensure_available()
        return "cuda", cuda.run
    except (ImportError, BackendUnavailableError) as err:
        if backend == "cuda":
            raise BackendUnavailableError(f"the CUDA backend cannot run: {err}") from None
        note = f"CUDA backend unavailable ({err}); solving on the CPU"
        warnings.warn(note, FallbackWarning, stacklevel=3)
        notes.append(note)
        return "cpu", cpu.run


def _check_host_memory(problem: Problem, budget_bytes: int) -> None:
    from .dp.cpu import host_bytes
    need = host_bytes(problem)
    available = _available_host_bytes()
    if available and need > HOST_MEMORY_FRACTION * available:
        per_column = need // (problem.buckets + 1)
        fit = int(HOST_MEMORY_FRACTION * available // per_column) - 1
        finest = -(-budget_bytes // max(fit, 1))
        raise MemoryError(f"the CPU solver needs {format_bytes(need)} for {problem.pairs} pairs x "
                          f"{problem.buckets + 1} buckets but {format_bytes(available)} is available; "
                          f"use a bucket of at least {format_bytes(finest)} ({finest} B)")


def _available_host_bytes() -> int:
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


def _run_with_progress(runner, problem: Problem, m_top: int, show: bool):
    if not show:
        return runner(problem, m_top, None)
    from tqdm import tqdm
    with tqdm(total=problem.pairs, unit="pair", desc="solving", leave=False) as bar:
        return runner(problem, m_top, bar.update)
