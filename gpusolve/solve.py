"""Front end of the solver: budget and bucket handling, backend choice, plan assembly.

:func:`solve` fills the DP table on a backend, recovers the optimal policy at the budget and
checks it in exact bytes with the simulator. The table's sizes are rounded up to buckets, so its
optimum is optimal for the rounded sizes only; exact-byte candidates keep rounding from costing the
user (Note [Exact candidates]). The exact minimum feasible budget (an O(N^3) host DP)
is computed only where the table says the budget is infeasible, near the table's least (candidate (4)),
or when asked for (:attr:`Plan.min_feasible_bytes`).

Note [Exact candidates]
    Rounding each size up to a bucket is what makes a plan safe, and also what can hide a faster
    plan that fits in exact bytes (up to one bucket lost per tensor held). So the table is filled a
    little past the budget (a slack band of :func:`slack_buckets` columns) and the plans there are
    candidates: (1) the table's optimum at the budget (always fits); (2) the optima at the first
    columns of the better plateaus of the curve inside the band, checked in exact bytes
    (:func:`gpusolve.dp.minpeak.policy_peak_bytes`) by a binary search for the last that fits (the
    further past the budget, the faster and the less likely to fit); (3) the segment policies:
    plain autograd (no cut: at the store-all peak the answer is store-all, 0 % overhead, whatever
    the bucket) and those users have today (``checkpoint_sequential`` at every segment count,
    Chen's greedy at every threshold), evaluated in closed form (:mod:`gpusolve.dp.segments`);
    (4) the least-peak policy of :mod:`gpusolve.dp.minpeak` (its O(N^3) host DP, filled once for all the
    plans of one table: :func:`~gpusolve.dp.minpeak.least_peak`), where the budget is at
    least the exact minimum and no column at or below it is feasible, or where the budget is within N + 2
    buckets of the table's least: there the rounding may hide that policy (a plan holds at most about N + 2
    rounded tensors, :func:`slack_buckets`), and a budget one byte above the least got a plan 4.4 % slower
    than the least-peak plan it also fits (review rv20c:
    bench/repros/rv20c_least_peak_fallback_only_when_table_empty.py); further from it, that policy is in the
    table.
    ``Plan.notes`` says which candidate decided. ``Plan.curve`` stops at the budget.

Note [The thesis model's class]
    In the thesis's model (``Chain.multi_tape=False``, e.g. :meth:`Chain.from_thesis`) a recording
    forward is taken only right before its own backward, and its cost and tape are folded into that
    backward (the encoding gives it time 0 and no tape). A schedule that records earlier (plain
    autograd, the segment policies, and for a join the composed baselines) leaves that class, and the
    encoding prices it wrongly (store-all there costs no forward and holds no tape), below the class's
    least budget that the solver names. So candidates outside the DP's class are taken only when every
    chain is in the project's model (:func:`outside_class_candidates`): chain, offload and join alike.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .chain import Chain
from .dp.buckets import check_user_bucket, choose_bucket
from .dp.minpeak import least_peak, min_feasible_bytes, policy_peak_bytes
from .dp.problem import BYTES_PER_STATE, Problem
from .dp.segments import SegmentEvaluator
from .errors import BackendUnavailableError, FallbackWarning, InfeasibleBudgetError, warn_once
from .progress import pair_progress, table_work, work_progress
from .schedule import Op, Policy, policy_to_schedule, schedule_to_json, segments_policy
from .simulate import budget_bytes_of, overhead, simulate, store_all_peak_bytes, store_all_time_ms
from .units import check_flag, exact_bytes, format_bytes, parse_bytes, percent_hint

BACKENDS = ("auto", "cpu", "cuda", "exact")
# "auto" solves chains of at most this many stages with the exact, bucket-free DP: the optimum (among
# persistent schedules, docs/cost-model.md) in exact bytes, in tens of milliseconds there (bench/results/exact_speed.md: 21 and 25 stages in 0.03-0.04 s).
EXACT_AUTO_STAGES = 32
# A table of at least this many candidate evaluations (gpusolve.progress.table_work; the CPU does
# ~1e8 a second) reports its progress, on stderr, once it has run gpusolve.progress.PROGRESS_DELAY_S.
PROGRESS_THRESHOLD = 1e8
# The exact backend reports its progress on chains of more than this many stages.
EXACT_PROGRESS_STAGES = 60


@dataclass
class Curve:
    """Optimal time (ms) for every budget m * bucket bytes, m = 0..M; inf where infeasible."""

    budget_bytes: np.ndarray
    time_ms: np.ndarray

    def feasible(self) -> "Curve":
        keep = np.isfinite(self.time_ms)
        return Curve(self.budget_bytes[keep], self.time_ms[keep])


@dataclass
class PlanBase:
    """The fields and the ``overhead`` of every solver's plan: :class:`Plan` (and the offload solver's
    subclass) and :class:`gpusolve.join.JoinPlan`, which re-declares ``policy``, ``store_all_time_ms``
    and ``backend`` (Note [Plan fields]). Each subclass has ``min_feasible_bytes``, ``summary()`` and
    ``to_dict()`` (through :func:`plan_summary` and :func:`plan_dict`).

    Note [Plan fields]
        The fields are declared here as :class:`Plan` has them, in its positional order. ``notes``
        and ``timings`` are keyword-only, so that a subclass may add a required field after them
        (``JoinPlan.min_feasible_bytes``, passed positionally right after ``store_all_time_ms``). A
        join plan's ``policy`` is a :data:`gpusolve.join.JoinPolicy`, its ``policy`` and
        ``store_all_time_ms`` have no default and its ``backend`` is keyword-only with default
        ``"cpu"``; tests/test_plan_fields.py pins these and fails on any other divergence. Both
        classes take their first 13 arguments positionally (``Plan`` up to ``bytes_per_state``,
        ``JoinPlan`` up to ``decided_by``) and the rest by keyword only.
    """

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
    store_all_time_ms: float = 0.0
    notes: list[str] = field(default_factory=list, kw_only=True)
    timings: dict = field(default_factory=dict, kw_only=True)

    @property
    def overhead(self) -> float:
        """Predicted time over plain autograd's, minus 1 (0.16 = 16 % slower)."""
        return overhead(self.predicted_time_ms, self.store_all_time_ms)


