"""The exact (bucket-free) DP against independent truth: exhaustive enumeration of policy trees
simulated with ``simulate``, the bucketed CPU DP at a one-byte bucket, the exact least peak, the
thesis reference values, and the recovery invariants."""
from __future__ import annotations

import dataclasses
import json
from functools import lru_cache

import numpy as np
import pytest

from conftest import PROFILES, random_chain
from gpusolve import Chain, Checkpoint, Tape, policy_to_schedule, simulate, solve
from gpusolve.baselines import store_all
from gpusolve.data import THESIS_CASES
from gpusolve.dp import cpu, exact
from gpusolve.dp.minpeak import min_feasible_bytes
from gpusolve.dp.problem import Problem
from gpusolve.dp.recover import recover_policy, table_lookup
from gpusolve.simulate import store_all_time_ms

REFERENCE = THESIS_CASES


def policies(i: int, j: int, multi_tape: bool) -> list:
    """Every policy tree of (i, j), written out independently of the DP."""
    @lru_cache(maxsize=None)
    def sub(lo: int, hi: int) -> tuple:
        if hi == lo + 1:
            return (Tape(None),)
        out = [Tape(r) for r in sub(lo + 1, hi)] if multi_tape else []
        for k in range(lo + 1, hi):
            out += [Checkpoint(k, right, left) for left in sub(lo, k) for right in sub(k, hi)]
        return tuple(out)
    return list(sub(i, j))


def simulated(chain: Chain) -> np.ndarray:
    """(peak, time) of every policy of the whole chain, as a float64 array [P, 2]."""
    rows = []
    for policy in policies(0, chain.n, chain.multi_tape):
        r = simulate(chain, policy_to_schedule(policy, 0, chain.n))
        rows.append((r.peak_bytes, r.time_ms))
    return np.array(rows, dtype=np.float64)


def pareto(points: np.ndarray):
    """Non-dominated (peak, time): peaks ascending, times strictly decreasing (least time per peak)."""
    order = np.lexsort((points[:, 1], points[:, 0]))
    peaks, times = points[order, 0].astype(np.int64), points[order, 1]
    out_p, out_t = [], []
    for p, t in zip(peaks, times):
        if not out_t or t < out_t[-1]:
            if out_p and out_p[-1] == p:
                continue  # same peak, larger time (sorted by time within a peak)
            out_p.append(int(p))
            out_t.append(float(t))
    return np.array(out_p, dtype=np.int64), np.array(out_t)


def without_rounding_steps(peaks, times, rtol=1e-12):
    """Drop points that improve on the previous one by float rounding only: two policies of the same
    true time summed in different orders differ in the last ulps, so either side may keep a step
    the other does not (the DP keeps the DP's float values exactly, like the bucketed backends)."""
    keep_p, keep_t = [], []
    for p, t in zip(peaks, times):
        if not keep_t or t < keep_t[-1] * (1 - rtol):
            keep_p.append(int(p))
            keep_t.append(float(t))
    return keep_p, np.array(keep_t)


def assert_same_front(got, want):
    got_p, got_t = without_rounding_steps(*got)
    want_p, want_t = without_rounding_steps(*want)
    assert got_p == want_p
    np.testing.assert_allclose(got_t, want_t, rtol=1e-12, atol=0)


def tiny_chain(seed: int) -> Chain:
    rng = np.random.default_rng(1000 + seed)
    n = 7 if seed % 4 == 0 else int(rng.integers(1, 8))
    return random_chain(rng, n, multi_tape=bool(seed % 3))


# ---------------------------------------------------------------------------- against enumeration
@pytest.mark.parametrize("seed", range(18))
def test_front_is_the_pareto_set_of_all_policies(seed):
    chain = tiny_chain(seed)
    points = simulated(chain)
    fronts = exact.solve_fronts(chain)
    peaks, times = fronts.front()
    assert_same_front((peaks, times), pareto(points))
    assert np.all(np.diff(peaks) > 0) and np.all(np.diff(times) < 0)
    # At every distinct peak of any policy (and one byte below it): the least time that fits.
    for b in np.unique(points[:, 0]).astype(np.int64):
        for budget in (int(b) - 1, int(b)):
            if budget < 0:
                continue
            fitting = points[points[:, 0] <= budget, 1]
            got = fronts.value(budget)
            if not len(fitting):
                assert got == np.inf
            else:
                assert got == pytest.approx(fitting.min(), rel=1e-12, abs=0)


