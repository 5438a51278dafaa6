"""Front end of the combined recompute + offload solve: :func:`solve_offload` (spec ``offload.md``
B.4.1). Every plan is re-simulated on the two-timeline simulator (:func:`gpusolve.simulate.simulate`
with the link) in exact bytes: its peak must fit the budget and its simulated time must equal the
DP's value (to the table's float32 rounding; exactly when every time and tau is a small dyadic
number, as in the tests)."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np

from ..chain import Chain
from ..dp.buckets import choose_bucket
from ..dp.minpeak import least_peak, min_feasible_bytes
from ..dp.problem import Problem
from ..schedule import OpKind, policy_to_schedule
from ..simulate import budget_bytes_of, simulate, store_all_peak_bytes, store_all_time_ms
from ..solve import (Curve, Plan, _infeasible, _zero_budget_bucket, auto_is_exact, below_progress, exact_candidates,
                     json_number, naming_percent, pick_kernel_backend, slack_buckets, solve, solve_budgets,
                     table_progress)
from ..units import check_flag, format_bytes
from . import dp as offload_dp
from .dp import min_offload_policy
from .link import Link

# Note [Never slower than recompute only]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The combined class contains every recompute-only policy, and at one bucket the combined table is
# <= the chain DP's column by column. The plan, though, is chosen in exact bytes among a few
# candidates (Note [Exact candidates] in gpusolve/solve.py): the slack band's binary search walks the
# combined table's plateaus, not the chain's, and can land on a slower one. Measured: 82.911 against
# 82.909 ms (densenet121_b64, 35 %, 50 GB/s; bench/results/offload_curves.md of 89f92b7). So
# over a link that can carry anything, solve_offload also runs gpusolve.solve with the same budget,
# bucket and backend (the chain DP; exact where "auto" would take it) and keeps the faster plan,
# the combined one on a tie. Cost: one chain solve, 0.14-0.54 x the offload fill's time on the CPU
# (more on the short chains; bench/results/offload_curves.md), where it gave the plan in 1 of 27 rows.
# Over a useless link the two tables are equal bit for bit, and so are the plans, unless "auto" takes
# the exact DP for gpusolve.solve (a short chain, no bucket given): only then is it solved. Skipped
# there too before, a review's 13-stage chain got 29.57 ms over a link of 0 B/s against 24.71 ms
# without --offload (tests/test_offload_dp.py). At 50-25 % on densenet121_fine_b32 that solve took
# 17-22 s on the CPU (timings.recompute_only in bench/results/offload_curves.json); reference=False
# skips it where only the table is wanted. offload_curve_data solves it once for all its budgets
# (solve_offload_budgets): its recompute line is those plans, and the combined line is never above it.

# |simulated - DP| allowed, relative: float32 sums of up to ~1e4 terms (an internal check, not a tolerance
# the user sees: the plan's time is the simulated one).
FLOAT32_REL = 1e-4
OFFLOAD_BACKENDS = ("cpu", "cuda", "auto")


@dataclass
class OffloadPlan(Plan):
    """A :class:`~gpusolve.Plan` of the combined DP: ``predicted_time_ms`` is the two-timeline simulated
    time, ``dp_time_ms`` the table's value, ``link`` the link solved for, ``swaps`` the Swap actions."""

    link: Link | None = None
    dp_time_ms: float = float("nan")
    swaps: int = 0
    # gpusolve.solve's plan at the same budget, bucket and backend (Note [Never slower than recompute
    # only]); None where it is infeasible, not asked for (``reference=False``), or the same plan (a useless
    # link, the same backend).
    recompute_only: Plan | None = field(default=None, kw_only=True, compare=False, repr=False)

    @property
    def min_feasible_bytes(self) -> int:
        """The exact least budget of the combined class over the plan's link (:func:`min_budget_bytes`), computed
        on first use when the solve did not (a schedule given: ``plan_from_schedule``)."""
        if self.known_min_bytes is None and self.chain is not None and self.link is not None:
            self.known_min_bytes = min_budget_bytes(self.chain, self.link)
        return super().min_feasible_bytes

    def to_dict(self) -> dict:
        other = self.recompute_only
        return super().to_dict() | {"link": None if self.link is None else self.link.to_dict(),
                                    "dp_time_ms": json_number(self.dp_time_ms),  # NaN: no table value made it
                                    "swaps": self.swaps,
                                    "recompute_only_time_ms": None if other is None else other.predicted_time_ms}