@dataclass
class Plan(PlanBase):
    """The result of :func:`solve`. Times in ms, sizes in bytes, ``solve_seconds`` wall-clock seconds.

    ``timings``: seconds per phase of the solve (``"dp"`` table fill, ``"recover"`` policy
    recovery, ``"setup"`` backend/bucket/problem, ``"schedule"`` schedules and exact checks,
    ``"minimum"`` when the minimum budget was computed, backend-specific keys). ``notes``: what
    decided the plan and anything the user should know. The fields of :class:`PlanBase`, then
    ``bytes_per_state`` (table bytes per DP state) and the ``chain`` and ``known_min_bytes`` behind
    :attr:`min_feasible_bytes`.
    """

    bytes_per_state: int = BYTES_PER_STATE
    chain: Chain | None = field(default=None, repr=False, compare=False, kw_only=True)
    known_min_bytes: int | None = field(default=None, repr=False, kw_only=True)

    @property
    def min_feasible_bytes(self) -> int:
        """The exact least budget of the chain (bytes), computed on first use when the solve did not."""
        if self.known_min_bytes is None:
            if self.chain is None:
                raise ValueError("this plan has no chain to compute its minimum feasible budget from")
            self.known_min_bytes = min_feasible_bytes(self.chain)
        return self.known_min_bytes

    def summary(self) -> str:
        """A few human-readable lines."""
        if self.backend == "given":  # plan_from_schedule: a schedule simulated, no DP solved
            return plan_summary(self, f"budget {format_bytes(self.budget_bytes)}, schedule given, not solved")
        grain = ("exact bytes (no buckets)" if self.backend == "exact" else
                 f"bucket {format_bytes(self.bucket_bytes)} ({self.buckets} buckets)")
        return plan_summary(self, f"budget {format_bytes(self.budget_bytes)}, {grain}, backend {self.backend}, "
                                  f"solved in {self.solve_seconds * 1e3:.1f} ms")

    def to_dict(self) -> dict:
        """JSON-ready dict (the CLI's ``solve --json``)."""
        return plan_dict(self, backend=self.backend, bytes_per_state=self.bytes_per_state)


def plan_summary(plan, head: str, ops_detail: str = "") -> str:
    """The lines of ``summary()`` shared by :class:`Plan` and :class:`gpusolve.join.JoinPlan`: one line
    when infeasible (naming the minimum), else ``head``, the predicted step (overhead, peak, op count
    and ``ops_detail``) and one line per note."""
    if not plan.feasible:
        return (f"infeasible at budget {format_bytes(plan.budget_bytes)} "
                f"(minimum {exact_bytes(plan.min_feasible_bytes)})")
    lines = [head, f"predicted step {plan.predicted_time_ms:.2f} ms (+{100 * plan.overhead:.1f} % over store-all "
                   f"{plan.store_all_time_ms:.2f} ms), peak {format_bytes(plan.predicted_peak_bytes)}, "
                   f"{len(plan.schedule)} ops{ops_detail}"]
    return "\n".join(lines + [f"note: {n}" for n in plan.notes])


def json_number(value):
    """``value``, or None where it is not finite (an infeasible plan's time is infinite): JSON has no
    NaN nor Infinity, and ``--json`` refused such a plan."""
    return value if value is None or np.isfinite(value) else None


