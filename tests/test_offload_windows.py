"""Note [Inner window] (gpusolve/offload/dp.py): the wider-window candidate the combined DP can price
exactly, checked against a second implementation (a memoised recursion), against the simulator on the
schedule it stands for, and against the plain Swap k table and the any-window bound; and the TapeSwap
candidates of bench/offload_tapes.py (through ``solve_tables``' ``extra``) against the same recursion."""
from __future__ import annotations

import math
from functools import lru_cache

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import random_chain
from gpusolve import Chain, Op, OpKind, simulate
from gpusolve.dp import cpu
from gpusolve.dp.problem import Problem
from gpusolve.offload.dp import SwapArrays, solve_tables
from gpusolve.offload.link import Link
from gpusolve.schedule import policy_to_schedule, tape_chain
from test_offload_dp import dyadic_chain, dyadic_link, tape_by_recursion

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import offload_tapes  # noqa: E402  (bench/offload_tapes.py: the TapeSwap candidates under study)
import offload_windows  # noqa: E402  (bench/offload_windows.py: the local search of --hoist)


def by_recursion(chain: Chain, link: Link, budget: int, inner: bool = True, tape_shares=()):
    """C(i, j, m, s) for m <= ``budget`` with Tape, Checkpoint, Swap k, the inner-window candidate
    (``inner``) and TapeSwap k with x = share x (tape - act) for each of ``tape_shares``, written as a
    memoised recursion in exact bytes and float64 (not the vectorised fill)."""
    problem = Problem.build(chain, 1, budget, dtype=np.float64)
    swap = SwapArrays.build(problem, chain, link)
    arr = chain.padded()
    act = [int(x) for x in arr["act_bytes"]]

    def tape_swaps(i, j, m):
        return min((tape_swap(i, j, m, share) for share in tape_shares), default=math.inf)

    def tape_swap(i, j, m, share):
        s = i + 1
        x = int(math.floor(max(0, int(arr["tape_bytes"][s]) - act[s]) * share))
        if x == 0 or j - i < 3 or not chain.multi_tape or m < int(problem.thr_tape(i, j)):
            return math.inf
        m1 = m - int(arr["tape_bytes"][s])
        best = math.inf
        for k in range(i + 2, j):
            if m1 < int(problem.thr_ckpt(s, j, k)):
                continue
            right = c(k, j, min(budget, m1 - act[k] + x), 1)
            best = min(best, float(arr["t_fwd"][s]) + max(float(problem.sfn(s, k)), link.d2h_ms(x)) + right
                       + max(link.h2d_ms(x), c(s, k, m1, 0, True)) + float(arr["t_bwd"][s]))
        return best

    @lru_cache(maxsize=None)
    def c(i, j, m, s, recompute_only=False):
        if m < 0:
            return math.inf
        best = tape_by_recursion(problem, i, j, m, lambda mm: c(i + 1, j, mm, 0, recompute_only))
        if not recompute_only:
            best = min(best, tape_swaps(i, j, m))
        for k in range(i + 1, j):
            if m < int(problem.thr_ckpt(i, j, k)):
                continue
            best = min(best, float(problem.sfn(i, k)) + c(k, j, m - act[k], 1, recompute_only)
                       + c(i, k, m, s, recompute_only))
            if not s or recompute_only:
                continue
            room = m - act[k]
            e = swap.e_overlap[i, k] if room >= swap.pre_b[k + 1] else swap.e_full[i]
            best = min(best, swap.w_off[i, k] + c(k, j, min(budget, room + act[i]), 1) + e + c(i, k, m, 1))
            for k2 in range(k + 1, j) if inner else ():
                if room < int(problem.thr_ckpt(k, j, k2)):
                    continue
                right = c(k2, j, min(budget, room - act[k2] + act[i]), 1)
                best = min(best, swap.w_off[i, k2] + right + max(swap.e_full[i], c(k, k2, room, 0, True))
                           + c(i, k, m, 1))
        return best

    return c


def test_inner_window_against_a_recursion():
    """Every state of both planes (dyadic times: exact in both); the inner candidate must decide some."""
    decided = 0
    for seed in range(10):
        decided += _compare_with_recursion(np.random.default_rng(500 + seed), bool(seed % 4))
    assert decided > 20


