"""The combined recompute + offload DP (spec offload.md B.4.1): against the chain DP (useless link),
against the two-timeline simulator (every plan), against an exhaustive search over the schedule
class, the spec's worked example by hand, and the spec's prefetch condition (a counterexample)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import random_chain
from gpusolve import Chain, Checkpoint, InfeasibleBudgetError, Op, OpKind, ScheduleError, Tape, simulate
from gpusolve.dp import cpu
from gpusolve.dp.minpeak import min_feasible_bytes
from gpusolve.dp.problem import Problem
from gpusolve.offload.dp import (SWAP, SwapArrays, choose, fill, least_peak_tables, min_offload_bytes, min_offload_policy,
                                 solve_tables, window_bound)
from gpusolve.offload.link import Link, parse_rate
from gpusolve.offload.solver import solve_offload
from gpusolve.schedule import Swap, policy_to_schedule, schedule_from_json, schedule_to_json
from gpusolve.simulate import store_all_peak_bytes
from test_dp import all_policies


def dyadic_chain(rng, n, multi_tape=True) -> Chain:
    """A random chain whose times are multiples of 1/8 ms: every float32 sum in the DP and every
    float64 sum in the simulator is exact, so their values can be compared with ==."""
    base = random_chain(rng, n, multi_tape=multi_tape)
    data = base.to_dict()
    for name in ("t_fwd", "t_fwd_nograd", "t_bwd"):
        data[name] = [float(v) for v in rng.integers(0, 17, n) / 8]
    return Chain.from_dict(data)


def dyadic_link(rng) -> Link:
    return Link(float(rng.choice([1, 2, 4, 8, 16, 64, math.inf])), float(rng.choice([1, 2, 4, 8, 16, 64])),
                float(rng.choice([0.0, 0.25, 1.0])))


def offloads(schedule) -> int:
    return sum(op.kind is OpKind.OFFLOAD for op in schedule)


# ---------------------------------------------------------------------------------------------- link
def test_link_parsing_and_validation():
    assert parse_rate("12GB/s") == 12e9 / 1000
    assert parse_rate("1GiB/s") == 2**30 / 1000
    assert parse_rate("4MB/ms") == 4e6
    assert parse_rate(2.5) == 2.5 and parse_rate("0.5/ms") == 0.5 and parse_rate("inf") == math.inf
    assert parse_rate("0") == 0.0 and Link.parse("0").is_useless  # zero needs no unit (--bandwidth 0)
    with pytest.raises(ValueError, match="12GB/s"):
        parse_rate("12")  # any other bare number is ambiguous
    link = Link.parse("12GB/s", "10GB/s", latency_ms=0.01)
    assert link.d2h_ms(12e6) == pytest.approx(1.01) and link.h2d_ms(10e6) == pytest.approx(1.01)
    assert Link.parse("8GB/s").h2d_bytes_per_ms == 8e6
    useless = Link(0, 0)
    assert useless.is_useless and useless.d2h_ms(0) == math.inf and useless.h2d_ms(10) == math.inf
    assert Link(math.inf, math.inf, 0.5).d2h_ms(10**12) == 0.5
    assert Link.from_dict(link.to_dict()) == link
    for bad in ("-3GB/s", "fast", "12GB", True):
        with pytest.raises(ValueError):
            parse_rate(bad)
    with pytest.raises(ValueError, match="bandwidth"):
        Link(float("nan"), 1.0)
    with pytest.raises(ValueError, match="bandwidth"):
        Link(-1.0, 1.0)
    with pytest.raises(ValueError, match="latency"):
        Link(1.0, 1.0, latency_ms=-0.1)
    with pytest.raises(ValueError, match="latency"):
        Link(1.0, 1.0, latency_ms=math.inf)
    with pytest.raises(ValueError, match="one copy channel"):
        Link(1.0, 1.0, channels=2)


def test_a_link_beyond_the_tables_range_is_refused_naming_it():
    # a review: a copy time above float32's range was an impossible swap in the tables while the least budget
    # counted it possible, and the solve said "use a finer bucket" at a bucket of 1 B
    chain = Chain.from_dict(json.loads((Path(__file__).parent / "data" / "offload_gap_chain.json").read_text()))
    assert solve_offload(chain, 52, Link(1e-30, 1e-30), bucket=1, backend="cpu").swaps == 1  # within range
    for link in (Link(1e-40, 1e-40), Link(1.0, 1.0, 1e39), Link(1.0, 1e-40), Link(1.0, 1.0, 2e38), Link(1e-37, 1e-37)):
        with pytest.raises(ValueError, match="beyond what the solver's float32 tables can sum") as err:
            solve_offload(chain, 52, link, bucket=1, backend="cpu")
        assert "bucket" not in str(err.value)
    assert solve_offload(chain, 60, Link(0.0, 0.0), bucket=1, backend="cpu").swaps == 0  # useless: allowed


def test_microseconds_in_every_spelling_and_no_unicode_case_folding():
    # a review: the Greek mu (U+03BC, what keyboards type) matched the pattern's micro sign case-insensitively
    # and then missed the unit table (KeyError, a traceback from the CLI); 'ſ' (long s) folded to 's' and read
    # a rate per second as per ms (1000x)
    from gpusolve.units import parse_duration_ms
    for text in ("10us", "10US", "10\u00b5s", "10\u03bcs", "10\u039cs", "10\u039cS", "0.01ms", "1e-5s"):
        assert parse_duration_ms(text) == pytest.approx(0.01), text
    assert Link.parse("12GB/s", latency_ms="10\u03bcs").latency_ms == pytest.approx(0.01)
    with pytest.raises(ValueError, match="is not a rate"):
        parse_rate("12GB/\u017f")
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration_ms("10\u017f")
    # a rate per "sec" was read, a latency in "sec" refused: one spelling for both (a review)
    assert parse_duration_ms("1sec") == parse_duration_ms("1 SEC") == 1000.0 and parse_rate("12GB/sec") == 12e6


# ------------------------------------------------------------------ useless link = today's chain DP
@pytest.mark.parametrize("seed", range(12))
def test_useless_link_planes_equal_the_chain_table_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, int(rng.integers(1, 9)), multi_tape=bool(seed % 4))
    for bucket, dtype in ((1, np.float32), (3, np.float32), (1, np.float64)):
        problem = Problem.build(chain, bucket, 160 // bucket, dtype=dtype)
        ref = cpu.fill(problem).table
        table = fill(problem, chain, Link.useless())
        assert table.planes[0].dtype == ref.dtype
        assert np.array_equal(table.planes[0], ref) and np.array_equal(table.planes[1], ref)
        for one_way in (Link(0, 5.0), Link(5.0, 0)):  # a swap needs both directions
            assert np.array_equal(fill(problem, chain, one_way).planes[1], ref)


def test_useless_link_on_a_bundled_profile_at_a_coarse_bucket():
    chain = Chain.load("resnet50_b128")
    budget = store_all_peak_bytes(chain) // 2
    bucket = budget // 96
    problem = Problem.build(chain, bucket, budget // bucket)
    ref = cpu.fill(problem).table
    table = fill(problem, chain, Link.useless())
    assert np.array_equal(table.planes[0], ref) and np.array_equal(table.planes[1], ref)
    # A real link: sigma = 1 never worse, the top curve never worse than the chain DP's.
    fast = fill(problem, chain, Link.parse("12GB/s", latency_ms=0.01))
    assert np.all(fast.planes[1] <= fast.planes[0])
    assert np.all(fast.curve <= ref[problem.row(0, chain.n)])


@pytest.mark.parametrize("seed", range(8))
def test_sigma_one_is_never_worse(seed):
    rng = np.random.default_rng(100 + seed)
    chain = random_chain(rng, int(rng.integers(2, 8)))
    problem = Problem.build(chain, 1, 150)
    table = fill(problem, chain, Link(float(rng.uniform(1, 80)), float(rng.uniform(1, 80)), float(rng.uniform(0, 0.3))))
    assert np.all(table.planes[1] <= table.planes[0])


# ----------------------------------------------------------------------- DP value = simulated time
@pytest.mark.parametrize("seed", range(16))
def test_dp_value_equals_the_two_timeline_simulation_exactly(seed):
    """Dyadic times and taus: the float32 table and the float64 simulator are both exact."""
    rng = np.random.default_rng(200 + seed)
    chain = dyadic_chain(rng, int(rng.integers(2, 8)), multi_tape=bool(seed % 5))
    link = dyadic_link(rng)
    bucket = int(rng.choice([1, 1, 2, 3]))
    top = 150 // bucket
    table = fill(Problem.build(chain, bucket, top), chain, link)
    for m in range(top + 1):
        policy = table.policy(m)
        if policy is None:
            assert np.isinf(table.curve[m])
            continue
        sim = simulate(chain, policy_to_schedule(policy, 0, chain.n), link=link)
        assert sim.peak_bytes <= m * bucket, (m, sim.peak_bytes)
        assert sim.time_ms == float(table.curve[m]), (m, sim.time_ms, table.curve[m])


@pytest.mark.parametrize("seed", range(8))
def test_dp_value_equals_the_simulation_to_float32_rounding(seed):
    rng = np.random.default_rng(300 + seed)
    chain = random_chain(rng, int(rng.integers(2, 8)))
    link = Link(float(rng.uniform(2, 100)), float(rng.uniform(2, 100)), float(rng.uniform(0, 0.2)))
    table = fill(Problem.build(chain, 1, 140), chain, link)
    for m in range(141):
        policy = table.policy(m)
        if policy is not None:
            sim = simulate(chain, policy_to_schedule(policy, 0, chain.n), link=link)
            assert sim.peak_bytes <= m
            assert sim.time_ms == pytest.approx(float(table.curve[m]), rel=1e-6)


def test_minimum_budget_can_only_drop_with_a_free_link():
    rng = np.random.default_rng(7)
    for _ in range(25):
        chain = random_chain(rng, int(rng.integers(1, 8)))
        problem = Problem.build(chain, 1, 160)
        first = {}
        for name, link in (("useless", Link.useless()), ("free", Link(math.inf, math.inf)), ("slow", Link(1, 1, 3))):
            finite = np.flatnonzero(np.isfinite(fill(problem, chain, link).curve))
            first[name] = int(finite[0]) if len(finite) else None
        assert first["useless"] == min_feasible_bytes(chain)
        least = min_offload_bytes(chain)
        assert least <= min_feasible_bytes(chain)
        assert first["free"] == first["slow"] == least  # feasibility does not depend on a finite tau


# ---------------------------------------------------------------------------- exhaustive search
def tiny_case(seed: int, n: int, multi_tape: bool) -> tuple[int, Chain, Link]:
    """(n, a random chain of n stages, a random link with or without latency) for the exhaustive searches."""
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, n, multi_tape=multi_tape)
    return n, chain, Link(float(rng.uniform(2, 60)), float(rng.uniform(2, 60)), float(rng.choice([0.0, 0.2])))


def exhaustive(chain: Chain, link: Link) -> tuple[list[tuple[float, int]], int]:
    """(time, peak) of every policy of the class over ``link``, simulated, and how many the simulator
    rejected (a swap of a tape output)."""
    results, rejected = [], 0
    for policy in all_policies(0, chain.n, chain.multi_tape, swaps=True):
        try:
            sim = simulate(chain, policy_to_schedule(policy, 0, chain.n), link=link)
        except ScheduleError:
            rejected += 1
            continue
        results.append((sim.time_ms, sim.peak_bytes))
    return results, rejected


@pytest.mark.parametrize("seed", range(14))
def test_dp_equals_exhaustive_search_over_the_schedule_class(seed):
    n, chain, link = tiny_case(400 + seed, 2 + seed % 4, bool(seed % 3))
    results, rejected = exhaustive(chain, link)
    assert n < 3 or rejected or not chain.multi_tape
    top = max(peak for _, peak in results) + 2
    table = fill(Problem.build(chain, 1, top, dtype=np.float64), chain, link)
    for m in range(top + 1):
        fitting = [t for t, peak in results if peak <= m]
        if not fitting:
            assert np.isinf(table.curve[m]), m
        else:
            assert table.curve[m] == pytest.approx(min(fitting), rel=1e-12, abs=1e-12), m
    assert min_offload_bytes(chain) == min(peak for _, peak in results)


@pytest.mark.parametrize("seed", range(14))
def test_least_peak_policy_runs_at_the_exhaustive_least(seed):
    # the policy the front end falls back to where bucket rounding leaves no plan: its simulated peak is the
    # least over every policy of the class (exhaustive search), its simulated time the table's (the overlapping
    # swaps' condition included), and it is not faster than the fastest policy at that peak
    n, chain, link = tiny_case(900 + seed, 2 + seed % 5, bool(seed % 3))
    results = [(peak, t) for t, peak in exhaustive(chain, link)[0]]
    least = min(peak for peak, _ in results)
    policy = min_offload_policy(chain, link)
    sim = simulate(chain, policy_to_schedule(policy, 0, n), link=link)
    _peak, cost, _kind, _k = least_peak_tables(chain, link)
    assert sim.peak_bytes == least == min_offload_bytes(chain)
    assert sim.time_ms == pytest.approx(cost[0, 0, n], rel=1e-12)
    assert sim.time_ms >= min(t for peak, t in results if peak == least) - 1e-12
    # over a useless link every swap's time is infinite: the least peak is still reached (the tie order picked a
    # Tape there, the first candidate, whose peak was not the least: a slip of the change)
    unpriced = min_offload_policy(chain, Link.useless())
    assert simulate(chain, policy_to_schedule(unpriced, 0, n), link=link).peak_bytes == least


# ------------------------------------------------------------------------- the spec, by hand
def test_spec_worked_example():
    """B.4.1's example: act[i] = 4, act[k] = 2, sfn(i, k) = 2, t_bwd[k+1] = 2, tau = 3 both ways, room
    to overlap: e_off = e_pre = 1, and Swap k costs Checkpoint k's time + 2 with the right part at
    m + 2 instead of m - 2. Here i = 1, k = 2, j = 3 (a_1 made a plain checkpoint by Checkpoint 1)."""
    chain = Chain(t_fwd=[1.0, 1.0, 1.0], t_fwd_nograd=[1.0, 2.0, 1.0], t_bwd=[1.0, 1.0, 2.0],
                  act_bytes=[4, 2, 1], grad_bytes=[1, 1, 1], tape_bytes=[5, 3, 2],
                  fwd_nograd_extra=[0, 0, 0], fwd_grad_extra=[0, 0, 0], bwd_extra=[0, 0, 0], input_bytes=1)
    link = Link(math.inf, math.inf, latency_ms=3.0)  # tau = 3 ms whatever the size
    problem = Problem.build(chain, 1, 40)
    swap = SwapArrays.build(problem, chain, link)
    assert float(problem.sfn(1, 2)) == 2.0
    assert float(swap.w_off[1, 2]) == 3.0  # sfn + e_off = 2 + 1
    assert float(swap.e_overlap[1, 2]) == 1.0 and float(swap.e_full[1]) == 3.0
    table = fill(problem, chain, link)
    i, j, k = 1, 3, 2
    for m in range(int(problem.thr_ckpt(i, j, k)), 30):
        if m - 2 < swap.pre_b[k + 1] or m + 4 > problem.buckets:
            continue
        ck = 2.0 + table.value(k, j, m - 2, 1) + table.value(i, k, m, 1)
        sw = 2.0 + 1.0 + table.value(k, j, m + 2, 1) + 1.0 + table.value(i, k, m, 1)
        assert table.value(i, j, m, 1) == min(ck, sw, table.value(i, j, m, 0))
        assert (sw < ck) == (table.value(k, j, m + 2, 1) + 2 < table.value(k, j, m - 2, 1))
    # The same exposures measured on the simulator: Swap 2 costs Checkpoint 2's time + e_off + e_pre.
    inner = (Tape(None), Tape(None))
    plain = simulate(chain, policy_to_schedule(Checkpoint(1, Checkpoint(2, *inner), Tape(None)), 0, 3), link=link)
    swapped = simulate(chain, policy_to_schedule(Checkpoint(1, Swap(2, *inner), Tape(None)), 0, 3), link=link)
    assert swapped.time_ms == plain.time_ms + 2.0


def spec_counterexample_chain() -> Chain:
    # Stage 3 releases its whole tape (10 B) at the start of its backward: tape_need[3] = 0, but until
    # bwd(3) starts the right part holds those 10 B.
    return Chain(t_fwd=[1.0, 1.0, 1.0], t_fwd_nograd=[1.0, 1.0, 1.0], t_bwd=[1.0, 1.0, 1.0],
                 act_bytes=[6, 0, 0], grad_bytes=[0, 0, 0], tape_bytes=[7, 4, 10], bwd_tape_bytes=[7, 4, 0],
                 fwd_nograd_extra=[0, 0, 0], fwd_grad_extra=[0, 0, 0], bwd_extra=[0, 0, 0])


def test_spec_prefetch_condition_counterexample():
    """The spec lets the prefetch overlap bwd(k+1) when m - act[k] >= tape_need[k+1]; but prefetch(i)
    holds a_i before bwd(k+1) has released the unneeded part of its tape. At budget 10: the state
    (1, 3, 4, 1) has m - act[2] = 4 >= tape_need[3] = 0, yet the overlapping emission peaks at 16."""
    chain = spec_counterexample_chain()
    problem = Problem.build(chain, 1, 10)
    assert int(problem.tape_need[3]) == 0
    swap = SwapArrays.build(problem, chain, Link(math.inf, math.inf))
    assert int(swap.pre_b[3]) == 10  # tape[3] + grad[3]: what is held when prefetch(1) is issued
    overlap = Checkpoint(1, Swap(2, Tape(None), Tape(None), overlap=True), Tape(None))
    assert simulate(chain, policy_to_schedule(overlap, 0, 3), link=Link(math.inf, math.inf)).peak_bytes == 16
    # The DP picks the no-overlap variant there, which fits, and is faster than any recompute plan.
    link = Link(math.inf, math.inf)
    table = fill(problem, chain, link)
    policy = table.policy(10)
    assert policy == Checkpoint(1, Swap(2, Tape(None), Tape(None), overlap=False), Tape(None))
    sim = simulate(chain, policy_to_schedule(policy, 0, 3), link=link)
    assert sim.peak_bytes == 10 and sim.time_ms == float(table.curve[10]) == 8.0
    assert cpu.fill(problem).curve[10] == 9.0  # recompute only: Checkpoint 2, then Checkpoint 1 inside
    assert choose(problem, swap, table.planes, 1, 3, 4, 1)[0] == SWAP


def test_swap_is_used_and_beneficial_on_random_chains():
    rng = np.random.default_rng(11)
    used = better = 0
    for _ in range(30):
        chain = random_chain(rng, int(rng.integers(3, 8)))
        problem = Problem.build(chain, 1, 120)
        ref = cpu.fill(problem).curve
        link = Link(float(rng.choice([20, 50, 200])), float(rng.choice([20, 50, 200])), 0.0)
        table = fill(problem, chain, link)
        for m in range(0, 121, 3):
            policy = table.policy(m)
            if policy is not None:
                used += offloads(policy_to_schedule(policy, 0, chain.n)) > 0
                better += bool(table.curve[m] < ref[m])
    assert used > 20 and better > 10


# ------------------------------------------------------------- Note [Any-window bound]
def tape_by_recursion(problem: Problem, i: int, j: int, m: int, right) -> float:
    """The Tape candidate of a memoised recursion in exact bytes: ``right(m')`` is C(i + 1, j, m', 0)."""
    if m < int(problem.thr_tape(i, j)):
        return math.inf
    if j == i + 1:
        return float(problem.t_tape[i + 1])
    if not problem.multi_tape:
        return math.inf
    return float(problem.t_tape[i + 1]) + right(m - int(problem.tape_b[i + 1]))


def bound_by_recursion(chain: Chain, link: Link, budget: int) -> float:
    """The any-window bound written directly as a memoised recursion in exact bytes and float64 (a
    second implementation of the Note's recurrence, not the vectorised fill)."""
    from functools import lru_cache
    problem = Problem.build(chain, 1, budget, dtype=np.float64)
    act = chain.padded()["act_bytes"]
    tau = [link.d2h_ms(int(x)) + link.h2d_ms(int(x)) for x in act]

    @lru_cache(maxsize=None)
    def c(i, j, m, s):
        if m < 0:
            return math.inf
        best = tape_by_recursion(problem, i, j, m, lambda mm: c(i + 1, j, mm, 0))
        for k in range(i + 1, j):
            if m < int(problem.thr_ckpt(i, j, k)):
                continue
            sfn = float(problem.sfn(i, k))
            best = min(best, sfn + c(k, j, m - int(act[k]), 1) + c(i, k, m, s))
            if s:
                right = c(k, j, min(budget, m - int(act[k]) + int(act[i])), 1)
                best = min(best, max(sfn + right, tau[i]) + c(i, k, m, 1))
        return best

    return c(0, chain.n, budget, 0)


@pytest.mark.parametrize("seed", range(10))
def test_any_window_bound_against_a_recursion_and_the_exact_table(seed):
    rng = np.random.default_rng(300 + seed)
    chain = dyadic_chain(rng, int(rng.integers(2, 7)))
    link = dyadic_link(rng)
    problem = Problem.build(chain, 1, 90)
    swap = SwapArrays.build(problem, chain, link)
    exact = solve_tables(problem, swap)
    bound = solve_tables(problem, swap, windows="any")
    for plane in (0, 1):  # a bound of the exact class, state by state
        assert np.all(bound[plane] <= exact[plane])
    for m in (0, 20, 45, 90):
        top = float(bound[0][problem.row(0, chain.n), m])
        assert top == bound_by_recursion(chain, link, m)  # dyadic times: exact in float32 and float64
        if m:
            assert window_bound(chain, m, link, bucket_bytes=1) == (float(exact[0][problem.row(0, chain.n), m]), top)


def test_any_window_bound_limits():
    rng = np.random.default_rng(7)
    chain = random_chain(rng, 6)
    problem = Problem.build(chain, 1, 120)
    ref = cpu.fill(problem).table
    useless = solve_tables(problem, SwapArrays.build(problem, chain, Link.useless()), windows="any")
    assert np.array_equal(useless[0], ref) and np.array_equal(useless[1], ref)
    free = SwapArrays.build(problem, chain, Link(math.inf, math.inf))  # tau = 0: the windows do not matter
    assert all(np.array_equal(a, b) for a, b in zip(solve_tables(problem, free, windows="any"),
                                                      solve_tables(problem, free)))
    with pytest.raises(ValueError, match="windows"):
        solve_tables(problem, free, windows="all")


def test_any_window_bound_by_hand():
    """At (1, 3, m = 5, 1) only Swap 2 fits: a_1 (4 B) is copied in 3 ms each way (latency), sfn(1, 2)
    = 2 ms, the right part (Tape of stage 3, at 5 - 2 + 4 = 7 B) takes 2 ms, the left (Tape of stage 2)
    2 ms. No room to overlap the prefetch (5 - act[2] = 3 < pre_b[3] = 4): Swap costs
    max(2, 3) + 2 + 3 + 2 = 10. The bound lets both copies (6 ms) overlap sfn and the right part
    (4 ms): max(2 + 2, 6) + 2 = 8. From m = 6 Checkpoint 2 fits and both give 6."""
    chain = Chain(t_fwd=[1.0, 1.0, 1.0], t_fwd_nograd=[1.0, 2.0, 1.0], t_bwd=[1.0, 1.0, 1.0],
                  act_bytes=[4, 2, 1], grad_bytes=[1, 1, 1], tape_bytes=[5, 3, 2],
                  fwd_nograd_extra=[0, 0, 0], fwd_grad_extra=[0, 0, 0], bwd_extra=[0, 0, 0], input_bytes=1)
    link = Link(math.inf, math.inf, latency_ms=3.0)
    problem = Problem.build(chain, 1, 40, dtype=np.float64)
    swap = SwapArrays.build(problem, chain, link)
    assert int(swap.pre_b[3]) == 4
    exact, bound = solve_tables(problem, swap), solve_tables(problem, swap, windows="any")
    row = problem.row(1, 3)
    assert exact[1][row, 5] == 10.0 and bound[1][row, 5] == 8.0
    assert exact[0][row, 5] == bound[0][row, 5] == math.inf  # sigma = 0: no swap, Checkpoint 2 needs 6
    assert exact[1][row, 6] == bound[1][row, 6] == 6.0


# ------------------------------------------------------------------------------------- front end
def test_solve_offload_front_end():
    chain = spec_counterexample_chain()
    plan = solve_offload(chain, 10, Link(math.inf, math.inf), bucket=1)
    assert plan.feasible and plan.predicted_time_ms == plan.dp_time_ms == 8.0 and plan.swaps == 1
    assert plan.predicted_peak_bytes <= 10
    assert plan.to_dict()["link"]["latency_ms"] == 0.0
    # what offloading buys against recompute only (9.0 ms: the useless-link plan below), in one note
    assert plan.to_dict()["recompute_only_time_ms"] == 9.0
    assert "offloading saves 1.00 ms (11.1 %) against recompute only at this budget (9.00 ms" in plan.summary()
    slow = solve_offload(chain, 10, Link(1e-3, 1e-3), bucket=1)
    assert slow.swaps == 0 and "offloading saves nothing at this budget" in slow.summary()
    with pytest.raises(InfeasibleBudgetError) as err:
        solve_offload(chain, 5, "12GB/s", bucket=1)
    assert err.value.min_bytes == min_offload_bytes(chain) == 10
    assert not solve_offload(chain, 5, "12GB/s", bucket=1, strict=False).feasible
    with pytest.raises(InfeasibleBudgetError) as err:  # useless link: the chain DP's minimum
        solve_offload(chain, 9, Link.useless(), bucket=1)
    assert err.value.min_bytes == min_feasible_bytes(chain) == 10
    plain = solve_offload(chain, 10, Link.useless(), bucket=1)
    assert plain.swaps == 0 and plain.predicted_time_ms == 9.0
    rng = np.random.default_rng(5)
    for _ in range(6):
        chain = random_chain(rng, 6, scale=1000)
        budget = store_all_peak_bytes(chain) * 2 // 3
        if budget < min_offload_bytes(chain):
            continue
        plan = solve_offload(chain, budget, Link(500.0, 400.0, 0.1))
        assert plan.predicted_peak_bytes <= budget
        assert plan.predicted_time_ms == pytest.approx(plan.dp_time_ms, rel=1e-6)


# ------------------------------------------------------------------------------- IR and simulator
def test_new_ops_json_round_trip_and_text():
    policy = Checkpoint(1, Swap(2, Tape(None), Tape(None), overlap=True), Tape(None))
    schedule = policy_to_schedule(policy, 0, 3)
    assert [str(op) for op in schedule] == [
        "fwd_nograd(1, keep)", "offload(1)", "fwd_nograd(2, keep)", "release(1)", "fwd_tape(3)", "prefetch(1)",
        "bwd(3)", "free(2)", "acquire(1)", "fwd_tape(2)", "bwd(2)", "free(1)", "fwd_tape(1)", "bwd(1)"]
    assert schedule_from_json(schedule_to_json(schedule)) == schedule
    assert schedule_to_json([Op(OpKind.PREFETCH, 4)]) == [["prefetch", 4]]
    late = policy_to_schedule(Checkpoint(1, Swap(2, Tape(None), Tape(None), overlap=False), Tape(None)), 0, 3)
    assert [str(op) for op in late[4:9]] == ["fwd_tape(3)", "bwd(3)", "free(2)", "prefetch(1)", "acquire(1)"]


def test_simulator_rules_and_validation():
    chain = Chain(t_fwd=[1.0, 1.0, 1.0], t_fwd_nograd=[2.0, 1.0, 1.0], t_bwd=[1.0, 1.0, 4.0],
                  act_bytes=[8, 2, 1], grad_bytes=[1, 1, 1], tape_bytes=[9, 3, 2],
                  fwd_nograd_extra=[0, 0, 0], fwd_grad_extra=[0, 0, 0], bwd_extra=[0, 0, 0])
    link = Link(2.0, 4.0, 0.5)  # a_1: 4.5 ms out, 2.5 ms back
    sched = policy_to_schedule(Checkpoint(1, Swap(2, Tape(None), Tape(None)), Tape(None)), 0, 3)
    sim = simulate(chain, sched, link=link, trace=True)
    # fwd1 2 | offload; fwd2 1; release waits to 2 + 4.5 | fwd_tape3 1 | prefetch; bwd3 4 (covers 2.5)
    # | free, acquire | fwd_tape2 1, bwd2 1 | free | fwd_tape1 1, bwd1 1
    assert sim.time_ms == 6.5 + 1 + 4 + 2 + 2
    assert sim.memory_trace[3] == 1 + 2  # after release: grad a_3 and a_2; a_1 is gone
    assert sim.memory_trace[5] == 1 + 2 + 2 + 8  # after prefetch: a_1 is held again
    with pytest.raises(ScheduleError, match="needs a link"):
        simulate(chain, sched)
    bad = {
        "not held as a plain checkpoint": [Op(OpKind.FWD_TAPE, 1), Op(OpKind.OFFLOAD, 1)],
        "was not prefetched": [Op(OpKind.FWD_NOGRAD, 1, True), Op(OpKind.ACQUIRE, 1)],
        "was not offloaded": [Op(OpKind.FWD_NOGRAD, 1, True), Op(OpKind.RELEASE, 1)],
        "not on the host": [Op(OpKind.FWD_NOGRAD, 1, True), Op(OpKind.PREFETCH, 1)],
        "in flight": [Op(OpKind.FWD_NOGRAD, 1, True), Op(OpKind.OFFLOAD, 1), Op(OpKind.FREE, 1)],
        "not held": [Op(OpKind.FWD_NOGRAD, 1, True), Op(OpKind.OFFLOAD, 1), Op(OpKind.RELEASE, 1),
                     Op(OpKind.FWD_NOGRAD, 2, True)],
    }
    for message, ops in bad.items():
        with pytest.raises(ScheduleError, match=message):
            simulate(chain, ops, link=link)
    with pytest.raises(ScheduleError, match="on the host"):  # nothing may be left over
        simulate(chain, [Op(OpKind.FWD_NOGRAD, 1, True), Op(OpKind.FWD_TAPE, 2), Op(OpKind.FWD_TAPE, 3),
                         Op(OpKind.BWD, 3), Op(OpKind.BWD, 2), Op(OpKind.OFFLOAD, 1), Op(OpKind.RELEASE, 1),
                         Op(OpKind.FWD_TAPE, 1), Op(OpKind.BWD, 1)], link=link)
    # FIFO: the second offload waits for the first, the compute timeline for each release/acquire.
    K = OpKind
    fifo = [Op(K.FWD_NOGRAD, 1, True), Op(K.FWD_NOGRAD, 2, True), Op(K.OFFLOAD, 1), Op(K.OFFLOAD, 2),
            Op(K.RELEASE, 1), Op(K.RELEASE, 2), Op(K.PREFETCH, 2), Op(K.ACQUIRE, 2), Op(K.PREFETCH, 1),
            Op(K.ACQUIRE, 1), Op(K.FWD_TAPE, 3), Op(K.BWD, 3), Op(K.FREE, 2), Op(K.FWD_TAPE, 2), Op(K.BWD, 2),
            Op(K.FREE, 1), Op(K.FWD_TAPE, 1), Op(K.BWD, 1)]
    # forwards end at 3; d2h a_1 3 -> 7.5, d2h a_2 7.5 -> 9; h2d a_2 9 -> 10, h2d a_1 10 -> 12.5; then 9 ms
    assert simulate(chain, fifo, link=link).time_ms == 12.5 + 9


def _passthrough_profile(blocks: int, stripped: bool = False) -> dict:
    """Blocks of widen (makes h, 8000 B, slow), narrow (returns (fc(h), h)), merge (consumes both):
    narrow's output shares h with widen's (Note [Outputs passed through] in gpusolve/chain.py)."""
    stages = []
    for b in range(blocks):
        n = 3 * b
        base = dict(t_bwd=2.0, bwd_peak=0, bwd_delta=0, fwd_peak_nograd=0, fwd_peak_grad=0)
        stages += [
            base | dict(name=f"widen{b}", t_fwd=5.0, t_fwd_nograd=5.0, x=8000, x_nbytes=8000, xbar=8000,
                        out_saved_bytes=8000, in_saved_bytes=0, held_from=[[n + 1, 8000]]),
            base | dict(name=f"narrow{b}", t_fwd=0.5, t_fwd_nograd=0.5, x=100, x_nbytes=8100, xbar=100,
                        out_saved_bytes=8000, in_saved_bytes=8000, held_from=[[n + 1, 8000], [n + 2, 100]]),
            base | dict(name=f"merge{b}", t_fwd=0.5, t_fwd_nograd=0.5, x=100, x_nbytes=100, xbar=100,
                        out_saved_bytes=100, in_saved_bytes=0, held_from=[[n + 3, 100]])]
    if stripped:
        stages = [{k: v for k, v in st.items() if k != "held_from"} for st in stages]
    return {"format": "measured-chain/1", "device": "cpu", "input_bytes": 100, "stages": stages}


def test_outputs_sharing_a_storage_are_never_swapped():
    """Moving a_s to the host frees nothing of a storage another output shares (the executor keeps it,
    Note [Shared storages] in torch_exec/offload.py). The profile's held_from says which outputs share;
    those are never swapped, and the least budget is the one such plans reach. Without held_from the
    solver swaps them (which is what this test would catch)."""
    link = Link(1e6, 1e6)  # 1 TB/s: swapping is nearly free
    stripped = Chain.from_profile(_passthrough_profile(4, stripped=True))
    chain = Chain.from_profile(_passthrough_profile(4))
    never = np.flatnonzero(~chain.swappable()[1:]) + 1
    assert never.tolist() == [s for s in range(1, 13) if s % 3 != 0]
    budget = int(0.55 * store_all_peak_bytes(chain))
    swapped_before = {op.stage for op in solve_offload(stripped, budget, link, bucket=1, backend="cpu").schedule
                      if op.kind is OpKind.OFFLOAD}
    assert swapped_before & set(never.tolist())
    for m in (budget, min_offload_bytes(chain)):
        plan = solve_offload(chain, m, link, bucket=1, backend="cpu")
        swapped = {op.stage for op in plan.schedule if op.kind is OpKind.OFFLOAD}
        assert plan.feasible and not swapped & set(never.tolist()), (m, swapped)


@pytest.mark.filterwarnings("ignore::gpusolve.FallbackWarning")
def test_a_useless_link_is_never_slower_than_recompute_only():
    """Over a link of 0 B/s the combined table equals the chain DP's, but "auto" solves a short chain
    with no bucket exactly: the comparison with gpusolve.solve (Note [Never slower than recompute only])
    was skipped there, and a review's 13-stage chain got 29.57 against 24.71 ms at 2971 B."""
    import json
    from gpusolve import solve
    rng = np.random.default_rng(143)
    chain = random_chain(rng, int(rng.integers(3, 14)), scale=int(rng.choice([10**3, 10**6])))
    useless = Link.parse("0B/s")
    assert useless.is_useless
    plain = solve(chain, 2971)
    plan = solve_offload(chain, 2971, useless)
    assert plan.predicted_time_ms <= plain.predicted_time_ms * (1 + 1e-12), (plan.predicted_time_ms, plain.predicted_time_ms)
    assert plan.recompute_only is not None
    json.dumps(plan.to_dict(), allow_nan=False)


def test_an_offload_plan_without_a_table_value_is_valid_json():
    """dp_time_ms is NaN where no table value made the plan (an infeasible plan, the least-peak fallback):
    --json refused it ("Out of range float values are not JSON compliant"); it is null there, and so is an
    infeasible plan's infinite time, of any solver."""
    import json
    from gpusolve import solve
    chain = random_chain(np.random.default_rng(7), 5)
    plan = solve_offload(chain, 1, Link.parse("12GB/s"), backend="cpu", strict=False)
    assert not plan.feasible and math.isnan(plan.dp_time_ms)
    data = json.loads(json.dumps(plan.to_dict(), allow_nan=False))
    assert data["dp_time_ms"] is None and data["predicted_time_ms"] is None
    data = json.loads(json.dumps(solve(chain, 1, backend="cpu", strict=False).to_dict(), allow_nan=False))
    assert data["predicted_time_ms"] is None and data["overhead"] is None


def test_rates_keep_fractions_refuse_bits_and_take_numpy_numbers():
    """A review's rates: '0.5B/ms' became 0 (a useless link, silently), '12Gb/s' was read as 12 GB/s,
    '-5GB/s' suggested '5GB', NumPy numbers were refused as not numbers, and a link's dict without its
    keys raised a bare KeyError."""
    assert parse_rate("0.5B/ms") == 0.5 and parse_rate("0.5/ms") == 0.5
    assert parse_rate("1e15GB/s") == pytest.approx(1e21)  # no device size limit on a rate
    with pytest.raises(ValueError, match="lowercase b reads as bits.*'12GB/s'"):
        parse_rate("12Gb/s")
    with pytest.raises(ValueError, match="negative.*'5GB/s'"):
        parse_rate("-5GB/s")
    assert parse_rate(np.int64(5)) == 5.0 and parse_rate(np.float32(2.5)) == 2.5
    # a second review: '12GB/s/s' was refused quoting '12GB/s', and '1e400GB/s' was an unlimited link
    with pytest.raises(ValueError, match=r"'12GB/s/s' is not a rate"):
        parse_rate("12GB/s/s")
    with pytest.raises(ValueError, match=r"'1e400GB/s' is beyond any number.*'inf'"):
        parse_rate("1e400GB/s")
    assert parse_rate("inf") == float("inf")
    link = Link(np.int64(5), np.int64(6), np.float32(0.5))
    assert (link.d2h_bytes_per_ms, link.h2d_bytes_per_ms, link.latency_ms) == (5.0, 6.0, 0.5)
    with pytest.raises(ValueError, match=r"needs 'd2h_bytes_per_ms'.*\['h2d_bytes_per_ms'\] is missing"):
        Link.from_dict({"d2h_bytes_per_ms": 5})
    assert Link.from_dict(Link.parse("12GB/s", latency_ms="0.01ms").to_dict()) == Link.parse("12GB/s", latency_ms="0.01ms")
    # a third review: '1e-400GB/s' read as a useless link, channels=1.7 as 1, channels=None raised a TypeError
    for tiny in ("1e-400GB/s", "1e-322B/s"):  # the second underflows only per millisecond
        with pytest.raises(ValueError, match=rf"'{tiny}' is below any number.*give 0 for a useless link"):
            parse_rate(tiny)
    assert parse_rate("0GB/s") == parse_rate("0.0e5GB/s") == parse_rate("0") == 0.0
    for channels in (1.7, None, True, "1", 2):
        with pytest.raises(ValueError, match=r"channels = .*only one copy channel.*give 1"):
            Link.from_dict({"d2h_bytes_per_ms": 5, "h2d_bytes_per_ms": 5, "channels": channels})
    assert Link.from_dict({"d2h_bytes_per_ms": 5, "h2d_bytes_per_ms": 5, "channels": 1.0}).channels == 1


def test_the_offload_dps_bucket_hint_counts_its_three_tables(monkeypatch):
    """Too fine a bucket for host memory: the hint was sized for the chain DP's two tables, so following
    it raised again ("the offload DP needs ... give a coarser bucket"); the default bucket raised instead of
    coarsening. Both are sized for the offload DP's tables now."""
    import re

    from gpusolve.dp import buckets as B
    from gpusolve.offload import dp as offload_dp
    chain = random_chain(np.random.default_rng(3), 12, scale=10**6)
    budget = store_all_peak_bytes(chain) // 2
    default = B.table_fits_host(chain.n, budget // B.default_bucket(budget, "cpu"), offload_dp.TABLES / 2)[1]
    monkeypatch.setattr(B, "available_host_bytes", lambda: default)  # a fraction of it is allowed: too little
    with pytest.raises(MemoryError, match="use a bucket of at least") as err:
        solve_offload(chain, budget, Link.parse("12GB/s"), bucket=1, backend="cpu")
    hint = int(re.search(r"(\d+) B\)?$", str(err.value)).group(1))
    plan = solve_offload(chain, budget, Link.parse("12GB/s"), bucket=hint, backend="cpu")
    assert plan.feasible and plan.bucket_bytes == hint
    assert B.table_fits_host(chain.n, budget // hint, offload_dp.TABLES / 2)[0]
    assert not B.table_fits_host(chain.n, budget // (hint * 99 // 100), offload_dp.TABLES / 2)[0]  # 1 % finer
    plan = solve_offload(chain, budget, Link.parse("12GB/s"), backend="cpu")  # the default bucket coarsens
    assert plan.feasible and any("the finest that fits" in note for note in plan.notes)


def test_a_chain_of_zero_sizes_fits_a_zero_budget():
    """Every size 0: the least budget is 0 B, and a budget of 0 B was refused as "below the minimum
    feasible budget 0 B" by the bucketed backends and the offload solve (no bucket divides 0 B)."""
    from gpusolve import solve
    n = 2
    zero = Chain(t_fwd=[1.0] * n, t_fwd_nograd=[1.0] * n, t_bwd=[2.0] * n, act_bytes=[0] * n, grad_bytes=[0] * n,
                 tape_bytes=[0] * n, fwd_nograd_extra=[0] * n, fwd_grad_extra=[0] * n, bwd_extra=[0] * n)
    assert min_feasible_bytes(zero) == 0
    assert solve(zero, 0, backend="cpu").feasible
    plan = solve_offload(zero, 0, Link.parse("1GB/s"), backend="cpu")
    assert plan.feasible and plan.predicted_peak_bytes == 0 and plan.predicted_time_ms == 6.0
    for run in (lambda: solve(zero, 0, backend="cpu", bucket=1),
                lambda: solve_offload(zero, 0, Link.parse("1GB/s"), backend="cpu", bucket=1)):
        with pytest.raises(ValueError, match="no bucket .* divides it: leave the bucket out"):
            run()


def test_a_useless_links_plan_says_so():
    # a review: offload="0" gave only "offloading saves nothing at this budget", not why
    chain = random_chain(np.random.default_rng(5), 8, scale=10**6)
    budget = store_all_peak_bytes(chain) * 3 // 4
    useless = solve_offload(chain, budget, Link.parse("0"), backend="cpu")
    assert useless.swaps == 0 and "bandwidth 0" in useless.notes[0]
    assert not any("bandwidth 0" in n for n in solve_offload(chain, budget, Link.parse("12GB/s"), backend="cpu").notes)


def test_a_plan_away_from_the_least_fills_no_least_peak_table_until_asked(monkeypatch):
    """The combined class's least budget is an O(N^3) host DP (0.58-0.70 s on densenet121_fine_b32, CPU:
    bench/results/offload_least_budget_cost_cpu.md) that every
    offload plan filled at construction, once per plan of a curve; now only a solve that needs it (near or below
    the least) fills it, once, and a plan computes it on first use of ``min_feasible_bytes``."""
    from gpusolve.offload import dp as offload_dp
    chain = random_chain(np.random.default_rng(3), 10)
    link = Link(d2h_bytes_per_ms=1e3, h2d_bytes_per_ms=1e3)
    fills = []
    real = offload_dp.least_peak_tables
    monkeypatch.setattr(offload_dp, "least_peak_tables", lambda *a, **k: fills.append(1) or real(*a, **k))
    top = store_all_peak_bytes(chain)
    plan = solve_offload(chain, top, link, backend="cpu", bucket=max(1, top // 512), progress=False)
    assert plan.feasible and fills == []
    assert plan.min_feasible_bytes == int(real(chain)[0][0, 0, chain.n]) and len(fills) == 1