def plan_dict(plan, **extra) -> dict:
    """The JSON-ready ``to_dict()`` shared by :class:`Plan` and :class:`gpusolve.join.JoinPlan`: the
    common fields, the class's own ``extra`` ones, the feasible part of the curve and the schedule."""
    finite = np.isfinite(plan.curve.time_ms)
    return {"feasible": plan.feasible, "predicted_time_ms": json_number(plan.predicted_time_ms),
            "predicted_peak_bytes": plan.predicted_peak_bytes, "budget_bytes": plan.budget_bytes,
            "bucket_bytes": plan.bucket_bytes, "buckets": plan.buckets, **extra,
            "solve_seconds": plan.solve_seconds, "timings": dict(plan.timings),
            "min_feasible_bytes": plan.min_feasible_bytes, "store_all_time_ms": plan.store_all_time_ms,
            "overhead": json_number(plan.overhead), "notes": list(plan.notes),
            "curve": {"budget_bytes": [int(b) for b in plan.curve.budget_bytes[finite]],
                      "time_ms": [float(t) for t in plan.curve.time_ms[finite]]},
            "schedule": schedule_to_json(plan.schedule)}


def solve(chain: Chain, budget, bucket=None, backend: str = "auto", strict: bool = True,
          progress: bool | None = None) -> Plan:
    """Optimal checkpointing plan for ``chain`` within ``budget`` bytes (int, e.g. ``"6GiB"``, or a percentage
    of the chain's store-all peak such as ``"50%"``; the plan's ``budget_bytes`` is the resolved budget).

    ``bucket`` is the memory granularity in bytes (default: the budget over 1024 buckets on the
    CPU, 8192 on CUDA; see :mod:`gpusolve.dp.buckets`). Sizes are rounded up to buckets and the
    budget down, and every plan is re-simulated in exact bytes, so the plan never exceeds the
    budget; exact-byte candidates make sure rounding never costs (Note [Exact candidates]).
    ``backend`` is ``"cpu"``, ``"cuda"``, ``"exact"`` (bucket-free Pareto-front DP, CPU: the true
    optimum; cheap up to ~70 stages) or ``"auto"`` (exact for chains of at most
    :data:`EXACT_AUTO_STAGES` stages when no bucket is given, else CUDA when CuPy sees a device, else
    the CPU with a :class:`FallbackWarning`). With ``strict`` an infeasible budget raises
    :class:`InfeasibleBudgetError` naming the minimum; otherwise the plan has ``feasible=False``.
    The budget counts everything but the chain's input a_0. ``progress``: None (default) reports the
    progress of a long table fill on stderr (a bar on a terminal, else a line every tenth of the work;
    nothing for a solve of under ~2 s, :mod:`gpusolve.progress`), True for every solve, False never.
    """
    started = time.perf_counter()
    if not isinstance(chain, Chain):
        raise TypeError(f"solve() needs a gpusolve.Chain, got {type(chain).__name__}")
    with naming_percent(budget, lambda: store_all_peak_bytes(chain)):
        return _solve(chain, budget_bytes_of(chain, budget), bucket, backend, strict, progress, started)[0]


@contextlib.contextmanager
def naming_percent(budget, reference_bytes):
    """An :class:`InfeasibleBudgetError` raised inside names, when ``budget`` was a percentage, the bytes it is a
    percentage of (``reference_bytes``, or a callable returning them) and the least percentage that fits
    (:func:`gpusolve.units.percent_hint`; the error named bytes only: a review)."""
    try:
        yield
    except InfeasibleBudgetError as err:
        hint = percent_hint(budget, err.min_bytes, reference_bytes)
        if not hint:
            raise
        raise InfeasibleBudgetError(f"{err}{hint}", err.min_bytes) from None


def solve_budgets(chain: Chain, budget, below: list, bucket=None, backend: str = "auto",
                  progress: bool | None = None, strict: bool = True) -> tuple[Plan, list[Plan]]:
    """The plan at ``budget`` (as :func:`solve` makes it) and a plan at each budget of ``below`` (bytes, each
    at most ``budget``), all from ONE table: the candidates of Note [Exact candidates] at each budget, with
    ``budget``'s bucket (so a plan may differ from ``solve()`` at that budget alone, whose bucket is that
    budget's share). The exact backend solves each budget apart. ``strict`` as in :func:`solve`: a budget
    below the chain's minimum raises, or (False) has a plan with ``feasible=False``."""
    started = time.perf_counter()
    if not isinstance(chain, Chain):
        raise TypeError(f"solve_budgets() needs a gpusolve.Chain, got {type(chain).__name__}")
    top = budget_bytes_of(chain, budget)
    below = [int(b) for b in below]
    if any(b > top for b in below):
        raise ValueError(f"solve_budgets: budgets {[b for b in below if b > top][:3]} are above the budget {top} B")
    plans = _solve(chain, top, bucket, backend, strict, progress, started, below)
    return plans[0], plans[1:]