def _compare_with_recursion(rng, multi_tape) -> int:
    chain = dyadic_chain(rng, int(rng.integers(4, 8)), multi_tape=multi_tape)
    data = chain.to_dict()  # large no-grad transients: the second forward's own threshold binds
    data["fwd_nograd_extra"] = [int(v) for v in rng.integers(0, 40, chain.n)]
    chain = Chain.from_dict(data)
    link = Link(float(rng.choice([2, 4, 8, 16])), float(rng.choice([2, 4, 8, 16])), float(rng.choice([0.0, 0.25])))
    budget = 80
    problem = Problem.build(chain, 1, budget, dtype=np.float64)
    swap = SwapArrays.build(problem, chain, link)
    tables = solve_tables(problem, swap, windows="inner", recompute=cpu.solve_table(problem))
    exact = solve_tables(problem, swap)
    c = by_recursion(chain, link, budget)
    decided = 0
    for i in range(chain.n):
        for j in range(i + 1, chain.n + 1):
            for s in (0, 1):
                want = [c(i, j, m, s) for m in range(budget + 1)]
                assert tables[s][problem.row(i, j)].tolist() == want, (i, j, s)
                decided += int(np.sum(tables[s][problem.row(i, j)] < exact[s][problem.row(i, j)]))
    return decided


@pytest.mark.parametrize("seed", range(10))
def test_inner_window_lies_between_the_bound_and_swap_k(seed):
    """Top row (only reachable states feed it): any-window bound <= inner <= recompute only. Over a
    useless link both planes equal the chain DP's table bit for bit."""
    rng = np.random.default_rng(600 + seed)
    chain = dyadic_chain(rng, int(rng.integers(3, 9)))
    link = dyadic_link(rng)
    problem = Problem.build(chain, 1, 130)
    recompute = cpu.solve_table(problem)
    swap = SwapArrays.build(problem, chain, link)
    inner = solve_tables(problem, swap, windows="inner", recompute=recompute)
    bound = solve_tables(problem, swap, windows="any")
    top = problem.row(0, chain.n)
    assert np.all(bound[0][top] <= inner[0][top]) and np.all(inner[0][top] <= recompute[top])
    useless = solve_tables(problem, SwapArrays.build(problem, chain, Link.useless()), windows="inner",
                           recompute=recompute)
    assert np.array_equal(useless[0], recompute) and np.array_equal(useless[1], recompute)


def test_inner_window_is_used():
    """The candidate is not dead: on random chains and links it beats Swap k at some top states."""
    better = 0
    for seed in range(12):
        rng = np.random.default_rng(700 + seed)
        chain = random_chain(rng, int(rng.integers(4, 9)))
        link = Link(float(rng.uniform(2, 40)), float(rng.uniform(2, 40)), 0.0)
        problem = Problem.build(chain, 1, 150)
        swap = SwapArrays.build(problem, chain, link)
        top = problem.row(0, chain.n)
        exact = solve_tables(problem, swap)[0][top]
        inner = solve_tables(problem, swap, windows="inner", recompute=cpu.solve_table(problem))[0][top]
        better += int(np.sum(inner < exact))
    assert better > 10


def test_inner_window_needs_the_recompute_table():
    rng = np.random.default_rng(1)
    chain = random_chain(rng, 4)
    problem = Problem.build(chain, 1, 50)
    swap = SwapArrays.build(problem, chain, Link(8.0, 8.0))
    with pytest.raises(ValueError, match="recompute="):
        solve_tables(problem, swap, windows="inner")
    with pytest.raises(ValueError, match="recompute="):
        solve_tables(problem, swap, recompute=cpu.solve_table(problem))


