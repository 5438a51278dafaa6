"""The DP against independent truth: exhaustive enumeration, the thesis reference, hand cases."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import PROFILES, random_chain, random_policy
from gpusolve import (Chain, Checkpoint, InfeasibleBudgetError, Tape, policy_to_schedule, simulate, solve,
                      store_all_peak_bytes)
from gpusolve.data import THESIS_CASES
from gpusolve.dp import cpu
from gpusolve.dp.minpeak import min_feasible_bytes
from gpusolve.dp.problem import Problem
from gpusolve.schedule import Swap

REFERENCE = THESIS_CASES


def all_policies(i: int, j: int, multi_tape: bool, swaps: bool = False):
    """Every policy tree of the sub-chain (i, j): both actions at every node. ``swaps``: the offload
    DP's class (tests/test_offload_dp.py), also Swap k in both emission variants at every node with
    i >= 1 (which swaps are legal, a_i a plain checkpoint, is left to the simulator)."""
    if j == i + 1:
        yield Tape(None)
        return
    if multi_tape:
        for right in all_policies(i + 1, j, multi_tape, swaps):
            yield Tape(right)
    for k in range(i + 1, j):
        rights = list(all_policies(k, j, multi_tape, swaps))
        for left in all_policies(i, k, multi_tape, swaps):
            for right in rights:
                yield Checkpoint(k, right, left)
                if swaps and i >= 1:
                    yield Swap(k, right, left, overlap=True)
                    yield Swap(k, right, left, overlap=False)


def enumerate_best(chain: Chain):
    """(time, peak) of every policy, simulated independently of the DP."""
    return [(r.time_ms, r.peak_bytes) for r in
            (simulate(chain, policy_to_schedule(p, 0, chain.n)) for p in all_policies(0, chain.n, chain.multi_tape))]


@pytest.mark.parametrize("seed", range(24))
def test_dp_equals_exhaustive_enumeration_at_every_budget(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8)) if seed % 3 else 7
    chain = random_chain(rng, n, multi_tape=bool(seed % 4))
    results = enumerate_best(chain)
    top = max(peak for _, peak in results) + 2
    curve, policy = cpu.run(Problem.build(chain, 1, top, dtype=np.float64), top, None)
    for m in range(top + 1):
        fitting = [t for t, peak in results if peak <= m]
        if not fitting:
            assert np.isinf(curve[m]), (m, curve[m])
        else:
            assert curve[m] == pytest.approx(min(fitting), rel=1e-12, abs=1e-12), m
    assert min_feasible_bytes(chain) == min(peak for _, peak in results)
    recovered = simulate(chain, policy_to_schedule(policy, 0, n))
    assert recovered.peak_bytes <= top and recovered.time_ms == pytest.approx(curve[top], rel=1e-12)


def test_float32_tables_recover_optimal_policies():
    rng = np.random.default_rng(99)
    for _ in range(10):
        chain = random_chain(rng, 6)
        results = enumerate_best(chain)
        for m in range(min(p for _, p in results), max(p for _, p in results) + 1, 3):
            plan = solve(chain, m, bucket=1, backend="cpu")
            best = min(t for t, p in results if p <= m)
            assert plan.predicted_peak_bytes <= m
            assert plan.predicted_time_ms == pytest.approx(best, rel=1e-5)


def _thesis_cases():
    return json.loads(REFERENCE.read_text())["cases"]


@pytest.mark.parametrize("case", _thesis_cases(), ids=lambda c: c["name"])
def test_thesis_reference_values_exactly(case):
    chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"])
    top = max(case["budgets"])
    curve, _ = cpu.run(Problem.build(chain, 1, top, dtype=np.float64), 0, None)
    got = []
    for budget in case["budgets"]:
        m = budget - chain.input_bytes
        # Float64 sums in another order differ in the last ulp (23.637999999999998 for 23.638); the
        # reference inputs have 3 decimals, so rounding to 9 decimals is exact for them.
        got.append(None if m < 0 or not np.isfinite(curve[m]) else round(float(curve[m]), 9))
    assert got == case["optimal_cost"]


def test_thesis_quadratic_is_the_k_equals_j_minus_1_policy():
    # The thesis's "recompute everything" policy always checkpoints at k = j - 1. Its cost under
    # uniform unit costs is N(N+1)/2 forwards plus N+1 backwards: the reference's 231 for N = 20.
    case = _thesis_cases()[0]
    chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"])
    node = Tape(None)
    n = chain.n
    policy = None
    # Build the quadratic policy: at (0, j) keep a_{j-1}, solve (j-1, j), recurse on (0, j-1).
    def quadratic(j):
        if j == 1:
            return Tape(None)
        return Checkpoint(j - 1, right=Tape(None), left=quadratic(j - 1))
    policy = quadratic(n)
    sim = simulate(chain, policy_to_schedule(policy, 0, n))
    assert sim.time_ms == 231.0
    assert case["optimal_cost"][4] == 231.0 and sim.peak_bytes <= 4 - chain.input_bytes
    del node


def test_hand_computed_two_stage_chain():
    # Stage 1: a_1 = 10 B, tape 30 B; stage 2: a_2 = 1 B (the loss), tape 5 B. Gradients as activations.
    chain = Chain(t_fwd=[1.0, 0.5], t_fwd_nograd=[0.8, 0.4], t_bwd=[2.0, 1.0], act_bytes=[10, 1],
                  grad_bytes=[10, 1], tape_bytes=[30, 5], fwd_nograd_extra=[0, 0], fwd_grad_extra=[0, 0],
                  bwd_extra=[0, 0], input_bytes=4)
    # Store-all: tape 1 (30) + tape 2 (5) + grad a_2 (1); backward 2 adds grad a_1 (10): peak 46.
    # Checkpoint a_1: no-grad fwd 1 holds grad a_2 (1) + a_1 (10) = 11; then tape 2: 1 + 10 + 5 = 16,
    # bwd 2: 16 + 10 = 26; drop a_1 -> grad a_1 (10); tape 1: 40; bwd 1: 10 + 30 + grad a_0 (4) = 44.
    curve, _ = cpu.run(Problem.build(chain, 1, 60, dtype=np.float64), 60, None)
    assert np.isinf(curve[43])
    assert curve[44] == pytest.approx(0.8 + 0.5 + 1.0 + 1.0 + 2.0)
    assert curve[45] == pytest.approx(0.8 + 0.5 + 1.0 + 1.0 + 2.0)
    assert curve[46] == pytest.approx(1.0 + 0.5 + 1.0 + 2.0)
    assert min_feasible_bytes(chain) == 44


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_profile_plans_fit_and_time_is_non_increasing_in_budget(path):
    chain = Chain.from_profile(path)
    store_all = store_all_peak_bytes(chain)
    store_all_time = float(chain.t_fwd.sum() + chain.t_bwd.sum())
    minimum = min_feasible_bytes(chain)
    budget = max(store_all, minimum)
    plan = solve(chain, budget, bucket=-(-budget // (96 if chain.n > 100 else 256)), backend="cpu")
    times = plan.curve.time_ms
    finite = times[np.isfinite(times)]
    assert len(finite) and np.all(np.diff(finite) <= 1e-9), "optimal time must not grow with the budget"
    # Infeasible only below the first feasible bucket.
    first = int(np.flatnonzero(np.isfinite(times))[0])
    assert np.all(np.isfinite(times[first:]))
    assert plan.curve.budget_bytes[first] >= minimum
    # Same bucket at smaller budgets: the plan's time is the curve's value there, and it fits.
    fractions = (0.7, 0.35) if chain.n > 100 else (1.0, 0.7, 0.5, 0.35)
    for fraction in fractions:
        b = max(int(store_all * fraction), int(minimum * 1.1))
        p = solve(chain, b, bucket=plan.bucket_bytes, backend="cpu")
        assert p.feasible and p.predicted_peak_bytes <= b
        table = times[b // plan.bucket_bytes]
        if p.notes:  # an exact-byte candidate beat the rounded table (Note [Exact candidates]), saying so
            assert p.predicted_time_ms < table + 1e-6
            if any("store-all" in note for note in p.notes):
                assert p.predicted_time_ms == pytest.approx(store_all_time)
        else:
            assert p.predicted_time_ms == pytest.approx(table, rel=1e-5)
        assert p.predicted_time_ms >= plan.predicted_time_ms - 1e-6


def test_bucket_rounding_never_exceeds_budget_and_refines():
    rng = np.random.default_rng(5)
    refined = 0
    for _ in range(20):
        chain = random_chain(rng, 9, scale=1000)
        minimum = min_feasible_bytes(chain)
        budget = int(minimum * rng.uniform(1.0, 2.0)) + 1
        previous = None
        for bucket in (512, 64, 8, 1):  # each divides the one before: a refinement of its grid
            if bucket > budget:
                continue
            plan = solve(chain, budget, bucket=bucket, backend="cpu", strict=False)
            assert plan.feasible  # the budget is at least the minimum: never refused
            assert plan.predicted_peak_bytes <= budget
            table = float(plan.curve.time_ms[-1])
            if previous is not None and np.isfinite(previous):
                assert table <= previous + 1e-9, "a finer bucket can only find faster plans"
                refined += table < previous - 1e-9
            previous = table
        exact = solve(chain, budget, bucket=1, backend="cpu")
        assert not any("least-peak" in note for note in exact.notes)  # bucket 1 is exact: the table fits
    assert refined > 0  # the refinement did find faster plans on some chains


def test_budget_below_minimum_names_the_minimum():
    chain = Chain.from_profile(PROFILES[0])
    minimum = min_feasible_bytes(chain)
    with pytest.raises(InfeasibleBudgetError) as info:
        solve(chain, minimum - 1, backend="cpu")
    assert str(minimum) in str(info.value) and info.value.min_bytes == minimum
    plan = solve(chain, minimum - 1, backend="cpu", strict=False)
    assert not plan.feasible


def test_bucket_larger_than_budget_is_refused():
    chain = Chain.uniform(4)
    with pytest.raises(ValueError, match="larger than the budget"):
        solve(chain, "16MiB", bucket="32MiB", backend="cpu")


def test_coarse_bucket_falls_back_to_least_peak_policy():
    chain = Chain.uniform(6, act_bytes=1000, tape_bytes=1500)
    minimum = min_feasible_bytes(chain)
    plan = solve(chain, minimum, bucket=minimum // 2 + 1, backend="cpu")
    assert plan.feasible and plan.predicted_peak_bytes == minimum
    assert any("least-peak" in note and "finer bucket" in note for note in plan.notes)
    assert simulate(chain, plan.schedule).peak_bytes == minimum


def test_exact_minimum_is_solvable_at_default_bucket_on_every_profile():
    for path in PROFILES:
        chain = Chain.from_profile(path)
        minimum = min_feasible_bytes(chain)
        plan = solve(chain, minimum, backend="cpu")
        assert plan.feasible and plan.predicted_peak_bytes <= minimum, path.stem
        with pytest.raises(InfeasibleBudgetError) as info:
            solve(chain, minimum - 1, backend="cpu")
        assert f"{minimum} B" in str(info.value) and f"{minimum - 1} B" in str(info.value)


def test_store_all_at_its_peak_whatever_the_bucket():
    for path in PROFILES:
        chain = Chain.from_profile(path)
        peak = store_all_peak_bytes(chain)
        plan = solve(chain, peak, backend="cpu")
        assert plan.overhead == 0.0 and plan.predicted_peak_bytes == peak, path.stem


def test_timings_cover_the_phases():
    chain = Chain.from_profile(PROFILES[0])
    plan = solve(chain, "6GiB", backend="cpu")
    assert {"setup", "dp", "recover", "schedule"} <= set(plan.timings)
    assert "minimum" not in plan.timings  # feasible budget: the O(N^3) minimum is not computed
    assert sum(plan.timings.values()) <= plan.solve_seconds + 1e-6
    assert plan.min_feasible_bytes == min_feasible_bytes(chain)  # on demand


def test_plan_curve_and_fields():
    chain = Chain.from_profile(PROFILES[0])
    plan = solve(chain, "6GiB", backend="cpu")
    assert plan.backend == "cpu" and plan.bucket_bytes * plan.buckets <= plan.budget_bytes
    table = plan.curve.time_ms[-1]
    if any("past the budget" in note for note in plan.notes):  # a slack-band candidate fits: faster
        assert plan.predicted_time_ms < table
    else:
        assert table == pytest.approx(plan.predicted_time_ms, rel=1e-5)
    assert plan.bytes_per_state == 8  # float32 values + the pre-shifted copy (CUDA: 4)
    d = plan.to_dict()
    for key in ("feasible", "predicted_time_ms", "predicted_peak_bytes", "budget_bytes", "bucket_bytes",
                "backend", "solve_seconds", "curve", "schedule"):
        assert key in d


def test_policy_peak_bytes_equals_the_simulator():
    import random

    from gpusolve.dp.minpeak import policy_peak_bytes

    rng, r = np.random.default_rng(11), random.Random(12)
    for _ in range(200):
        chain = random_chain(rng, int(rng.integers(1, 12)))
        problem, a = Problem.build(chain, 7, 10), chain.padded()
        policy = random_policy(r, 0, chain.n)
        assert policy_peak_bytes(problem, a["act_bytes"], a["tape_bytes"], policy) == \
            simulate(chain, policy_to_schedule(policy, 0, chain.n)).peak_bytes


def test_reserved_bytes_are_a_budget_offset():
    """Bytes held through the whole step: the same plan as the chain without them at a budget that
    much smaller, with a peak that much larger."""
    rng = np.random.default_rng(3)
    for _ in range(10):
        chain = random_chain(rng, 9, scale=1000)
        chain.reserved_bytes = 0
        budget = int(min_feasible_bytes(chain) * rng.uniform(1.0, 1.8))
        reserved = int(rng.integers(1, 500))
        with_reserve = Chain.from_dict(chain.to_dict() | {"reserved_bytes": reserved})
        a = solve(chain, budget, bucket=1, backend="cpu")
        b = solve(with_reserve, budget + reserved, bucket=1, backend="cpu")
        assert b.predicted_time_ms == pytest.approx(a.predicted_time_ms, rel=1e-9)
        assert b.predicted_peak_bytes == a.predicted_peak_bytes + reserved
        assert min_feasible_bytes(with_reserve) == min_feasible_bytes(chain) + reserved


def test_slack_band_candidates_fit_and_never_lose_to_the_table():
    """With our default bucket the plan is never slower than the table's own optimum at the budget,
    always fits in exact bytes, and on these profiles beats it somewhere (bucket rounding)."""
    improved = 0
    for path in PROFILES[:3]:
        chain = Chain.from_profile(path)
        top, low = store_all_peak_bytes(chain), min_feasible_bytes(chain)
        for fraction in (0.2, 0.5, 0.8):
            budget = int(low + fraction * (top - low))
            plan = solve(chain, budget, backend="cpu")
            table = float(plan.curve.time_ms[-1])
            assert plan.predicted_peak_bytes <= budget
            assert simulate(chain, plan.schedule).peak_bytes == plan.predicted_peak_bytes
            assert not np.isfinite(table) or plan.predicted_time_ms <= table + 1e-6
            improved += plan.predicted_time_ms < table - 1e-6
    assert improved > 0


def test_exact_backend_through_solve_and_auto_choice():
    from gpusolve.dp.exact import run as exact_run
    small = Chain.from_profile(next(p for p in PROFILES if "resnet50" in p.stem))
    budget = store_all_peak_bytes(small) // 2
    auto, exact = solve(small, budget), solve(small, budget, backend="exact")
    assert auto.backend == exact.backend == "exact" and "exact DP" in auto.notes[0]
    (peaks, times), _ = exact_run(small, budget)
    assert exact.predicted_time_ms == pytest.approx(float(times[-1]), rel=1e-12)
    assert exact.predicted_peak_bytes <= budget and exact.min_feasible_bytes == min_feasible_bytes(small)
    bucketed = solve(small, budget, backend="cpu")
    assert exact.predicted_time_ms <= bucketed.predicted_time_ms + 1e-9  # the true optimum
    with pytest.raises(ValueError, match="no buckets"):
        solve(small, budget, bucket="1MiB", backend="exact")
    with pytest.raises(InfeasibleBudgetError, match=str(min_feasible_bytes(small))):
        solve(small, min_feasible_bytes(small) - 1, backend="exact")
    big = Chain.from_profile(next(p for p in PROFILES if p.stem == "densenet121_b64"))
    assert solve(big, store_all_peak_bytes(big) // 2, backend="auto").backend in ("cpu", "cuda")  # 67 stages


def test_the_least_peak_policy_is_a_candidate_near_the_tables_least():
    """Note [Exact candidates] (4): one byte above the least budget, at the same bucket, the table's plan was 4.4 %
    slower than the least-peak plan, which fits (review rv20c); only where the table had no plan was it tried."""
    chain = Chain(t_fwd=[0.0, 0.0, 0.0, 0.0], t_fwd_nograd=[1.25, 3.75, 2.0, 3.5], t_bwd=[1.5, 7.25, 2.25, 5.25],
                  act_bytes=[59, 37, 15, 55], grad_bytes=[39, 53, 11, 27], tape_bytes=[104, 94, 74, 108],
                  bwd_tape_bytes=[72, 80, 69, 20], fwd_nograd_extra=[0, 0, 19, 0], fwd_grad_extra=[30, 0, 15, 54],
                  bwd_extra=[15, 0, 0, 7], input_bytes=38, input_grad_bytes=5)
    least = solve(chain, 231, bucket=4, backend="cpu")
    above = solve(chain, 232, bucket=4, backend="cpu")
    assert above.predicted_time_ms == least.predicted_time_ms == 28.25
    assert any("least-peak policy" in note for note in above.notes), above.notes
    assert simulate(chain, above.schedule).peak_bytes <= 232


def test_plans_near_the_least_fill_the_least_peak_tables_once(monkeypatch):
    """The least budget and the least-peak policy come from one O(N^3) fill for all the plans of one table (each
    plan near the least filled it twice: min_feasible_bytes, then min_peak_policy; 2 x 0.29 s on
    densenet121_fine_b32)."""
    from gpusolve.dp import minpeak
    from gpusolve.solve import solve_budgets
    chain = random_chain(np.random.default_rng(5), 12)
    fills = []
    real = minpeak.min_peak_tables
    monkeypatch.setattr(minpeak, "min_peak_tables", lambda c: fills.append(1) or real(c))
    low = real(chain)[0][0, chain.n]
    top, below = solve_budgets(chain, low + 10, [low + 5, low + 1, low], bucket=1, backend="cpu", progress=False)
    assert len(fills) == 1
    assert all(p.feasible and p.known_min_bytes == low for p in [top, *below])
    assert below[-1].predicted_peak_bytes == low


def test_the_join_least_peak_policy_is_a_candidate_beside_the_tables_plan():
    from gpusolve.join import Turn, solve_join
    a = Chain(t_fwd=[7.0, 4.75], t_fwd_nograd=[7.0, 4.75], t_bwd=[6.25, 4.5], act_bytes=[52, 51], grad_bytes=[14, 49],
              tape_bytes=[87, 91], fwd_nograd_extra=[0, 0], fwd_grad_extra=[37, 41], bwd_extra=[0, 0], input_bytes=27,
              input_grad_bytes=50)
    b = Chain(t_fwd=[7.5, 4.5], t_fwd_nograd=[7.5, 4.5], t_bwd=[9.0, 3.25], act_bytes=[51, 30], grad_bytes=[48, 6],
              tape_bytes=[90, 58], fwd_nograd_extra=[46, 0], fwd_grad_extra=[3, 0], bwd_extra=[22, 0], input_bytes=57,
              input_grad_bytes=38)
    least = solve_join([a, b], Turn(t_fwd=1.0, t_bwd=1.0), 248, bucket=26, backend="cpu")
    above = solve_join([a, b], Turn(t_fwd=1.0, t_bwd=1.0), 260, bucket=26, backend="cpu")
    assert above.predicted_time_ms == least.predicted_time_ms == 75.25 and above.decided_by == "least-peak policy"