def _solve(chain: Chain, budget_bytes: int, bucket, backend: str, strict: bool, progress, started: float,
           below: list | None = None) -> list[Plan]:
    """:func:`solve` at ``budget_bytes``, then at each budget of ``below`` from the same table
    (:func:`solve_budgets`)."""
    check_flag(strict, "strict")
    check_flag(progress, "progress", none="report long solves")
    below = below or []
    timings: dict = {}
    notes: list[str] = []
    if solves_exactly(backend, bucket, chain.n) or budget_bytes < 1:
        return [_solve_alone(chain, budget_bytes, bucket, backend, strict, progress, started, timings, notes)] + [
            _solve_alone(chain, b, bucket, backend, strict, progress, time.perf_counter(), {}, [])
            for b in below]
    name, filler = _pick_backend(backend, notes)
    try:
        bucket_bytes = choose_bucket(budget_bytes, chain.n, name, bucket, notes)
    except ValueError:  # a bucket above the budget: first say if the budget itself is too small
        if budget_bytes < min_feasible_bytes(chain):  # and so is every budget below it
            return [_infeasible(chain, b, bucket, name, started, dict(timings), list(notes), strict)
                    for b in [budget_bytes, *below]]
        raise
    buckets = budget_bytes // bucket_bytes
    slack = slack_buckets(chain.n, buckets) if bucket is None else 0
    problem = Problem.build(chain, bucket_bytes, buckets + slack)
    timings["setup"] = time.perf_counter() - started
    with table_progress(problem, name, progress) as callback:
        table = filler(problem, callback, timings)
    full_curve = np.asarray(table.curve, dtype=np.float64)
    shared = list(notes)  # the notes of the backend and the bucket, before the top plan adds its own
    least = functools.cache(lambda: least_peak(chain))  # one O(N^3) fill for every plan made here
    plans = [_table_plan(chain, problem, table, full_curve, budget_bytes, name, started, timings, notes, strict,
                         least)]
    if below:  # the table goes on timing its recoveries in `timings`: the top plan keeps what it had
        plans[0].timings = dict(timings)
    with below_progress(below, name, progress) as update:  # (their recoveries count in their "candidates")
        for b in below:
            plans.append(_table_plan(chain, problem, table, full_curve, b, name, time.perf_counter(),
                                     {"setup": 0.0, "dp": 0.0}, list(shared), strict, least))
            if update is not None:
                update(1)
    return plans


def below_progress(below: list, name: str, progress: bool | None):
    """The progress of the plans made at ``below`` from a filled table (:func:`solve_budgets`; a curve's
    points: after its table's progress said "done", a curve of densenet121_fine_b32 went on silently for
    11.5 s, a review), shown as a table fill's is (``progress`` False: never; a phase shorter than
    :data:`gpusolve.progress.PROGRESS_DELAY_S` prints nothing)."""
    return work_progress(len(below), f"plans at {len(below)} lower budgets ({name})",
                         progress is not False and len(below) > 0)


def _solve_alone(chain: Chain, budget_bytes: int, bucket, backend: str, strict: bool, progress, started: float,
                 timings: dict, notes: list[str]) -> Plan:
    """The budgets :func:`_solve` does not fill a table for: the exact backend, and a budget of 0 B."""
    if solves_exactly(backend, bucket, chain.n):
        if backend == "auto":
            notes.append(f"exact DP (no buckets): the chain has {chain.n} <= {EXACT_AUTO_STAGES} stages, where the "
                         f"exact optimum is cheap")
        return _solve_exact(chain, budget_bytes, bucket, strict, progress, started, timings, notes)
    name, _ = _pick_backend(backend, notes)
    if budget_bytes >= min_feasible_bytes(chain):  # a least budget of 0 B: no bucket to round to
        _zero_budget_bucket(bucket)
        notes.append("a budget of 0 B fits this chain, whose least budget is 0 B: exact DP (no buckets)")
        return _solve_exact(chain, budget_bytes, bucket, strict, progress, started, timings, notes)
    return _infeasible(chain, budget_bytes, bucket, name, started, timings, notes, strict)