def composed(i: int, j: int, k: int, k2: int) -> list[Op]:
    """The schedule Note [Inner window] prices, with plain tape chains as the three sub-schedules."""
    ops = [Op(OpKind.OFFLOAD, i)]
    ops += [Op(OpKind.FWD_NOGRAD, s, keep_input=(s == i + 1)) for s in range(i + 1, k + 1)]
    ops += [Op(OpKind.FWD_NOGRAD, s, keep_input=(s == k + 1)) for s in range(k + 1, k2 + 1)]
    ops += [Op(OpKind.RELEASE, i), *policy_to_schedule(tape_chain(k2, j), k2, j), Op(OpKind.FREE, k2),
            Op(OpKind.PREFETCH, i), *policy_to_schedule(tape_chain(k, k2), k, k2), Op(OpKind.FREE, k),
            Op(OpKind.ACQUIRE, i), *policy_to_schedule(tape_chain(i, k), i, k)]
    return ops


@pytest.mark.parametrize("seed", range(16))
def test_inner_window_formula_is_the_simulated_time_and_its_conditions_bound_the_peak(seed):
    """The candidate's value with the sub-problems' own simulated times in place of table reads equals
    the two-timeline simulation of the schedule it stands for, over links where either copy is exposed
    or hidden; the peak is at most what the DP's conditions and reads allow."""
    rng = np.random.default_rng(800 + seed)
    chain = dyadic_chain(rng, int(rng.integers(4, 9)))
    n = chain.n
    i = int(rng.integers(1, n - 2))
    k = int(rng.integers(i + 1, n - 1))
    k2 = int(rng.integers(k + 1, n))
    j = int(rng.integers(k2 + 1, n + 1))
    link = dyadic_link(rng)
    if math.isinf(link.h2d_ms(1)) or math.isinf(link.d2h_ms(1)):
        link = Link(8.0, 8.0)
    act = [int(x) for x in chain.padded()["act_bytes"]]
    problem = Problem.build(chain, 1, 0, dtype=np.float64)

    def part(a, b):
        return simulate(chain, policy_to_schedule(tape_chain(a, b), a, b), start=(a, b))

    right, mid, left = part(k2, j), part(k, k2), part(i, k)
    sfn = float(problem.fwd_prefix[k2] - problem.fwd_prefix[i])
    value = (max(sfn, link.d2h_ms(act[i])) + right.time_ms + max(link.h2d_ms(act[i]), mid.time_ms)
             + left.time_ms)
    # a_i must be a checkpoint of the simulated sub-chain: (i - 1, j) with a Checkpoint at i around it
    tail = part(i - 1, i)
    ops = [Op(OpKind.FWD_NOGRAD, i, keep_input=True), *composed(i, j, k, k2), Op(OpKind.FREE, i),
           *policy_to_schedule(tape_chain(i - 1, i), i - 1, i)]
    sim = simulate(chain, ops, start=(i - 1, j), link=link)
    assert sim.time_ms == float(problem.sfn(i - 1, i)) + value + tail.time_ms
    allowed = max(int(problem.thr_ckpt_bytes(i, j, k)), act[k] + int(problem.thr_ckpt_bytes(k, j, k2)),
                  act[k] + act[k2] - act[i] + right.peak_bytes, act[k] + mid.peak_bytes, left.peak_bytes)
    assert sim.peak_bytes <= max(int(problem.thr_ckpt_bytes(i - 1, j, i)), act[i] + allowed, tail.peak_bytes)


@pytest.mark.parametrize("shares", [(1.0,), (0.5,), (1.0, 0.5, 0.25)])
def test_tape_swap_candidates_against_the_recursion(shares):
    """bench/offload_tapes.py's TapeSwap through ``extra``: every state of both planes equals the
    recursion's (dyadic: exact), and it decides some states."""
    decided = 0
    for seed in range(8):
        rng = np.random.default_rng(900 + seed)
        chain = dyadic_chain(rng, int(rng.integers(4, 8)))
        link = Link(float(rng.choice([2, 4, 8, 16])), float(rng.choice([2, 4, 8, 16])), float(rng.choice([0.0, 0.25])))
        budget = 90
        problem = Problem.build(chain, 1, budget, dtype=np.float64)
        swap = SwapArrays.build(problem, chain, link)
        recompute = cpu.solve_table(problem)
        extra = offload_tapes.tape_swap_candidates(problem, chain, link, recompute, shares)
        tables, plain = solve_tables(problem, swap, extra=extra), solve_tables(problem, swap)
        c = by_recursion(chain, link, budget, inner=False, tape_shares=shares)
        for i in range(chain.n):
            for j in range(i + 1, chain.n + 1):
                for s in (0, 1):
                    assert tables[s][problem.row(i, j)].tolist() == [c(i, j, m, s) for m in range(budget + 1)]
                    decided += int(np.sum(tables[s][problem.row(i, j)] < plain[s][problem.row(i, j)]))
    assert decided > 20