@pytest.mark.parametrize("seed", range(4))
def test_reserved_bytes_are_counted_like_the_simulator(seed):
    chain = dataclasses.replace(tiny_chain(seed + 50), reserved_bytes=7 + seed)
    fronts = exact.solve_fronts(chain)
    assert_same_front(fronts.front(), pareto(simulated(chain)))
    assert int(fronts.front()[0][0]) == min_feasible_bytes(chain)


@pytest.mark.parametrize("seed", range(6))
def test_every_sub_front_is_the_pareto_set_of_its_sub_chain(seed):
    chain = tiny_chain(seed + 100)
    fronts = exact.solve_fronts(chain)
    n = chain.n
    for i in range(n):
        for j in range(i + 1, n + 1):
            sims = (simulate(chain, policy_to_schedule(p, i, j), start=(i, j))
                    for p in policies(i, j, chain.multi_tape))
            rows = [(r.peak_bytes, r.time_ms) for r in sims]
            assert_same_front(fronts.front(i, j), pareto(np.array(rows, dtype=np.float64)))


# ---------------------------------------------------------------------------- against the bucketed DP
@pytest.mark.parametrize("seed", range(16))
def test_equals_bucketed_cpu_dp_at_one_byte(seed):
    rng = np.random.default_rng(2000 + seed)
    chain = random_chain(rng, int(rng.integers(1, 12)), multi_tape=bool(seed % 4), scale=30)
    fronts = exact.solve_fronts(chain)
    peaks, times = fronts.front()
    top = int(peaks[-1]) + 5
    budgets = np.arange(top + 1)
    got = exact.curve_time_at(peaks, times, budgets)
    # float64 table: same candidates, same float order -> the same bits.
    curve64, _ = cpu.run(Problem.build(chain, 1, top, dtype=np.float64), 0, None)
    np.testing.assert_array_equal(got, curve64)
    # default float32 table: equal to float32 rounding.
    curve32, _ = cpu.run(Problem.build(chain, 1, top), 0, None)
    assert np.array_equal(np.isfinite(got), np.isfinite(curve32))
    finite = np.isfinite(got)
    np.testing.assert_allclose(curve32[finite], got[finite], rtol=1e-5)


@pytest.mark.parametrize("seed", range(8))
def test_recovered_policy_equals_bucketed_recovery_at_one_byte(seed):
    # Same values and the same tie-break (Tape first, then the smallest k): the same tree.
    rng = np.random.default_rng(3000 + seed)
    chain = random_chain(rng, int(rng.integers(2, 10)), multi_tape=bool(seed % 3), scale=12)
    fronts = exact.solve_fronts(chain)
    peaks, _ = fronts.front()
    top = int(peaks[-1]) + 2
    problem = Problem.build(chain, 1, top, dtype=np.float64)
    table = cpu.solve_table(problem)
    for budget in range(int(peaks[0]), top + 1):
        assert fronts.policy(budget) == recover_policy(problem, table_lookup(table), budget), budget


def test_ties_are_broken_like_the_bucketed_recovery():
    # Uniform chains tie everywhere: Tape must win ties, then the smallest k.
    chain = Chain.uniform(6, act_bytes=4, tape_bytes=8, t_fwd=1.0, t_bwd=2.0, input_bytes=4)
    fronts = exact.solve_fronts(chain)
    peaks, _ = fronts.front()
    problem = Problem.build(chain, 1, int(peaks[-1]), dtype=np.float64)
    table = cpu.solve_table(problem)
    for budget in range(int(peaks[0]), int(peaks[-1]) + 1):
        assert fronts.policy(budget) == recover_policy(problem, table_lookup(table), budget), budget