def _table_plan(chain: Chain, problem: Problem, table, full_curve: np.ndarray, budget_bytes: int, name: str,
                started: float, timings: dict, notes: list[str], strict: bool, least) -> Plan:
    """The plan at ``budget_bytes`` from a filled table (Note [Exact candidates]). ``least()``: the chain's
    :class:`gpusolve.dp.minpeak.LeastPeak`, computed on first call (the plans of one table share it)."""
    bucket_bytes = problem.bucket_bytes
    buckets = budget_bytes // bucket_bytes
    curve = Curve(np.arange(buckets + 1, dtype=np.int64) * bucket_bytes, full_curve[:buckets + 1].copy())

    clock, recovering = time.perf_counter(), timings.get("recover", 0.0)
    padded = chain.padded()
    act, tape = padded["act_bytes"], padded["tape_bytes"]
    best = exact_candidates(chain, problem, table, full_curve, buckets, budget_bytes,
                            lambda candidate: policy_peak_bytes(problem, act, tape, candidate))
    timings["candidates"] = time.perf_counter() - clock - (timings.get("recover", 0.0) - recovering)

    clock = time.perf_counter()
    if best is not None:
        schedule = policy_to_schedule(best[2], 0, chain.n)
        sim = simulate(chain, schedule)
        if sim.peak_bytes > budget_bytes:  # an invariant of the bucket rounding; never silent
            raise AssertionError(f"internal error: plan peak {sim.peak_bytes} B exceeds budget {budget_bytes} B")
        if best[3]:
            notes.append(best[3])
        best = (sim.time_ms, sim.peak_bytes, schedule, best[2])
    timings["schedule"] = time.perf_counter() - clock
    known_min = None
    finite = np.flatnonzero(np.isfinite(full_curve))
    if best is None or (len(finite) and buckets <= int(finite[0]) + chain.n + 2):
        # Note [Exact candidates] (4): near the table's least, where rounding may hide the least-peak policy
        clock = time.perf_counter()
        known_min, fallback = least()
        timings["minimum"] = time.perf_counter() - clock
        if best is None and budget_bytes < known_min:
            return _infeasible(chain, budget_bytes, bucket_bytes, name, started, timings, notes, strict, known_min)
        clock = time.perf_counter()
        schedule = policy_to_schedule(fallback, 0, chain.n)
        sim = simulate(chain, schedule)
        if sim.peak_bytes != known_min:
            raise AssertionError(f"internal error: least-peak policy peaks at {sim.peak_bytes} B, not {known_min} B")
        if best is None:
            at_bucket = exact_bytes(int(finite[0]) * bucket_bytes) if len(finite) else "above this budget"
            notes.append(f"at bucket {format_bytes(bucket_bytes)} the rounded sizes fit no plan (the table's least "
                         f"budget is {at_bucket}); the plan is the least-peak policy (peak {exact_bytes(known_min)}); "
                         f"a finer bucket may find a faster one")
            best = (sim.time_ms, sim.peak_bytes, schedule, fallback)
        elif sim.time_ms < best[0]:
            notes.append(f"the least-peak policy (peak {exact_bytes(known_min)}) fits the budget in exact bytes and is "
                         f"faster than the optimum at bucket {format_bytes(bucket_bytes)} ({best[0]:.4f} ms, "
                         f"rounding); the plan is the least-peak policy")
            best = (sim.time_ms, sim.peak_bytes, schedule, fallback)
        timings["schedule"] += time.perf_counter() - clock
    time_ms, peak, schedule, policy = best
    return Plan(feasible=True, predicted_time_ms=time_ms, predicted_peak_bytes=peak,
                budget_bytes=budget_bytes, bucket_bytes=bucket_bytes, buckets=buckets, backend=name,
                solve_seconds=time.perf_counter() - started, curve=curve, schedule=schedule, policy=policy,
                store_all_time_ms=store_all_time_ms(chain), bytes_per_state=_bytes_per_state(name, problem),
                notes=notes, timings=timings, chain=chain, known_min_bytes=known_min)


def _zero_budget_bucket(bucket) -> None:
    """A budget of 0 B fits a chain whose least budget is 0 B (every size it holds at once is 0: not the same as
    every size 0, bench/repros/rv10_solver_zero_budget_note_sizes.py), and no bucket divides it: one given is
    refused."""
    if bucket is not None:
        raise ValueError(f"a budget of 0 B fits this chain (its least budget is 0 B), but no bucket ({bucket!r}) "
                         f"divides it: leave the bucket out")


def auto_is_exact(backend: str, bucket, n: int) -> bool:
    """Whether ``backend`` "auto" takes the exact, bucket-free DP: no bucket given and at most
    :data:`EXACT_AUTO_STAGES` stages."""
    return backend == "auto" and bucket is None and n <= EXACT_AUTO_STAGES


def solves_exactly(backend: str, bucket, n: int) -> bool:
    """Whether a solve takes the exact, bucket-free DP: backend "exact", or "auto" where :func:`auto_is_exact`."""
    return backend == "exact" or auto_is_exact(backend, bucket, n)


def table_progress(problem: Problem, what: str, progress: bool | None):
    """The progress context of one table fill (:func:`gpusolve.progress.pair_progress`): ``progress``
    None shows it for a table of at least :data:`PROGRESS_THRESHOLD` candidate evaluations (after
    :data:`~gpusolve.progress.PROGRESS_DELAY_S`), True always, False never. ``what`` names the fill."""
    columns = problem.buckets + 1
    show = progress if progress is not None else table_work(problem.n, columns) >= PROGRESS_THRESHOLD
    return pair_progress(problem.n, columns, f"solving {problem.n} stages x {columns} buckets ({what})", show)


