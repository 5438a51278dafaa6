"""[O]'s offloading model and algorithms (gpusolve.offload.paper): hand cases, exhaustive search over
offload subsets, Theorem 2, LB, the reductions of Theorems 1 and 3, bad input.

Exhaustive references: for every subset of x_0..x_L, (a) ``relaxed_makespan`` -- eqs. (1)-(10)
along those fixed decisions, the model Algorithm 1 optimises (not independent of the recurrences: it
checks the DP's search, hash tables and backtracking); (b) ``simulate(fluid=True)`` -- an event
simulation of the same ordered schedules with memory moving continuously, checked by ``validate``
(independent of the recurrences); (c) ``simulate`` -- Problem 1 with (D).
"""
from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction as Fr

import numpy as np
import pytest

from gpusolve.chain import Chain
from gpusolve.errors import InfeasibleBudgetError
from gpusolve.offload.compare import PAPER_ALGORITHMS, paper_chain, paper_least_bytes, paper_plan, paper_results
from gpusolve.offload.link import Link
from gpusolve.offload.paper import (OffloadChain, dynprog, eager_amounts, fractional_optimum, greedy, issue_points,
                                    issued_makespan, lower_bound, m_min, m_peak, relaxed_makespan, simulate,
                                    three_partition_instance, two_partition_instance, validate, vdnn, vdnn_candidates)
from gpusolve.simulate import store_all_peak_bytes


def _random_chain(rng, max_L=3):
    L = rng.randint(0, max_L)
    uF = [Fr(rng.randint(0, 3)) for _ in range(L + 1)]
    uB = [Fr(rng.randint(0, 4)) for _ in range(L + 1)]
    x = [Fr(rng.randint(0, 4)) for _ in range(L + 2)]
    y = [Fr(rng.randint(0, 2)) for _ in range(L + 2)]
    exF = [Fr(rng.randint(0, 2)) for _ in range(L + 1)]
    exB = [Fr(rng.randint(0, 2)) for _ in range(L + 1)]
    probe = OffloadChain(uF, uB, x, y, exF, exB, Fr(10 ** 6), Fr(rng.choice([1, 2])))
    return probe.with_memory(Fr(rng.randint(int(m_min(probe)), int(m_peak(probe)))))


def _subsets(c):
    n = c.L + 1
    return [s for r in range(n + 1) for s in itertools.combinations(range(n), r)]


# ---------------------------------------------------------------------------- hand cases
def _tiny():
    # F_0, F_1 (1 each), B_1, B_0 (2 each); |x| = 2, 3, 1; no y, no workspace; B = 1
    return OffloadChain([1, 1], [2, 2], [2, 3, 1], [0, 0, 0], [0, 0], [0, 0], M=6, B=1)


def test_hand_bounds():
    c = _tiny()
    assert m_peak(c) == 6 and m_min(c) == 5          # m_F1 = 2+3+1, largest footprint x1 + x2 + ... = 3+1 / 2+3
    assert lower_bound(c) == 6                        # Σu = 6; 2 (6 - 6) / 1 = 0
    assert lower_bound(c.with_memory(5)) == 6         # max(6, 2 * 1 / 1)


@pytest.mark.parametrize("offload,want", [((), 6.0), ((0,), 6.0), ((1,), 11.0), ((0, 1), 12.0)])
def test_hand_makespans(offload, want):
    # x_1 (3) offloaded from F_1's start (t = 1) to 4, prefetched 4..7 before B_1: B_1 7..9, B_0 9..11.
    # x_0 (2) too: 0..2 off; x_1 2..5 off (F_1 starts at 1 but x_1 waits for the channel), x_1 back 5..8,
    # x_0 back during B_1 8..10, B_0 10..12.
    c = _tiny()
    for fluid in (False, True):
        r = simulate(c, offload, fluid=fluid)
        assert r.feasible and r.makespan == pytest.approx(want, abs=1e-7)
        assert validate(c, r.timeline, fluid)[0]
    assert relaxed_makespan(c, offload) == want