def min_budget_bytes(chain: Chain, link: Link) -> int:
    """The least budget (exact bytes) of the combined class over ``link``:
    :func:`gpusolve.offload.dp.min_offload_bytes`, or recompute only's
    (:func:`gpusolve.dp.minpeak.min_feasible_bytes`) over a link that moves nothing."""
    return min_feasible_bytes(chain) if link.is_useless else offload_dp.min_offload_bytes(chain)


def solve_offload(chain: Chain, budget, link, bucket=None, backend: str = "auto", strict: bool = True,
                  progress: bool | None = None, reference: bool = True) -> OffloadPlan:
    """Optimal plan of the combined class (recompute + ``Swap k``) for ``chain`` within ``budget`` (bytes,
    a size string or a percentage of the store-all peak) over ``link`` (a :class:`Link`, or a rate
    string such as ``"12GB/s"`` for both directions). ``bucket`` as in :func:`gpusolve.solve` (default:
    the budget over 1024 buckets, on every backend). ``backend``: "auto" (default: CUDA when it can
    run, else the CPU with a :class:`~gpusolve.FallbackWarning`), "cpu" or "cuda" (kernels/offload.cu;
    the device planes equal the CPU's bit for bit). Below the exact minimum budget of the
    combined class (:func:`gpusolve.offload.dp.min_offload_bytes`) raises
    :class:`~gpusolve.InfeasibleBudgetError` (``strict``) or returns ``feasible=False``. The plan is
    never slower than :func:`gpusolve.solve`'s with the same arguments (Note [Never slower than
    recompute only]); ``reference=False`` skips that comparison (and its solve) where only the
    table is wanted. ``progress`` as in :func:`gpusolve.solve`."""
    with naming_percent(budget, lambda: store_all_peak_bytes(chain)):
        return _solve_offload(chain, budget, link, bucket, backend, strict, progress, reference, [])[0]


def solve_offload_budgets(chain: Chain, budget, link, below: list, bucket=None, backend: str = "auto",
                          progress: bool | None = None) -> tuple[OffloadPlan, list[OffloadPlan]]:
    """The plan at ``budget`` (as :func:`solve_offload` makes it) and a plan at each budget of ``below``
    (bytes, each at most ``budget``), from ONE combined table and ONE recompute-only table (each at
    ``budget``'s bucket, as :func:`gpusolve.solve.solve_budgets`): a budget's plan may differ from
    ``solve_offload()`` at that budget alone. A budget below the least has a plan with ``feasible=False``."""
    if not isinstance(chain, Chain):
        raise TypeError(f"solve_offload_budgets() needs a gpusolve.Chain, got {type(chain).__name__}")
    top = budget_bytes_of(chain, budget)
    below = [int(b) for b in below]
    if any(b > top for b in below):
        raise ValueError(f"solve_offload_budgets: budgets {[b for b in below if b > top][:3]} are above the budget "
                         f"{top} B")
    plans = _solve_offload(chain, top, link, bucket, backend, False, progress, True, below)
    return plans[0], plans[1:]