def exact_candidates(chain: Chain, problem: Problem, table, full_curve: np.ndarray, buckets: int, budget_bytes: int,
                     peak_of):
    """Note [Exact candidates] (1)-(3) over a filled table whose columns go ``slack`` past ``buckets``:
    returns ``(time, peak or None, policy, note or None)`` of the fastest of the table's optimum at the
    budget, the best slack-band plateau that fits in exact bytes (``peak_of(policy)``) and the fastest
    fitting segment policy (:func:`_fastest_segment_policy`), or None. Shared by :func:`solve` and the
    combined offload DP (:func:`gpusolve.offload.solve_offload`), whose class contains all of them."""
    best = None
    prefetch = getattr(table, "prefetch", None)  # a device table walks every column it may be asked for at once
    if prefetch is not None:  # the band searched below: faster than the optimum at the budget (inf if none)
        prefetch([buckets, *slack_band_columns(full_curve, buckets, problem.buckets, full_curve[buckets])])
    policy = table.policy(buckets)
    if policy is not None:
        best = (full_curve[buckets], None, policy, None)
    # (2): better plateaus of the slack band, in exact bytes.
    def fits(m):
        candidate = table.policy(m)
        peak = peak_of(candidate)
        return peak <= budget_bytes, (peak, candidate)
    found = slack_band_fit(full_curve, buckets, problem.buckets, np.inf if best is None else best[0], fits)
    if found is not None:
        m, (peak, candidate) = found
        best = (full_curve[m], peak, candidate, slack_note(m - buckets, peak))
    # (3): segment policies (store-all, checkpoint_sequential, Chen's greedy); Note [The thesis model's class].
    segment = (_fastest_segment_policy(chain, problem, budget_bytes, best[0] if best is not None else np.inf)
               if outside_class_candidates([chain]) else None)
    if segment is not None:
        seg_time, seg_peak, cuts, origin = segment
        found = ("" if best is None else
                 f" and is faster than the optimum at this bucket ({best[0]:.4f} ms, rounding)")
        where = f" with checkpoints at {list(cuts)}" if cuts else ""
        note = f"{origin}{where} fits the budget in exact bytes (peak {seg_peak} B){found}; the plan is {origin}"
        best = (seg_time, seg_peak, segments_policy(list(cuts), chain.n), note)
    return best


def outside_class_candidates(chains) -> bool:
    """Whether plans outside the DP's class (plain autograd, segment policies, composed baselines) may be
    candidates: only when every non-empty chain is in the project's model (Note [The thesis model's class])."""
    return all(chain.multi_tape for chain in chains if chain.n)


# The slack band (Note [Exact candidates]): at most this many recovered candidates (a binary search
# over the band's plateaus: enough for 2^8 of them).
SLACK_TRIES = 8


def slack_band_fit(curve: np.ndarray, buckets: int, top: int, better_than: float, fits):
    """Note [Exact candidates] (2), for any table whose columns go past the budget's ``buckets`` up to
    ``top``: the first columns of the curve's plateaus there that are faster than ``better_than`` are
    searched for the fastest whose optimum fits the budget in exact bytes. Further past the budget the
    optima are faster and less likely to fit: a binary search for the last that fits (at most
    :data:`SLACK_TRIES` tries). ``fits(m) -> (fits, payload)``; returns ``(m, payload)`` or None. The
    chain's :func:`exact_candidates` and the join's :func:`gpusolve.join.solve_join` use it."""
    starts = _band_starts(curve, buckets, top, better_than)
    lo, hi, tried, found = 0, len(starts) - 1, 0, None
    while lo <= hi and tried < SLACK_TRIES:
        mid = (lo + hi) // 2
        ok, payload = fits(starts[mid])
        tried += 1
        if ok:
            found = (starts[mid], payload)
            lo = mid + 1
        else:
            hi = mid - 1
    return found


def _band_starts(curve: np.ndarray, buckets: int, top: int, better_than: float) -> list[int]:
    """The plateau starts :func:`slack_band_fit` searches, in its order."""
    return [m for m in _plateau_starts(curve, buckets, top) if curve[m] < better_than]


def slack_band_columns(curve: np.ndarray, buckets: int, top: int, better_than: float) -> list[int]:
    """Every column :func:`slack_band_fit` may try with these arguments, whatever ``fits`` answers:
    the midpoints of its binary search down to :data:`SLACK_TRIES` levels (a device table recovers
    them all in one launch before the search: ``DeviceTable.prefetch`` in gpusolve/dp/cuda.py)."""
    starts = _band_starts(curve, buckets, top, better_than)
    reach, pending = [], [(0, len(starts) - 1, 0)]
    while pending:
        lo, hi, depth = pending.pop()
        if lo > hi or depth >= SLACK_TRIES:
            continue
        mid = (lo + hi) // 2
        reach.append(starts[mid])
        pending += [(lo, mid - 1, depth + 1), (mid + 1, hi, depth + 1)]
    return sorted(reach)


def slack_note(past: int, peak: int) -> str:
    """The plan's note when a slack-band optimum decided (Note [Exact candidates] (2))."""
    return (f"the optimum at {past} bucket(s) past the budget fits it in exact bytes (peak {peak} B): bucket "
            f"rounding had hidden it")