def test_hand_memory_pressure_forces_offload():
    c = _tiny().with_memory(5)                        # store-all needs 6
    assert not simulate(c, ()).feasible
    # (D): x_0 offloaded 0..2 (F_0 is 0..1); F_1 needs 2 + 3 + 1 > 5 with x_0 held: waits until 2, runs 2..3.
    # B_1 (3..5) holds x_1 + x_2 = 4: no room for x_0 (2) before it ends; prefetch 5..7, B_0 7..9.
    r = simulate(c, (0,))
    assert r.feasible and r.makespan == pytest.approx(9.0)
    # relaxed (memory moves with the data): 1 unit of x_0 is gone at t = 1, F_1 runs 1..2, B_1 2..4 may
    # end with 1 unit of x_0 reserved: prefetch 3..5, B_0 5..7.
    assert simulate(c, (0,), fluid=True).makespan == pytest.approx(7.0)
    assert greedy(c) == [0]
    d = dynprog(c, None)
    assert d.decisions == [0] and d.value == 7


def test_dynprog_hand_states():
    # Algorithm 1 by hand on the previous case: (M_F, Δ_F, Δ_B) = (2, 0, 0) -> offload x_0: ε_0 = 0,
    # Δ_F1 = 0 + 2 - 1 = 1, M_F1 = 2 + 3 - min(2, 1) = 4, Δ_B1 = 2 + max(0, 0 - 2) = 2; op 1: ε_1^F = (4+1-5)/1 = 0,
    # op 1 backward: M_B1 = y_1 + Δ_B1 + M_F1 - Δ_F1 = 0 + 2 + 4 - 1 = 5, ε_1^B = (5 + 0 + 1 + 0 - 5)/1 = 1;
    # value = Σu (6) + idle 1 (= the fluid simulation's 7).
    c = _tiny().with_memory(5)
    assert relaxed_makespan(c, [0]) == 7
    assert relaxed_makespan(c, []) == math.inf


# ---------------------------------------------------------------------------- exhaustive
def test_dynprog_exact_equals_exhaustive_relaxation():
    rng = random.Random(7)
    agree_fluid = total = 0
    for _ in range(150):
        c = _random_chain(rng)
        d = dynprog(c, None)
        values = {s: relaxed_makespan(c, s) for s in _subsets(c)}
        assert d.value == min(values.values())
        assert relaxed_makespan(c, d.decisions) == d.value      # backtracking returns an optimal path
        fluid_best = min(simulate(c, s, fluid=True).makespan for s in _subsets(c))
        integral_best = min(simulate(c, s).makespan for s in _subsets(c))
        assert fluid_best <= integral_best + 1e-7              # the relaxation is easier
        total += 1
        agree_fluid += abs(fluid_best - d.value) < 1e-6
    # eqs. (9)/(10) are conservative (module Note): the DP's optimum equals the simulated relaxation's
    # optimum on most instances, never on fewer than 90 % here.
    assert agree_fluid >= 0.9 * total


def test_what_may_move_restricts_all_three():
    """Note [What may move]: with some x_i fixed, exact DYNPROG is the best of the subsets that leave them
    (exhaustive), S slots never pick one, and GREEDY and VDNN never do; all movable is the paper's."""
    rng = random.Random(11)
    for _ in range(120):
        c = _random_chain(rng)
        movable = [rng.random() < 0.6 for _ in range(c.L + 1)]
        allowed = [s for s in _subsets(c) if all(movable[i] for i in s)]
        d = dynprog(c, None, movable=movable)
        assert d.value == min(relaxed_makespan(c, s) for s in allowed)
        assert all(movable[i] for i in d.decisions or [])
        slotted = dynprog(c, 64, movable=movable)
        assert all(movable[i] for i in slotted.decisions or [])
        assert all(movable[i] for i in greedy(c, movable))
        assert all(movable[i] for cand in vdnn_candidates(c, movable=movable) for i in cand)
        assert dynprog(c, None, movable=[True] * (c.L + 1)).value == dynprog(c, None).value
        assert greedy(c, [True] * (c.L + 1)) == greedy(c)
    with pytest.raises(ValueError, match=r"movable has 1 values, expected at least 2"):
        greedy(_tiny().with_memory(5), [True])


def test_slots_equal_exact_on_unit_slots():
    # with whole sizes, B = 1 and whole times every quantity is whole: S = M_GPU slots of 1 is exact
    rng = random.Random(3)
    for _ in range(60):
        c = _random_chain(rng)
        if c.B != 1 or c.M == 0:
            continue
        a, b = dynprog(c, None), dynprog(c, int(c.M))
        assert a.value == pytest.approx(b.value)