def _solve_offload(chain: Chain, budget, link, bucket, backend: str, strict: bool, progress, reference: bool,
                   below: list) -> list[OffloadPlan]:
    """:func:`solve_offload` at ``budget``, then at each budget of ``below`` from the same tables."""
    started = time.perf_counter()
    if not isinstance(chain, Chain):
        raise TypeError(f"solve_offload() needs a gpusolve.Chain, got {type(chain).__name__}")
    check_flag(strict, "strict")
    check_flag(progress, "progress", none="report long solves")
    check_flag(reference, "reference")
    if isinstance(link, str):
        link = Link.parse(link)
    if not isinstance(link, Link):
        raise TypeError(f"link must be a gpusolve.offload.Link or a rate string like '12GB/s', got {link!r}")
    _check_link_range(chain, link)
    timings: dict = {}
    notes: list[str] = ["the link has bandwidth 0 one way or both: nothing can be moved, the plan is recompute "
                        "only"] if link.is_useless else []
    # The chain's selection rule, then the offload kernel (gpusolve.offload.cuda.ensure_available).
    name, filler = pick_kernel_backend(backend, notes, "gpusolve.offload.cuda", offload_dp.fill,
                                       names=OFFLOAD_BACKENDS, dp="the offload DP", for_what="the offload DP")
    budget_bytes = budget_bytes_of(chain, budget)

    # an O(N^3) host DP (0.58-0.70 s on densenet121_fine_b32, CPU: bench/results/offload_least_budget_cost_cpu.md):
    # once, and only if needed
    @functools.cache
    def minimum() -> int:
        return min_budget_bytes(chain, link)

    def apart() -> list[OffloadPlan]:  # the budgets below, each solved alone (no table is filled here)
        return [_solve_offload(chain, b, link, bucket, backend, strict, progress, reference, [])[0] for b in below]

    if budget_bytes < 1:
        if budget_bytes >= minimum():  # sizes all 0: nothing to move, nothing to bucket
            _zero_budget_bucket(bucket)
            return [_as_offload(solve(chain, budget_bytes, strict=strict, progress=progress, backend="exact"),
                                link)] + apart()
        return [_as_offload(_infeasible(chain, budget_bytes, bucket, name, started, timings, notes, strict,
                                        minimum()), link)] + apart()
    try:
        bucket_bytes = choose_bucket(budget_bytes, chain.n, "cpu", bucket, notes, tables=offload_dp.TABLES / 2)
    except ValueError:
        if budget_bytes < minimum():
            return [_as_offload(_infeasible(chain, budget_bytes, bucket, name, started, timings, notes, strict,
                                            minimum()), link)] + apart()
        raise
    buckets = budget_bytes // bucket_bytes
    slack = slack_buckets(chain.n, buckets) if bucket is None else 0
    problem = Problem.build(chain, bucket_bytes, buckets + slack)
    timings["setup"] = time.perf_counter() - started
    with table_progress(problem, f"offload DP, {name}", progress) as callback:
        table = filler(problem, chain, link, progress=callback, timings=timings)
    full_curve = np.asarray(table.curve, dtype=np.float64)
    # gpusolve.solve's plans, Note [Never slower than recompute only]
    references: list = [None] * (1 + len(below))
    reference_backend = "exact" if auto_is_exact(backend, bucket, chain.n) else name
    if reference and not (link.is_useless and reference_backend == name):
        clock = time.perf_counter()
        top, rest = solve_budgets(chain, budget_bytes, below, bucket=bucket, strict=False, progress=progress,
                                  backend=reference_backend)
        references = [p if p.feasible else None for p in (top, *rest)]
        timings["recompute_only"] = time.perf_counter() - clock
    shared = list(notes)
    plans = [_table_plan(chain, link, problem, table, full_curve, budget_bytes, name, references[0], strict,
                         started, timings, notes, minimum)]
    with below_progress(below, f"offload DP, {name}", progress) as update:
        for b, recompute in zip(below, references[1:], strict=True):
            plans.append(_table_plan(chain, link, problem, table, full_curve, b, name, recompute, strict,
                                     time.perf_counter(), {"setup": 0.0, "dp": 0.0}, list(shared), minimum))
            if update is not None:
                update(1)
    return plans