def _fastest_segment_policy(chain: Chain, problem: Problem, budget_bytes: int, better_than: float):
    """(time, peak, cuts, origin) of the fastest segment policy that fits ``budget_bytes`` in exact
    bytes and beats ``better_than`` ms, or None: store-all (no cut), ``checkpoint_sequential`` (every
    segment count) or Chen's greedy (every threshold). A segment policy's time depends only on its
    last cut, so the candidates are checked fastest first and the first that fits is the answer."""
    from .baselines import chen_segmentations, sequential_boundaries, sequential_last_cut
    n = chain.n
    prefix = problem.fwd_prefix
    base = store_all_time_ms(chain)
    # A last cut at or past `stop` makes a candidate no faster than `better_than` (prefix sums of times
    # are nondecreasing): Chen's greedy leaves those out as it goes, which saves most of its rounds.
    stop = None
    if np.isfinite(better_than):
        stop = int(np.searchsorted(base + (prefix - prefix[0]), better_than - 1e-9, side="left"))
    candidates = {(): "store-all"}
    for k in range(2, n + 1):
        if stop is None or sequential_last_cut(n, k) < stop:
            candidates.setdefault(tuple(sequential_boundaries(n, k)), "checkpoint_sequential")
    for cuts in chen_segmentations(chain, stop=stop):
        candidates.setdefault(cuts, "Chen's greedy")
    order = sorted((base + float(prefix[cuts[-1]] - prefix[0]) if cuts else base, cuts) for cuts in candidates)
    evaluator = None
    for seg_time, cuts in order:
        if seg_time >= better_than - 1e-9:
            return None
        if evaluator is None:
            evaluator = SegmentEvaluator(chain, problem)
        _, peak = evaluator.evaluate(cuts)
        if peak <= budget_bytes:
            return seg_time, peak, cuts, candidates[cuts]
    return None