def test_slot_rounding_is_pessimistic():
    rng = random.Random(5)
    for _ in range(60):
        c = _random_chain(rng)
        if c.M == 0:
            continue
        exact = dynprog(c, None).value
        coarse = dynprog(c, max(1, int(c.M) // 2)).value
        assert coarse >= exact - 1e-9


def test_relaxations_and_lower_bound_order():
    rng = random.Random(11)
    for _ in range(150):
        c = _random_chain(rng)
        lb = lower_bound(c)
        frac = fractional_optimum(c)
        assert frac.feasible
        assert lb <= frac.makespan + 1e-7
        # Theorem 2: no integral or partial decision does better in the fractional model
        for s in _subsets(c):
            f = simulate(c, s, fluid=True).makespan
            assert frac.makespan <= f + 1e-7
            assert lb <= simulate(c, s).makespan + 1e-7
        # Lemma 2: offloading more (eagerly) is never better
        q0 = float(m_peak(c) - c.M)
        for extra in (0.5, 1.0, 3.0):
            more = simulate(c, eager_amounts(c, q0 + extra), fluid=True)
            assert frac.makespan <= more.makespan + 1e-7
        g = simulate(c, greedy(c))
        assert g.feasible and lb <= g.makespan + 1e-7


def test_theorem2_against_random_partial_offloads():
    rng = random.Random(13)
    for _ in range(60):
        c = _random_chain(rng)
        frac = fractional_optimum(c).makespan
        for _ in range(20):
            amounts = [rng.random() * float(v) for v in c.x[:-1]]
            r = simulate(c, amounts, fluid=True)
            assert frac <= r.makespan + 1e-7


def test_vdnn_candidates_and_choice():
    c = OffloadChain([4, 1, 2], [1, 1, 1], [2, 2, 1, 1], [0] * 4, [0] * 3, [0] * 3, M=6, B=1)
    # ratios u_F / |x|: 2, 0.5, 2 -> thresholds 2 ({0, 2} and every other: {0}), 0.5 ({0, 1, 2}, {0, 2})
    assert vdnn_candidates(c) == [[0, 2], [0], [0, 1, 2], [0, 2]]
    best, d = vdnn(c)
    assert best == min(simulate(c, s).makespan for s in vdnn_candidates(c))


# ---------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("u,V,yes", [([2, 2, 2, 1, 2, 3], 6, True), ([2, 2, 2, 2, 2, 2], 6, True),
                                     ([1, 1, 4, 2, 2, 2], 6, True), ([3, 3, 3, 1, 1, 1], 6, False)])