def _table_plan(chain: Chain, link: Link, problem: Problem, table, full_curve: np.ndarray, budget_bytes: int,
                name: str, recompute: Plan | None, strict: bool, started: float, timings: dict, notes: list[str],
                minimum) -> OffloadPlan:
    """The plan at ``budget_bytes`` from a filled combined table, against ``recompute`` (gpusolve.solve's
    plan there, or None: Note [Never slower than recompute only]). A feasible budget the table's rounded sizes
    fit no plan for gets a least-peak policy (:func:`_least_peak_plan`), with a note naming a finer bucket (a
    curve solves such a budget again alone, at its own bucket: :func:`gpusolve.plot.ladder_plans`)."""
    bucket_bytes = problem.bucket_bytes
    buckets = budget_bytes // bucket_bytes
    curve = Curve(np.arange(buckets + 1, dtype=np.int64) * bucket_bytes, full_curve[:buckets + 1].copy())
    clock = time.perf_counter()

    def peak_of(candidate) -> int:
        return simulate(chain, policy_to_schedule(candidate, 0, chain.n), link=link).peak_bytes

    # The chain front end's exact-byte candidates (Note [Exact candidates] in gpusolve/solve.py): the
    # table's optimum, the slack band's plateaus, the segment policies (all in the combined class).
    best = exact_candidates(chain, problem, table, full_curve, buckets, budget_bytes, peak_of)
    timings["recover"] = time.perf_counter() - clock
    if best is None and recompute is not None:
        best = (recompute.predicted_time_ms, None, recompute.policy,
                f"at bucket {format_bytes(bucket_bytes)} the rounded sizes fit no combined plan; the plan is "
                f"gpusolve.solve's (recompute only)")
    if best is None:
        least = minimum()
        if budget_bytes < least:
            return _as_offload(_infeasible(chain, budget_bytes, bucket_bytes, name, started, timings, notes, strict,
                                           least), link)
        best = _least_peak_plan(chain, link, budget_bytes, bucket_bytes, least)
    dp_time, _, policy, note = best
    clock = time.perf_counter()
    schedule = policy_to_schedule(policy, 0, chain.n)
    sim = simulate(chain, schedule, link=link)
    if recompute is not None and recompute.policy is not policy and recompute.predicted_time_ms < sim.time_ms:
        note = (f"gpusolve.solve's recompute-only plan is faster in exact bytes than the combined table's "
                f"({recompute.predicted_time_ms:.4f} vs {sim.time_ms:.4f} ms): it is the plan")
        dp_time, policy, schedule = recompute.predicted_time_ms, recompute.policy, recompute.schedule
        sim = simulate(chain, schedule, link=link)  # over the link, for the checks below
    if note:
        notes.append(note)
    if sim.peak_bytes > budget_bytes:
        raise AssertionError(f"internal error: offload plan peak {sim.peak_bytes} B exceeds budget {budget_bytes} B")
    if np.isfinite(dp_time) and abs(sim.time_ms - dp_time) > FLOAT32_REL * max(1.0, abs(dp_time)):
        raise AssertionError(f"internal error: simulated time {sim.time_ms} ms differs from the DP's {dp_time} ms")
    timings["schedule"] = time.perf_counter() - clock
    swaps = sum(1 for op in schedule if op.kind is OpKind.OFFLOAD)
    if swaps:
        notes.append(f"{swaps} checkpoint(s) moved to the host while later stages run")
    if recompute is not None:  # what the user weighs against pinned memory and a copy stream
        gain = recompute.predicted_time_ms - sim.time_ms
        notes.append(f"offloading saves {gain:.2f} ms ({100 * gain / recompute.predicted_time_ms:.1f} %) against "
                     f"recompute only at this budget ({recompute.predicted_time_ms:.2f} ms, gpusolve.solve)"
                     if gain > FLOAT32_REL * max(1.0, recompute.predicted_time_ms) else
                     f"offloading saves nothing at this budget: recompute only is as fast "
                     f"({recompute.predicted_time_ms:.2f} ms, gpusolve.solve)")
    return OffloadPlan(feasible=True, predicted_time_ms=sim.time_ms, predicted_peak_bytes=sim.peak_bytes,
                       budget_bytes=budget_bytes, bucket_bytes=bucket_bytes, buckets=buckets, backend=name,
                       solve_seconds=time.perf_counter() - started, curve=curve, schedule=schedule, policy=policy,
                       store_all_time_ms=store_all_time_ms(chain),
                       bytes_per_state=4 * (offload_dp.TABLES if name == "cpu" else 2),
                       notes=notes, timings=timings, chain=chain, link=link, dp_time_ms=dp_time, swaps=swaps,
                       recompute_only=recompute,
                       # computed on first use (OffloadPlan.min_feasible_bytes) unless the solve needed it: every
                       # plan filled it before, 0.58-0.70 s each on densenet121_fine_b32 (CPU), a table fill's share
                       known_min_bytes=minimum() if minimum.cache_info().currsize else None)