def slack_buckets(n: int, buckets: int) -> int:
    """Columns past the budget filled for exact-byte candidates: a plan holds at most about N + 2
    rounded tensors at once, so no plan more than that many buckets over can fit; capped at an
    eighth of the table (the band's cost)."""
    return int(min(n + 2, -(-buckets // 8)))


def _plateau_starts(curve: np.ndarray, lo: int, hi: int):
    """Columns m in (lo, hi] where the curve drops (the first column of each plateau), ascending."""
    for m in range(lo + 1, min(hi, len(curve) - 1) + 1):
        if np.isfinite(curve[m]) and curve[m] < curve[m - 1]:
            yield m


def release_device_memory() -> None:
    """Free what the CUDA solver keeps on the device between solves (its table workspace and CuPy's
    pooled blocks). The executor calls it after planning, so that training gets the memory back."""
    cuda = sys.modules.get("gpusolve.dp.cuda")  # never imported: nothing was allocated
    if cuda is not None:
        cuda.release()


def _solve_exact(chain: Chain, budget_bytes: int, bucket, strict: bool, progress, started: float, timings: dict,
                 notes: list[str]) -> Plan:
    """The exact, bucket-free DP (:mod:`gpusolve.dp.exact`): the optimum at the budget in exact bytes (among
    persistent schedules: docs/cost-model.md, "The class of schedules"). Its curve
    holds the exact budgets at which the optimal time drops (and the budget itself)."""
    from .dp import exact
    if bucket is not None:
        raise ValueError(f"the exact backend has no buckets, but bucket {bucket!r} was given: leave the bucket out "
                         f"(--bucket; bucket=None), or use backend 'cpu' or 'cuda'")
    timings["setup"] = time.perf_counter() - started
    clock = time.perf_counter()
    show = progress if progress is not None else chain.n > EXACT_PROGRESS_STAGES
    with pair_progress(chain.n, 1, f"solving {chain.n} stages (exact)", show) as callback:
        (peaks, times), policy = exact.run(chain, budget_bytes, progress=callback)
    timings["dp"] = time.perf_counter() - clock
    if policy is None:
        return _infeasible(chain, budget_bytes, 1, "exact", started, timings, notes, strict,
                           int(peaks[0]) if len(peaks) else None)
    clock = time.perf_counter()
    schedule = policy_to_schedule(policy, 0, chain.n)
    sim = simulate(chain, schedule)
    if sim.peak_bytes > budget_bytes:
        raise AssertionError(f"internal error: exact plan peak {sim.peak_bytes} B exceeds budget {budget_bytes} B")
    timings["schedule"] = time.perf_counter() - clock
    curve = Curve(np.append(np.asarray(peaks, dtype=np.int64), budget_bytes),
                  np.append(np.asarray(times, dtype=np.float64), times[-1]))
    return Plan(feasible=True, predicted_time_ms=sim.time_ms, predicted_peak_bytes=sim.peak_bytes,
                budget_bytes=budget_bytes, bucket_bytes=1, buckets=0, backend="exact",
                solve_seconds=time.perf_counter() - started, curve=curve, schedule=schedule, policy=policy,
                store_all_time_ms=store_all_time_ms(chain), bytes_per_state=0, notes=notes, timings=timings,
                chain=chain, known_min_bytes=int(peaks[0]))


def _bytes_per_state(backend: str, problem: Problem) -> int:
    """Table bytes per (i, j, m) state: the CPU keeps a shifted copy of the values, CUDA does not."""
    if backend == "cpu":
        from .dp.cpu import host_bytes
        return host_bytes(problem) // (problem.pairs * (problem.buckets + 1))
    return BYTES_PER_STATE


def _infeasible(chain, budget_bytes, bucket, backend, started, timings, notes, strict, min_bytes=None,
                message: str | None = None) -> Plan:
    """Below the exact minimum: raise (``strict``) or a plan with ``feasible=False`` (``bucket``: bytes
    or the user's bucket as given, None when there is none), whose last note is ``message`` (default: the
    budget is below the minimum)."""
    if min_bytes is None:
        clock = time.perf_counter()
        min_bytes = min_feasible_bytes(chain)
        timings["minimum"] = time.perf_counter() - clock
    if message is None:
        message = below_minimum(budget_bytes, min_bytes)
    if strict:
        raise InfeasibleBudgetError(message, min_bytes)
    return Plan(feasible=False, predicted_time_ms=float("inf"), predicted_peak_bytes=0, budget_bytes=budget_bytes,
                bucket_bytes=0 if bucket is None else parse_bytes(bucket, "bucket"), buckets=0,
                backend=backend, solve_seconds=time.perf_counter() - started,
                curve=Curve(np.zeros(0, dtype=np.int64), np.zeros(0)), schedule=[],
                store_all_time_ms=store_all_time_ms(chain), notes=notes + [message], timings=timings, chain=chain,
                known_min_bytes=min_bytes)


def check_budget(chain: Chain, budget, bucket=None, min_bytes: int | None = None) -> int:
    """The checks :func:`solve` makes before solving, for callers that solve with ``strict=False``:
    raises :class:`InfeasibleBudgetError` below the exact minimum budget (``min_bytes``: another class's,
    e.g. :func:`gpusolve.offload.solver.min_budget_bytes`) and ``ValueError`` for a bucket larger than
    the budget. Returns the minimum feasible budget (bytes)."""
    budget_bytes = budget_bytes_of(chain, budget)
    min_bytes = min_feasible_bytes(chain) if min_bytes is None else int(min_bytes)
    if budget_bytes < min_bytes:
        raise InfeasibleBudgetError(below_minimum(budget_bytes, min_bytes), min_bytes)
    if bucket is not None:
        check_user_bucket(budget_bytes, bucket)
    return min_bytes


def below_minimum(budget_bytes: int, min_bytes: int) -> str:
    """The one message for a budget below the exact minimum (enough digits to tell them apart)."""
    return (f"budget {exact_bytes(budget_bytes)} is below the minimum feasible budget {exact_bytes(min_bytes)} "
            f"for this chain; raise the budget to at least {min_bytes} B")


def _pick_backend(backend: str, notes: list[str]):
    """The one backend-selection rule: returns (name, fill) where ``fill(problem, progress, timings)``
    fills the table and returns a handle with ``.curve`` and ``.policy(m)``."""
    from .dp import cpu
    if backend == "cpu":
        return "cpu", cpu.fill
    if backend not in ("cuda", "auto"):
        raise ValueError(f"backend {backend!r} is not one of {', '.join(repr(b) for b in BACKENDS)}")
    try:
        from .dp import cuda
        cuda.ensure_available()
        return "cuda", cuda.fill
    except (ImportError, BackendUnavailableError) as err:
        return "cpu", _without_cuda(backend, err, notes, cpu.fill)


def _without_cuda(backend: str, err, notes: list[str], cpu_fill):
    """Where CUDA cannot run (``err`` says why): ``backend="cuda"`` raises BackendUnavailableError naming
    the remedy; ``"auto"`` falls back to ``cpu_fill``, saying so in one line (a FallbackWarning, once per
    process, and in ``notes`` every time)."""
    if backend == "cuda":
        raise BackendUnavailableError(f"the CUDA backend cannot run: {err}; solve on the CPU instead (backend "
                                      f"'cpu', or 'auto', which falls back to it: --backend cpu/auto)") from None
    note = f"CUDA backend unavailable ({err}); solving on the CPU"
    warn_once(note, FallbackWarning, stacklevel=4)  # Note [Warnings once per process]
    notes.append(note)
    return cpu_fill


def pick_kernel_backend(backend: str, notes: list[str], kernel_module: str, cpu_fill, *, names: tuple[str, ...],
                        dp: str, for_what: str):
    """(name, fill) of a DP whose CUDA backend runs after the chain's (join, offload): ``backend`` one
    of ``names`` (else ``ValueError`` ending "for ``for_what``"), then the chain's one selection rule
    (:func:`_pick_backend`: CuPy, a device, the chain kernels, the fallback of "auto"), then the
    ``ensure_available()`` of ``kernel_module`` (its own kernel), whose ``fill`` runs on CUDA;
    ``cpu_fill`` otherwise. ``dp`` names the DP in the note of "auto" ("the join DP"). Called
    directly by the solver (the warnings name the solver's caller)."""
    if backend not in names:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(map(repr, names))} for {for_what}")
    name, _chain_fill = _pick_backend(backend, notes)
    if name == "cpu":
        return "cpu", cpu_fill
    import importlib
    kernel = importlib.import_module(kernel_module)
    try:
        kernel.ensure_available()
    except BackendUnavailableError as err:
        return "cpu", _without_cuda(backend, err, notes, cpu_fill)
    if backend == "auto":
        notes.append(f"backend auto: {dp} runs on CUDA (CuPy sees a device)")
    return "cuda", kernel.fill