def test_the_hoisting_search_returns_schedules_that_fit_and_run_that_fast():
    """bench/offload_windows.py --hoist: plans for a fast link, simulated over a slow one, get faster by
    moving prefetches earlier and releases later; what it returns is a valid schedule whose simulated
    time is the one reported and whose peak fits the budget."""
    from gpusolve.offload import solve_offload
    from gpusolve.simulate import store_all_peak_bytes
    gained = 0
    for seed in range(10):
        rng = np.random.default_rng(1000 + seed)
        chain = random_chain(rng, int(rng.integers(5, 10)), scale=1000)
        budget = store_all_peak_bytes(chain) * 2 // 3
        fast, slow = Link(4000.0, 4000.0), Link(300.0, 300.0)
        try:
            plan = solve_offload(chain, budget, fast, backend="cpu")
        except ValueError:
            continue
        emitted = simulate(chain, plan.schedule, link=slow).time_ms
        best, ops = offload_windows.hoisted(chain, plan.schedule, budget, slow)
        moved = simulate(chain, ops, link=slow)
        assert moved.time_ms == best <= emitted and moved.peak_bytes <= budget
        assert sorted(map(str, ops)) == sorted(map(str, plan.schedule))  # the same ops, reordered
        gained += best < emitted
    assert gained >= 2


