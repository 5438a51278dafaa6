"""SegmentEvaluator (gpusolve/dp/segments.py): the fast exact time and peak of segment policies, against the
simulator and against the least-peak rules it unrolls (Note [One set of least-peak recurrences])."""
import numpy as np
import pytest
from conftest import random_chain

from gpusolve.dp.minpeak import NO_PEAK, tape_peak
from gpusolve.dp.problem import Problem
from gpusolve.dp.segments import SegmentEvaluator
from gpusolve.schedule import policy_to_schedule, segments_policy
from gpusolve.simulate import simulate


@pytest.mark.parametrize("seed", range(8))
def test_segment_policies_evaluate_to_their_simulated_time_and_peak(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        chain = random_chain(rng, int(rng.integers(1, 16)))
        evaluator = SegmentEvaluator(chain, Problem.build(chain, 1, 0))
        n = chain.n
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, n), size=int(rng.integers(0, n)), replace=False)) \
            if n > 1 else []
        sim = simulate(chain, policy_to_schedule(segments_policy(cuts, n), 0, n))
        time_ms, peak = evaluator.evaluate(cuts)
        assert peak == sim.peak_bytes, cuts
        assert time_ms == pytest.approx(sim.time_ms, rel=1e-12, abs=1e-12), cuts


@pytest.mark.parametrize("seed", range(4))
def test_tape_peak_columns_are_the_tape_rule_applied_stage_by_stage(seed):
    """T(i, j) in three array operations equals tape_peak applied from l = j - 1 down to i."""
    rng = np.random.default_rng(100 + seed)
    chain = random_chain(rng, 30, scale=1 << 20)
    problem = Problem.build(chain, 1, 0)
    evaluator, tape = SegmentEvaluator(chain, problem), chain.padded()["tape_bytes"]
    for j in range(1, chain.n + 1):
        peak = NO_PEAK
        for i in range(j - 1, -1, -1):
            thr = int(problem.thr_tape_bytes(i, j))
            peak = thr if i == j - 1 else tape_peak(thr, int(tape[i + 1]), peak, max)
            assert evaluator.tape_peak(i, j) == peak, (i, j)