def test_theorem1_instance_under_the_stated_memory_rule(u, V, yes):
    """Finding (report): the printed instance does not separate yes from no under §3.1's rule (an op
    reserves its output at its start). F_{3m} must reserve x_{3m+1} = V while memory holds mV = M_GPU,
    so one unit of idle precedes it; B_{3m} holds x_{3m+1} = V, so only (m-1)V can be prefetched during it.
    Best ordered schedule over every transfer order: 2m + 2 on yes *and* no instances (m = 2)."""
    c, T = three_partition_instance(u, V)
    assert c.L == 5 * (len(u) // 3) and float(m_peak(c)) >= float(c.M)
    idx = list(range(len(u)))
    best = math.inf
    for perm in itertools.permutations(idx):   # every offload order = every relabelling in index order
        cc, _ = three_partition_instance([u[p] for p in perm], V)
        best = min(best, simulate(cc, idx).makespan)
    assert best == pytest.approx(T + 2)


@pytest.mark.parametrize("u,yes", [([1, 2, 3], True), ([1, 1, 4], False), ([2, 3, 5], True), ([1, 1, 1, 5], False)])
def test_theorem3_instance(u, yes):
    c, T = two_partition_instance(u)
    V = sum(u) // 2
    assert m_peak(c) == 3 * V
    d = dynprog(c, None)
    rel = min(relaxed_makespan(c, s) for s in _subsets(c))
    assert d.value == rel
    if yes:
        assert d.value == T
    else:
        assert d.value > T


# ---------------------------------------------------------------------------- mapping and bad input
def test_from_chain_mapping():
    ch = Chain.load("resnet50_b128")
    c = OffloadChain.from_chain(ch)
    assert c.L == ch.n - 1 and c.x[0] == ch.input_bytes
    assert np.array_equal(c.x[1:], ch.tape_bytes) and np.array_equal(c.y[1:], ch.grad_bytes)
    assert np.array_equal(c.exF, ch.fwd_grad_extra) and np.array_equal(c.exB, ch.bwd_extra)
    assert c.M == m_peak(c) and lower_bound(c) == pytest.approx(ch.t_fwd.sum() + ch.t_bwd.sum())
    assert simulate(c, ()).makespan == pytest.approx(lower_bound(c))


@pytest.mark.parametrize("field,value,match", [("x", [1, -1, 1], r"x\[1\] = -1;"), ("uF", [float("nan"), 1], r"uF\[0\] = nan"),
                                               ("y", [0, 0, float("inf")], r"y\[2\] = inf")])
def test_bad_values(field, value, match):
    kw = dict(uF=[1, 1], uB=[1, 1], x=[1, 1, 1], y=[0, 0, 0], exF=[0, 0], exB=[0, 0], M=10, B=1)
    kw[field] = value
    with pytest.raises(ValueError, match=match):
        OffloadChain(**kw)


def test_bad_memory_and_bandwidth():
    with pytest.raises(ValueError, match=r"M_GPU = 4 is below the minimum memory to run the chain, 5"):
        _tiny().with_memory(4)
    with pytest.raises(ValueError, match=r"B = 0"):
        OffloadChain([1], [1], [1, 1], [0, 0], [0], [0], M=5, B=0)
    with pytest.raises(ValueError, match=r"M = nan"):
        OffloadChain([1], [1], [1, 1], [0, 0], [0], [0], M=float("nan"), B=1)
    with pytest.raises(ValueError, match=r"offload index 5"):
        simulate(_tiny(), [5])


# ---------------------------------------------------------------------------- issuing a timeline (an executor's view)
@pytest.mark.parametrize("offload,want", [
    # x_1 out 1..4 (released before the first op starting after 4: B_1 at 7), back 4..7 (between F_1 and
    # B_1: the backward waits for it, so it is issued before B_1), let go at the end (B_{-1})
    ((1,), [[], [("offload", 1)], [("release", 1), ("prefetch", 1)], [], [("drop", 1)]]),
    # x_0 out 0..2, x_1 2..5 (queued behind it), both released before B_1 (8); back: x_1 5..8 then x_0 8..10,
    # during B_1: issued before it, in the channel's order
    ((0, 1), [[("offload", 0)], [("offload", 1)],
              [("release", 0), ("release", 1), ("prefetch", 1), ("prefetch", 0)], [], [("drop", 0), ("drop", 1)]]),
    ((), [[], [], [], [], []]),
])
def test_issue_points_hand(offload, want):
    c = _tiny()
    assert issue_points(c, simulate(c, offload).timeline) == want


@pytest.mark.parametrize("offload,want", [((1,), 11.0), ((0, 1), 12.0), ((), 6.0)])
def test_issued_makespan_hand(offload, want):
    # test_issue_points_hand's programs run as issued: the release of x_1 waits for its copy out (to 4), the
    # copies back follow it on the channel, B_1 waits for x_1 (7, resp. 8): the timelines' makespans
    c = _tiny()
    assert issued_makespan(c, issue_points(c, simulate(c, offload).timeline)) == pytest.approx(want, abs=1e-9)


def test_issued_makespan_never_beats_the_timeline():
    """Issuing before ops can only delay a no-wait schedule ([O] Prop. 1): on random chains the issued
    program's time is at least the timeline's makespan (and the lower bound), equal on most."""
    rng = random.Random(3)
    equal = total = 0
    for _ in range(200):
        c = _random_chain(rng)
        for decisions in _subsets(c):
            r = simulate(c, decisions)
            if r.feasible:
                v = issued_makespan(c, issue_points(c, r.timeline))
                assert v >= r.makespan - 1e-9 and v >= float(lower_bound(c)) - 1e-9
                equal += abs(v - r.makespan) < 1e-9
                total += 1
    assert total > 500 and equal > total / 3


def _check_points(c, points, decisions):
    """Every moved x_k: offloaded before F_k, released after F_k, prefetched after its release and by B_k,
    dropped before B_{k-2}; each once; transfers issued in the timeline's channel order."""
    L = c.L
    r = simulate(c, decisions)
    assert r.feasible and len(points) == 2 * (L + 1) + 1
    where = {}
    for q, actions in enumerate(points):
        for kind, k in actions:
            assert (kind, k) not in where
            where[kind, k] = q
    moved = [k for k in decisions if c.x[k] > 0]
    assert sorted(k for kind, k in where if kind == "offload") == sorted(moved)
    b_index = lambda j: 2 * (L + 1) if j < 0 else L + 1 + (L - j)  # noqa: E731
    for k in moved:
        assert where["offload", k] == k < where["release", k] <= where["prefetch", k] <= b_index(k)
        assert where["drop", k] == b_index(k - 2)
    issued = [(kind, k) for actions in points for kind, k in actions if kind in ("offload", "prefetch")]
    channel = [("offload" if kind == "off" else "prefetch", k)
               for kind, k, _a, _s, _e in sorted(r.timeline.transfers, key=lambda t: t[3])]
    assert issued == channel


def test_issue_points_random_chains():
    rng = random.Random(7)
    checked = 0
    for _ in range(300):
        c = _random_chain(rng)
        for decisions in _subsets(c):
            r = simulate(c, decisions)
            if r.feasible:
                _check_points(c, issue_points(c, r.timeline), list(decisions))
                checked += 1
    assert checked > 500


@pytest.mark.parametrize("name", ["resnet50_b128", "densenet121_b64"])
def test_paper_plan_on_profiles(name):
    ch = Chain.load(name)
    top = store_all_peak_bytes(ch)
    link = Link.parse("50GB/s")
    for fraction in (0.5, 0.35):
        budget = int(fraction * top)
        plan = paper_plan(ch, budget, link)
        assert plan.method in PAPER_ALGORITHMS and plan.decisions and 0 not in plan.decisions
        assert plan.predicted_peak_bytes <= budget
        assert plan.predicted_time_ms == min(v for v in plan.considered.values() if isinstance(v, float))
        c = paper_chain(ch, budget, link, input_on_device=True)
        assert c.x[0] == 0 and c.M == budget - ch.reserved_bytes
        assert simulate(c, plan.decisions).makespan == plan.predicted_time_ms
        assert plan.issued_time_ms == issued_makespan(c, plan.points) >= plan.predicted_time_ms - 1e-9
        _check_points(c, plan.points, plan.decisions)
        assert plan.offloaded_bytes == sum(int(ch.tape_bytes[k - 1]) for k in plan.decisions)
        greedy_plan = paper_plan(ch, budget, link, method="greedy")
        assert greedy_plan.method == "GREEDY" and greedy_plan.predicted_time_ms >= plan.predicted_time_ms


def test_paper_plan_errors():
    ch = Chain.load("resnet50_b128")
    link = Link.parse("50GB/s")
    with pytest.raises(ValueError, match=r"method 'fast' is not one of the paper's algorithms; use one of GREEDY"):
        paper_plan(ch, store_all_peak_bytes(ch), link, method="fast")
    with pytest.raises(InfeasibleBudgetError, match=r"budget 1000 B is below the least the paper's model runs this "
                                                    r"chain in, \d+ B .*give at least that") as raised:
        paper_plan(ch, 1000, link)
    assert raised.value.min_bytes == paper_least_bytes(ch, link)
    with pytest.raises(ValueError, match="finite, nonzero bandwidth"):
        paper_plan(ch, store_all_peak_bytes(ch), Link.parse("inf"))
    # the paper's least can exceed the store-all peak (its B_i holds x_{i+1} whole; this chain's backward
    # releases the tape first): 400 B here, the peak 300 B, and the message names 400
    small = Chain(t_fwd=[1, 1], t_fwd_nograd=[1, 1], t_bwd=[2, 2], act_bytes=[100, 100], grad_bytes=[100, 100],
                  tape_bytes=[100, 100], bwd_tape_bytes=[0, 0], fwd_nograd_extra=[0, 0], fwd_grad_extra=[0, 0],
                  bwd_extra=[0, 0], input_bytes=100)
    assert store_all_peak_bytes(small) == 300
    with pytest.raises(InfeasibleBudgetError, match=r"budget 300 B is below the least the paper's model runs this "
                                                    r"chain in, 400 B"):
        paper_plan(small, 300, link)
    # the same least as the rows of `compare` count it (the input in the budget: 400 - 100), and a plan there
    assert paper_least_bytes(small, link) == 400 and paper_least_bytes(small, link, input_on_device=False) == 300
    assert paper_plan(small, 400, link).predicted_peak_bytes == 400
    assert paper_results(small, 250, link)["GREEDY [O]"] == "below what [O]'s model needs to run (300 B)"