# ---------------------------------------------------------------------------- recovery invariants
@pytest.mark.parametrize("seed", range(10))
def test_recovered_policy_fits_and_takes_the_front_time(seed):
    rng = np.random.default_rng(4000 + seed)
    chain = random_chain(rng, int(rng.integers(1, 16)), multi_tape=bool(seed % 3), scale=1000)
    fronts = exact.solve_fronts(chain)
    peaks, times = fronts.front()
    for at, b in enumerate(peaks):
        for budget in (int(b), int(b) + 1, int(peaks[at + 1]) - 1 if at + 1 < len(peaks) else int(b) + 7):
            sim = simulate(chain, policy_to_schedule(fronts.policy(budget), 0, chain.n))
            assert sim.peak_bytes <= budget
            assert sim.time_ms == pytest.approx(fronts.value(budget), rel=1e-9, abs=0)
        if at == 0:
            with pytest.raises(ValueError, match="infeasible"):
                fronts.policy(int(b) - 1)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_profiles_min_peak_store_all_and_recovery(path):
    chain = Chain.from_profile(path)
    store_peak = simulate(chain, store_all(chain)).peak_bytes
    if chain.n > 100:
        pytest.skip("densenet121_fine: minutes for exact fronts (see bench/exact_speed.py)")
    fronts = exact.solve_fronts(chain, max_bytes=store_peak)
    peaks, times = fronts.front()
    assert int(peaks[0]) == min_feasible_bytes(chain)
    # At exactly the store-all peak the optimum is plain autograd's time (no bucket to round up).
    assert fronts.value(store_peak) == pytest.approx(store_all_time_ms(chain), rel=1e-12)
    for budget in (int(peaks[0]), int(peaks[len(peaks) // 2]), (int(peaks[0]) + store_peak) // 2, store_peak):
        sim = simulate(chain, policy_to_schedule(fronts.policy(budget), 0, chain.n))
        assert sim.peak_bytes <= budget
        assert sim.time_ms == pytest.approx(fronts.value(budget), rel=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_min_of_front_is_min_feasible_bytes(seed):
    rng = np.random.default_rng(5000 + seed)
    chain = random_chain(rng, int(rng.integers(1, 25)), multi_tape=bool(seed % 2), scale=10**9)
    peaks, _ = exact.solve_fronts(chain).front()
    assert int(peaks[0]) == min_feasible_bytes(chain)


@pytest.mark.parametrize("seed", range(6))
def test_store_all_time_at_store_all_peak(seed):
    rng = np.random.default_rng(6000 + seed)
    chain = random_chain(rng, int(rng.integers(1, 20)), scale=10**6)
    peak = simulate(chain, store_all(chain)).peak_bytes
    fronts = exact.solve_fronts(chain)
    assert fronts.value(peak) == pytest.approx(store_all_time_ms(chain), rel=1e-12)
    # and no policy is faster at any budget (store-all is the fastest policy of the model)
    assert fronts.front()[1][-1] == pytest.approx(store_all_time_ms(chain), rel=1e-12)


# ---------------------------------------------------------------------------- thesis reference
def _thesis_cases():
    return json.loads(REFERENCE.read_text())["cases"]


@pytest.mark.parametrize("case", _thesis_cases(), ids=lambda c: c["name"])
def test_thesis_reference_values(case):
    chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"])
    fronts = exact.solve_fronts(chain)
    got = []
    for budget in case["budgets"]:
        m = budget - chain.input_bytes
        value = fronts.value(m) if m >= 0 else np.inf
        # Same 9-decimal rounding as test_dp (float64 sums in another order differ in the last ulp).
        got.append(None if not np.isfinite(value) else round(value, 9))
    assert got == case["optimal_cost"]


# ---------------------------------------------------------------------------- max_bytes
@pytest.mark.parametrize("seed", range(6))
def test_max_bytes_keeps_every_front_below_it_unchanged(seed):
    rng = np.random.default_rng(7000 + seed)
    chain = random_chain(rng, int(rng.integers(3, 14)), multi_tape=bool(seed % 3), scale=500)
    full = exact.solve_fronts(chain)
    peaks, _ = full.front()
    cap = int(peaks[len(peaks) // 2])
    cut = exact.solve_fronts(chain, max_bytes=cap)
    for i in range(chain.n):
        for j in range(i + 1, chain.n + 1):
            p_full, t_full = full.front(i, j)
            p_cut, t_cut = cut.front(i, j)
            keep = p_full <= cap
            assert p_cut.tolist() == p_full[keep].tolist()
            assert np.array_equal(t_cut, t_full[keep])
    assert cut.policy(cap) == full.policy(cap)
    assert cut.stats["points"] <= full.stats["points"]
    with pytest.raises(ValueError, match="max_bytes"):
        cut.policy(cap + 1)


# ---------------------------------------------------------------------------- backend entry, errors
def test_run_returns_front_and_policy():
    rng = np.random.default_rng(11)
    chain = random_chain(rng, 9, scale=1000)
    calls = []
    (peaks, times), policy = exact.run(chain, 10**9, progress=calls.append, full_front=True)
    assert sum(calls) == chain.n * (chain.n + 1) // 2
    full_p, full_t = exact.solve_fronts(chain).front()
    assert np.array_equal(peaks, full_p) and np.array_equal(times, full_t)
    sim = simulate(chain, policy_to_schedule(policy, 0, chain.n))
    assert sim.time_ms == pytest.approx(times[-1], rel=1e-9)
    # Default: fronts cut at the budget; the curve covers budgets up to it.
    budget = int(full_p[len(full_p) // 2])
    (peaks, times), policy = exact.run(chain, budget)
    assert peaks.tolist() == full_p[full_p <= budget].tolist()
    sim = simulate(chain, policy_to_schedule(policy, 0, chain.n))
    assert sim.peak_bytes <= budget and sim.time_ms == pytest.approx(times[-1], rel=1e-9)
    # Below the least peak: an empty front and no policy.
    (peaks, times), policy = exact.run(chain, int(full_p[0]) - 1)
    assert len(peaks) == 0 and policy is None
    np.testing.assert_array_equal(exact.curve_time_at(full_p, full_t, [int(full_p[0]) - 1, int(full_p[0])]),
                                  [np.inf, full_t[0]])


def test_bad_input_is_refused_with_the_fix():
    chain = Chain.uniform(3)
    with pytest.raises(ValueError, match="whole number of bytes"):
        exact.run(chain, 1.5e9)
    with pytest.raises(ValueError, match="negative"):
        exact.run(chain, -1)
    with pytest.raises(ValueError, match="max_bytes"):
        exact.solve_fronts(chain, max_bytes=-5)
    with pytest.raises(TypeError, match="Chain"):
        exact.solve_fronts({"t_fwd": [1.0]})
    fronts = exact.solve_fronts(chain)
    with pytest.raises(ValueError, match="not a sub-chain"):
        fronts.front(2, 1)


def test_memory_limit_raises_memory_error_naming_the_fix():
    chain = Chain.uniform(12, act_bytes=1000, tape_bytes=1500)
    with pytest.raises(MemoryError, match="max_bytes"):
        exact.solve_fronts(chain, memory_limit_bytes=10_000)
    assert exact.solve_fronts(chain, memory_limit_bytes=10**9).stats["points"] > 0


@pytest.mark.parametrize("seed", range(40))
def test_bucketed_solve_stays_in_the_thesis_class(seed):
    """On the thesis's model (multi_tape=False) the bucketed backend agrees with the exact one on which
    budgets are feasible, and is never faster than the exact optimum: the segment policies it also
    tries (store-all, checkpoint_sequential, Chen's greedy) leave that class, and a review found a store-all
    plan of 43 B returned below the class's least budget, 59 B (seed 9157 of its search)."""
    rng = np.random.default_rng(9000 + seed)
    chain = random_chain(rng, int(rng.integers(1, 8)), multi_tape=False)
    least = min_feasible_bytes(chain)
    store = simulate(chain, store_all(chain)).peak_bytes
    for budget in sorted({max(1, least - 5), least - 1, least, (least + store) // 2, store, store + 3}):
        if budget < 1:
            continue
        ex = solve(chain, budget, backend="exact", strict=False)
        cp = solve(chain, budget, backend="cpu", bucket=1, strict=False)
        assert cp.feasible == ex.feasible == (budget >= least), (budget, least, cp.notes[:1])
        if ex.feasible:
            assert cp.predicted_time_ms >= ex.predicted_time_ms - 1e-9 * abs(ex.predicted_time_ms)
