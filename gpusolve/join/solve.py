"""Front end of the join solver: budget, bucket, the join DP, exact-byte candidates, the plan.

:func:`solve_join` is to a join what :func:`gpusolve.solve` is to a chain. The budget counts
everything but the k branch inputs; sizes are rounded up to buckets and the budget down, so the DP's
plan fits; every candidate is re-simulated in exact bytes (:func:`gpusolve.join.bytesim.simulate_join`)
and the fastest that fits is the plan (Note [Join candidates]).

Note [Join candidates]
    (1) the join DP's optimum at the budget (always fits); (2) plain autograd (store-all), which is
    optimal whenever it fits and which bucket rounding can hide at the store-all peak; (3) the
    baselines of :mod:`gpusolve.join.baselines` (split budget, EQUIV-CHAIN), so that the plan is never
    slower than them, in exact bytes, whatever the bucket (the join DP is optimal only among nested,
    persistent schedules: spec A.2.5 item 6). (2) and (3) record stages before the turn, which a branch
    in the thesis model (``multi_tape=False``) never does: with such a branch they are no candidates
    (Note [The thesis model's class] in :mod:`gpusolve.solve`; the encoding prices them wrongly, below
    the minimum the solver names); (4) the least-peak policy (:func:`gpusolve.join.dp.min_peak_join`),
    which runs within exactly the minimum of the DP's schedules: the plan where the table has none at the
    budget (bucket rounding), and a candidate beside the table's where it has one (tried only then, a budget
    12 B above the least got a plan 6 % slower than the least-peak plan it fits: review rv20c,
    bench/repros/rv20c_join_least_peak_fallback_only_when_table_empty.py); (5) as
    for a chain (Note [Exact candidates] (2) in :mod:`gpusolve.solve`), when no bucket is given the
    table goes a little past the budget and the optima of its better plateaus there that fit the
    budget in exact bytes are candidates (the one search, :func:`gpusolve.solve.slack_band_fit`).
    ``JoinPlan.curve`` stops at the budget.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..dp.buckets import HOST_MEMORY_FRACTION, available_host_bytes, check_user_bucket
from ..errors import InfeasibleBudgetError
from ..solve import (Curve, PlanBase, naming_percent, outside_class_candidates, pick_kernel_backend, plan_dict,
                     plan_summary, slack_band_fit, slack_buckets, slack_note)
from ..units import check_flag, exact_bytes, format_bytes, parse_budget
from .baselines import equiv_chain, split_budget, store_all
from .bytesim import simulate_join, store_all_join_peak_bytes
from .dp import JoinProblem, fill_join, host_bytes_for, min_peak_join
from .network import JoinNet, JoinPolicy, Turn, join_policy_to_schedule

# Buckets per budget when the caller leaves the bucket to us (as the chain CPU backend).
DEFAULT_JOIN_BUCKETS = 1024
JOIN_BACKENDS = ("cpu", "cuda", "auto")


@dataclass
class JoinPlan(PlanBase):
    """The result of :func:`solve_join` (times ms, sizes bytes), like :class:`gpusolve.Plan`: the
    fields of :class:`gpusolve.solve.PlanBase`, three of them re-declared (Note [Plan fields]), then
    its own. Positionally: the six sizes, ``solve_seconds``, ``curve``, ``schedule``, ``policy``,
    ``store_all_time_ms``, ``min_feasible_bytes``, ``decided_by``; the rest by keyword."""

    # Re-declared (Note [Plan fields]); field(), as a bare annotation would keep PlanBase's default.
    policy: JoinPolicy | None = field()
    store_all_time_ms: float = field()
    backend: str = field(default="cpu", kw_only=True)
    min_feasible_bytes: int
    decided_by: str = ""
    net: JoinNet | None = field(default=None, repr=False, compare=False, kw_only=True)

    def summary(self) -> str:
        return plan_summary(self, f"join of {self.net.k if self.net else '?'} branches, budget "
                                  f"{format_bytes(self.budget_bytes)}, bucket {format_bytes(self.bucket_bytes)} "
                                  f"({self.buckets} buckets), solved in {self.solve_seconds * 1e3:.1f} ms",
                            f" ({self.decided_by})")

    def to_dict(self) -> dict:
        """JSON-ready dict (the CLI's ``join --json``, under ``"plan"``)."""
        return plan_dict(self, decided_by=self.decided_by, backend=self.backend)


def join_below_minimum(budget_bytes: int, min_bytes: int) -> str:
    """The one message for a join budget below the exact minimum."""
    return (f"budget {exact_bytes(budget_bytes)} is below the minimum feasible budget {exact_bytes(min_bytes)} "
            f"for this join (the least peak of the join DP's schedules, branch inputs not counted); raise the "
            f"budget to at least {min_bytes} B")


def join_slack_buckets(net: JoinNet, buckets: int) -> int:
    """Columns past the budget filled for exact-byte candidates (Note [Join candidates] (5)): the
    chain's rule (:func:`gpusolve.solve.slack_buckets`) over every stage of every branch and the turn."""
    return slack_buckets(sum(net.lengths) + 1, buckets)


def choose_join_bucket(net: JoinNet, budget_bytes: int, bucket=None, notes: list[str] | None = None) -> int:
    """The bucket (bytes) for ``net`` within ``budget_bytes``: the user's (checked: at least 1 byte, at
    most the budget, tables that fit host memory, else ``MemoryError`` naming the finest that fits)
    or the budget over :data:`DEFAULT_JOIN_BUCKETS`, coarsened until the tables fit (with a note)."""
    notes = notes if notes is not None else []
    user = bucket is not None
    chosen = check_user_bucket(budget_bytes, bucket) if user else max(1, -(-budget_bytes // DEFAULT_JOIN_BUCKETS))
    available = available_host_bytes()
    allowed = int(HOST_MEMORY_FRACTION * available) if available else None
    need = host_bytes_for(net, budget_bytes // chosen)
    if allowed is None or need <= allowed:
        return chosen
    per_column = max(1, host_bytes_for(net, 1) - host_bytes_for(net, 0))
    columns = (allowed - host_bytes_for(net, 0)) // per_column
    if columns < 2:
        raise MemoryError(f"the join tables need {format_bytes(host_bytes_for(net, 1))} even with 1 bucket but "
                          f"{format_bytes(allowed)} of host memory may be used; solve fewer or shorter branches")
    finest = -(-budget_bytes // int(columns - 1))
    if user:
        raise MemoryError(f"the join tables need {format_bytes(need)} at bucket {format_bytes(chosen)} but "
                          f"{format_bytes(allowed)} of host memory may be used; use a bucket of at least "
                          f"{exact_bytes(finest)}")
    notes.append(f"the join tables at bucket {format_bytes(chosen)} need {format_bytes(need)} but "
                 f"{format_bytes(allowed)} of host memory may be used; using bucket {format_bytes(finest)}")
    return finest


def solve_join(branches, turn: Turn, budget, bucket=None, reserved_bytes: int = 0, strict: bool = True,
               baselines: bool = True, progress=None, backend: str = "auto") -> JoinPlan:
    """Fastest plan for the join of ``branches`` (each a :class:`~gpusolve.Chain` or an
    :class:`~gpusolve.join.EmptyBranch`) at ``turn`` within ``budget`` (bytes, ``"6GiB"``, or a
    percentage of the join's store-all peak such as ``"50%"``).

    ``bucket``: memory granularity in bytes (default budget / 1024). ``reserved_bytes``: held through
    the whole step besides the tensors of the model. ``strict``: a budget below the minimum raises
    :class:`~gpusolve.InfeasibleBudgetError` naming it (else a plan with ``feasible=False``).
    ``baselines``: also try the baselines as exact-byte candidates (Note [Join candidates]).
    ``progress(rows)``: called after each hyperplane of the DP. ``backend``: ``"auto"`` (default: CUDA
    when CuPy sees a device, else the CPU with a :class:`~gpusolve.FallbackWarning` and a note), ``"cpu"``,
    ``"cuda"`` (the J table filled on the device, one launch per hyperplane: :mod:`gpusolve.join.cuda`;
    :class:`~gpusolve.BackendUnavailableError` when it cannot run).
    """
    started = time.perf_counter()
    timings: dict = {}
    check_flag(strict, "strict")
    check_flag(baselines, "baselines")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a function progress(rows) or None, got {progress!r}")
    net = JoinNet(branches, turn, reserved_bytes)
    budget_bytes = parse_budget(budget, lambda: store_all_join_peak_bytes(net), "budget")
    notes: list[str] = []
    # The chain's selection rule, then the join kernel (gpusolve.join.cuda.ensure_available).
    name, fill = pick_kernel_backend(backend, notes, "gpusolve.join.cuda", fill_join, names=JOIN_BACKENDS,
                                     dp="the join DP", for_what="a join")
    least = min_peak_join(net)
    min_bytes = least.min_bytes
    store_time = net.store_all_time_ms()
    if budget_bytes < min_bytes:
        message = join_below_minimum(budget_bytes, min_bytes)
        if strict:
            with naming_percent(budget, lambda: store_all_join_peak_bytes(net)):
                raise InfeasibleBudgetError(message, min_bytes)
        return JoinPlan(False, float("inf"), 0, budget_bytes, 0, 0, time.perf_counter() - started,
                        Curve(np.zeros(0, dtype=np.int64), np.zeros(0)), [], None, store_time, min_bytes,
                        notes=notes + [message], timings=timings, net=net, backend=name)
    if name == "cuda":  # the tables live on the device: its memory bounds the bucket
        from .cuda import choose_device_bucket
        default = max(1, -(-budget_bytes // DEFAULT_JOIN_BUCKETS))
        bucket_bytes = choose_device_bucket(net, budget_bytes, None if bucket is None else
                                            check_user_bucket(budget_bytes, bucket), default, notes)
    else:
        bucket_bytes = choose_join_bucket(net, budget_bytes, bucket, notes)
    buckets = budget_bytes // bucket_bytes
    slack = join_slack_buckets(net, buckets) if bucket is None else 0
    problem = JoinProblem.build(net, bucket_bytes, buckets + slack)
    timings["setup"] = time.perf_counter() - started
    table = fill(problem, progress, timings)
    full_curve = np.asarray(table.curve, dtype=np.float64)
    curve = Curve(np.arange(buckets + 1, dtype=np.int64) * bucket_bytes, full_curve[:buckets + 1])

    clock = time.perf_counter()
    candidates = []  # (time, peak, schedule, policy, origin, note), in order of preference at equal time

    def exact(policy):
        schedule = join_policy_to_schedule(net, policy)
        return schedule, simulate_join(net, schedule)
    policy = table.policy(buckets)
    if policy is not None:
        schedule, sim = exact(policy)
        if sim.peak_bytes > budget_bytes:  # an invariant of the bucket rounding; never silent
            raise AssertionError(f"internal error: join plan peak {sim.peak_bytes} B exceeds budget {budget_bytes} B")
        candidates.append((sim.time_ms, sim.peak_bytes, schedule, policy, "join DP", None))

    def fits(m):  # Note [Join candidates] (5)
        band_policy = table.policy(m)
        schedule, sim = exact(band_policy)
        return sim.peak_bytes <= budget_bytes, (schedule, sim, band_policy)
    found = slack_band_fit(full_curve, buckets, problem.buckets,
                           candidates[0][0] if candidates else np.inf, fits)
    if found is not None:
        m, (schedule, sim, band_policy) = found
        candidates.append((sim.time_ms, sim.peak_bytes, schedule, band_policy, "join DP",
                           slack_note(m - buckets, sim.peak_bytes)))
    others = []
    if outside_class_candidates(net.branches):  # Note [Join candidates] (2), (3)
        others = [store_all(net, budget_bytes)]
        if baselines:
            others += [split_budget(net, budget_bytes, bucket_bytes), equiv_chain(net, budget_bytes, bucket_bytes)]
    candidates += [(b.time_ms, b.peak_bytes, b.schedule, None, b.name, None) for b in others if b.feasible]
    # Note [Join candidates] (4): always (its table is made anyway); with a table plan too, rounding may hide it
    least_policy = least.policy()
    schedule, sim = exact(least_policy)
    if sim.peak_bytes != min_bytes:
        raise AssertionError(f"internal error: least-peak join policy peaks at {sim.peak_bytes} B, "
                             f"not {min_bytes} B")
    note = (f"at bucket {format_bytes(bucket_bytes)} the rounded sizes fit no plan; the plan is the least-peak "
            f"policy (peak {exact_bytes(min_bytes)}); a finer bucket may find a faster one") if policy is None else None
    candidates.append((sim.time_ms, sim.peak_bytes, schedule, least_policy, "least-peak policy", note))
    timings["candidates"] = time.perf_counter() - clock
    best = min(candidates, key=lambda c: c[0])  # the first of equal times: the DP's
    time_ms, peak, schedule, chosen, origin, note = best
    if note is not None:
        notes.append(note)
    if origin != "join DP":
        why = "bucket rounding"
        than = (f"is faster than the join DP's plan ({candidates[0][0]:.4f} ms; {why})"
                if candidates[0][4] == "join DP" else f"the join DP's table has no plan ({why})")
        notes.append(f"{origin} fits the budget in exact bytes (peak {peak} B) and {than}; the plan is {origin}")
    return JoinPlan(True, time_ms, peak, budget_bytes, bucket_bytes, buckets, time.perf_counter() - started,
                    curve, schedule, chosen, store_time, min_bytes, decided_by=origin, notes=notes, timings=timings,
                    net=net, backend=name)
