"""CUDA backend against the CPU reference (``gpu`` marker: skipped without CuPy or a device).

CUDA and CPU must agree on feasibility at every bucket, on optimal times (the kernels use the
CPU's float32 operations in the same order, so the curves are compared bit for bit, and at least
to 1e-5 relative), and the recovered schedules must simulate to the same time.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpusolve import BackendUnavailableError, Chain, solve
from gpusolve.dp import cpu
from gpusolve.dp.problem import Problem
from gpusolve.profiles import __file__ as _profiles_init
from gpusolve.schedule import policy_to_schedule
from gpusolve.simulate import simulate

PROFILES = sorted(Path(_profiles_init).parent.glob("*.json"))


def _cuda_or_skip():
    from gpusolve.dp import cuda
    try:
        cuda.ensure_available()
    except BackendUnavailableError as err:
        pytest.skip(f"CUDA backend unavailable: {err}")
    return cuda


def test_unavailable_reason_is_precise():
    """Without CuPy or a device the error names the reason (this runs everywhere)."""
    from gpusolve.dp import cuda
    try:
        cuda.ensure_available()
    except BackendUnavailableError as err:
        text = str(err)
        assert any(word in text for word in ("CuPy", "device", "compile")), text


def random_chain(rng, n, multi_tape):
    act = rng.integers(1, 5000, size=n)
    return Chain(t_fwd=rng.random(n) * 3, t_fwd_nograd=rng.random(n) * 3, t_bwd=rng.random(n) * 6,
                 act_bytes=act, grad_bytes=act, tape_bytes=rng.integers(1, 9000, size=n),
                 fwd_nograd_extra=rng.integers(0, 2000, size=n), fwd_grad_extra=rng.integers(0, 2000, size=n),
                 bwd_extra=rng.integers(0, 3000, size=n), input_bytes=int(rng.integers(0, 5000)),
                 multi_tape=multi_tape)


def compare(cuda, problem, band=True):
    m_top = problem.buckets
    curve_c, pol_c = cpu.run(problem, m_top)
    curve_g, pol_g = cuda.run(problem, m_top, band=band)
    assert curve_g.dtype == np.float32 and curve_g.shape == curve_c.shape
    np.testing.assert_array_equal(np.isfinite(curve_g), np.isfinite(curve_c))  # feasibility at every bucket
    finite = np.isfinite(curve_c)
    np.testing.assert_allclose(curve_g[finite], curve_c[finite], rtol=1e-5)
    assert curve_g.view(np.uint32).tobytes() == curve_c.view(np.uint32).tobytes()  # same operations, same order
    assert (pol_g is None) == (pol_c is None)
    if pol_c is not None:
        assert pol_g == pol_c  # same policy, hence the same schedule and simulated time
        assert policy_to_schedule(pol_g, 0, problem.n) == policy_to_schedule(pol_c, 0, problem.n)


@pytest.mark.gpu
@pytest.mark.parametrize("multi_tape", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_random_chains_match_cpu(seed, multi_tape):
    cuda = _cuda_or_skip()
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 61))
    chain = random_chain(rng, n, multi_tape)
    total = int(chain.tape_bytes.sum())
    buckets = int(rng.integers(50, 600))
    problem = Problem.build(chain, max(1, total // (buckets // 2)), buckets)
    compare(cuda, problem)
    if seed == 0:
        compare(cuda, problem, band=False)


@pytest.mark.gpu
@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
@pytest.mark.parametrize("fuse", [True, False])
def test_profiles_match_cpu(path, fuse):
    cuda = _cuda_or_skip()
    chain = Chain.from_profile(path, fuse_aliasing=fuse)
    buckets = 512 if chain.n > 100 else 2048
    budget = int(chain.tape_bytes.sum() // 3)
    problem = Problem.build(chain, -(-budget // buckets), buckets)
    compare(cuda, problem)


@pytest.mark.gpu
@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_solve_front_end_same_time(path):
    _cuda_or_skip()
    chain = Chain.from_profile(path)
    budget = int(chain.tape_bytes.sum() // 3)
    plan_c = solve(chain, budget, bucket=-(-budget // 1024), backend="cpu")
    plan_g = solve(chain, budget, bucket=-(-budget // 1024), backend="cuda")
    assert plan_g.backend == "cuda"
    assert plan_g.predicted_time_ms == pytest.approx(plan_c.predicted_time_ms, rel=1e-5)
    assert simulate(chain, plan_g.schedule).time_ms == pytest.approx(simulate(chain, plan_c.schedule).time_ms,
                                                                     rel=1e-9)


@pytest.mark.gpu
def test_memory_pool_released_and_user_bucket_too_fine():
    cuda = _cuda_or_skip()
    import cupy
    chain = Chain.from_profile(PROFILES[0], fuse_aliasing=False)
    budget = int(chain.tape_bytes.sum() // 3)
    solve(chain, budget, backend="cuda")
    assert cupy.get_default_memory_pool().total_bytes() == 0
    free = cuda.free_device_bytes()
    too_fine = max(1, budget // (4 * free // (chain.n * (chain.n + 1) * 2) + 1))
    with pytest.raises(MemoryError, match="use a bucket of at least"):
        solve(chain, budget, bucket=too_fine, backend="cuda")
    plan = solve(chain, budget, backend="cuda")  # our default bucket: fits or is coarsened with a note
    assert plan.feasible