def _least_peak_plan(chain: Chain, link: Link, budget_bytes: int, bucket_bytes: int, least: int) -> tuple:
    """Note [Exact candidates] (4) of gpusolve/solve.py with a link: the budget fits the combined class, the
    bucket rounding fits no plan. The plan is the faster of the least-peak policies that fit: the combined
    class's (:func:`gpusolve.offload.dp.min_offload_policy`, peak ``least``) and recompute only's
    (:func:`gpusolve.dp.minpeak.min_peak_policy`) where the budget holds it. Before, a budget between the two
    least budgets raised "use a finer bucket", also where the user had left the bucket to the solver
    (bench/repros/rv12_offload_rounded_out_auto_bucket.py)."""
    candidates = [] if link.is_useless else [(min_offload_policy(chain, link), "combined (offloading)")]
    recompute_only = least_peak(chain)
    if budget_bytes >= recompute_only.min_bytes:
        candidates.append((recompute_only.policy, "recompute-only"))
    timed = [(simulate(chain, policy_to_schedule(policy, 0, chain.n), link=link), policy, what)
             for policy, what in candidates]
    sim, policy, what = min(timed, key=lambda item: item[0].time_ms)
    return (float("nan"), None, policy,
            f"at bucket {format_bytes(bucket_bytes)} the rounded sizes fit no plan; the plan is the least-peak "
            f"{what} policy (peak {sim.peak_bytes} B; the least with offloading is {least} B): a finer bucket "
            f"may find a faster one")


def _check_link_range(chain: Chain, link: Link) -> None:
    """A link whose copy of some activation takes longer than the tables' float32 holds (about 3.4e38 ms) is
    refused, naming its figures: the tables would read that swap as impossible while the least budget
    (:func:`min_budget_bytes`) counts any finite transfer as possible, and the solve blamed the bucket (a
    review: "use a finer bucket" at a bucket of 1 B)."""
    if link.is_useless:
        return
    largest = max((int(b) for b, ok in zip(chain.padded()["act_bytes"], chain.swappable()) if ok), default=0)
    # a plan's time sums the copies both ways of up to every stage beside the stages' times: room for those sums
    # (the review's latency of 2e38 ms passed a bound on one copy, then overflowed in the table)
    limit = float(np.finfo(np.float32).max) / (4 * (chain.n + 1))
    both = link.d2h_ms(largest) + link.h2d_ms(largest)
    if both > limit:
        raise ValueError(f"link {link.d2h_bytes_per_ms:g} B/ms device to host, {link.h2d_bytes_per_ms:g} B/ms host to "
                         f"device, latency {link.latency_ms:g} ms: moving a {largest} B activation out and back would "
                         f"take {both:.3g} ms, beyond what the solver's float32 tables can sum over {chain.n} stages "
                         f"({limit:.3g} ms); give a bandwidth of 0 for a link that moves nothing, or the link's real "
                         f"figures")


def _as_offload(plan: Plan, link: Link) -> OffloadPlan:
    """A :class:`Plan` as an :class:`OffloadPlan` over ``link``: an infeasible one (:func:`gpusolve.solve._infeasible`),
    or the recompute-only plan of a chain whose sizes are all 0."""
    fields = {name: getattr(plan, name) for name in Plan.__dataclass_fields__}
    return OffloadPlan(**fields, link=link)


__all__ = ["OffloadPlan", "min_budget_bytes", "solve_offload", "solve_offload_budgets"]