@pytest.mark.parametrize("seed", range(12))
def test_coarser_buckets_never_beat_exact_bytes(seed):
    """Sizes round up and credits down: at bucket b the top value at m buckets is never below the
    byte-exact one at m * b bytes, for Swap k, the inner window and TapeSwap (all shares); an optimistic
    credit (e.g. ceil(x / b) for TapeSwap) breaks it."""
    rng = np.random.default_rng(1100 + seed)
    chain = dyadic_chain(rng, int(rng.integers(4, 8)))
    link = Link(float(rng.choice([2, 4, 8, 16])), float(rng.choice([2, 4, 8, 16])), 0.0)
    exact_problem = Problem.build(chain, 1, 180, dtype=np.float64)
    for bucket in (2, 3, 5):
        problem = Problem.build(chain, bucket, 180 // bucket, dtype=np.float64)
        for name, fill in FILLS.items():
            coarse = fill(problem, chain, link)[problem.row(0, chain.n)]
            fine = fill(exact_problem, chain, link)[exact_problem.row(0, chain.n)]
            m = np.arange(len(coarse))
            assert np.all(coarse >= fine[m * bucket]), (name, bucket)


def _tables(problem, chain, link, **kw):
    return solve_tables(problem, SwapArrays.build(problem, chain, link), **kw)[0]


FILLS = {
    "swap k": lambda problem, chain, link: _tables(problem, chain, link),
    "inner": lambda problem, chain, link: _tables(problem, chain, link, windows="inner",
                                                  recompute=cpu.solve_table(problem)),
    "tape swap": lambda problem, chain, link: _tables(problem, chain, link, extra=offload_tapes.tape_swap_candidates(
        problem, chain, link, cpu.solve_table(problem), offload_tapes.SHARES)),
}


def test_inner_window_formula_with_nested_swaps_is_the_simulated_time():
    """The Note's claim that the channel is idle at both issues, with copies inside the parts: (k2, j)
    and (i, k) are the combined DP's own optimal sub-policies (swaps included), (k, k2) the chain DP's;
    the composed schedule's simulated time is the candidate's value and its peak fits."""
    from gpusolve.dp.recover import recover_policy, table_lookup
    from gpusolve.offload.dp import recover
    checked = nested = 0
    for seed in range(60):
        rng = np.random.default_rng(1200 + seed)
        chain = dyadic_chain(rng, int(rng.integers(5, 9)))
        link = Link(float(rng.choice([2, 4, 8, 16])), float(rng.choice([2, 4, 8, 16])), float(rng.choice([0.0, 0.25])))
        big_m = 120
        problem = Problem.build(chain, 1, big_m)
        swap = SwapArrays.build(problem, chain, link)
        chain_table = cpu.solve_table(problem)
        tables = solve_tables(problem, swap)
        act = [int(v) for v in chain.padded()["act_bytes"]]
        n = chain.n
        for _ in range(30):
            i = int(rng.integers(1, n - 2))
            k = int(rng.integers(i + 1, n - 1))
            k2 = int(rng.integers(k + 1, n))
            j = int(rng.integers(k2 + 1, n + 1))
            m = int(rng.integers(0, big_m + 1))
            if not chain.swappable()[i] or m < problem.thr_ckpt(i, j, k) or m - act[k] < problem.thr_ckpt(k, j, k2):
                continue
            m_right = min(big_m, m - act[k] - act[k2] + act[i])
            right = tables[1][problem.row(k2, j), m_right]
            mid = chain_table[problem.row(k, k2), m - act[k]]
            left = tables[1][problem.row(i, k), m]
            if not np.isfinite([right, mid, left]).all():
                continue
            value = float(((swap.w_off[i, k2] + right) + max(swap.e_full[i], mid)) + left)
            parts = [policy_to_schedule(recover(problem, swap, tables, m_right, root=(k2, j, 1)), k2, j),
                     policy_to_schedule(recover_policy(problem, table_lookup(chain_table), m - act[k], i=k, j=k2), k, k2),
                     policy_to_schedule(recover(problem, swap, tables, m, root=(i, k, 1)), i, k)]
            ops = [Op(OpKind.FWD_NOGRAD, i, keep_input=True), Op(OpKind.OFFLOAD, i)]
            ops += [Op(OpKind.FWD_NOGRAD, s, keep_input=(s == i + 1)) for s in range(i + 1, k + 1)]
            ops += [Op(OpKind.FWD_NOGRAD, s, keep_input=(s == k + 1)) for s in range(k + 1, k2 + 1)]
            ops += [Op(OpKind.RELEASE, i), *parts[0], Op(OpKind.FREE, k2), Op(OpKind.PREFETCH, i), *parts[1],
                    Op(OpKind.FREE, k), Op(OpKind.ACQUIRE, i), *parts[2], Op(OpKind.FREE, i)]
            tail = policy_to_schedule(tape_chain(i - 1, i), i - 1, i)
            sim = simulate(chain, ops + tail, start=(i - 1, j), link=link)
            tail_sim = simulate(chain, tail, start=(i - 1, i))
            assert sim.time_ms == float(problem.sfn(i - 1, i)) + value + tail_sim.time_ms  # dyadic: exact
            assert sim.peak_bytes <= max(int(problem.thr_ckpt_bytes(i - 1, j, i)), act[i] + m, tail_sim.peak_bytes)
            checked += 1
            nested += any(op.kind is OpKind.OFFLOAD for op in parts[0] + parts[2])
    assert checked > 200 and nested > 10, (checked, nested)


@pytest.mark.parametrize("script", ["offload_windows.py", "offload_tapes.py"])
@pytest.mark.parametrize("bad", [["--profiles", "nosuch"], ["--link", "12XB/s"], ["--link-json", "{missing}"],
                                 ["--link-json", "{fieldless}"]])
def test_bench_studies_answer_bad_input_with_one_line(tmp_path, script, bad):
    import subprocess
    fieldless = tmp_path / "fieldless.json"
    fieldless.write_text('{"device": "x"}')
    bad = [b.format(missing=tmp_path / "missing.json", fieldless=fieldless) for b in bad]
    bench = Path(__file__).resolve().parent.parent / "bench" / script
    proc = subprocess.run([sys.executable, str(bench), *bad, "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(script), proc.stderr
    assert not list(tmp_path.glob("*_cpu.*"))  # nothing written
