"""CUDA backend against the CPU reference.

Tests marked ``gpu`` are skipped only when the machine has no CUDA device (tests/conftest.py asks
the driver, not CuPy). On a machine with a device, a missing CuPy or kernels that fail to compile
or load make them fail: ``cuda.ensure_available()`` is called, never caught.

CUDA and CPU must agree on feasibility at every bucket, on optimal times (the kernels use the
CPU's float32 operations in the same order, so the curves are compared bit for bit, and at least
to 1e-5 relative), and the recovered schedules must simulate to the same time. Bit for bit holds
while no time is subnormal (below ~1e-38 ms): CuPy compiles with -ftz=true.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from gpusolve import BackendUnavailableError, Chain, solve
from gpusolve.dp import cpu, cuda
from gpusolve.dp.minpeak import min_feasible_bytes
from gpusolve.dp.problem import Problem
from gpusolve.profiles import __file__ as _profiles_init
from gpusolve.schedule import policy_to_schedule
from gpusolve.simulate import simulate, store_all_peak_bytes

PROFILES = sorted(Path(_profiles_init).parent.glob("*.json"))
OTHER_GEOMETRY = cuda.Geometry(diag_threads=64, diag_mpt=3, ktile=5, band=4, bulk_threads=64, bulk_ktile=3,
                               rec_threads=32)


@pytest.fixture
def gpu():
    """The CUDA backend, compiled and loaded: raises (fails the test) when that does not work."""
    cuda.ensure_available()
    return cuda


# ---------------------------------------------------------------------------- everywhere
def test_unavailable_reason_is_precise():
    """Without CuPy or a device the error names the reason (this runs everywhere)."""
    try:
        cuda.ensure_available()
    except BackendUnavailableError as err:
        text = str(err)
        assert any(word in text for word in ("CuPy", "device", "compile")), text


def test_memory_helpers_count_the_sentinel_row():
    n, buckets = 367, 8192
    rows = n * (n + 1) // 2 + 1
    assert cuda.device_bytes(n, buckets) >= rows * (buckets + 1) * 4
    free = cuda.device_bytes(n, buckets)
    bucket = cuda.finest_fitting_bucket(10**10, n, free)
    assert cuda.device_bytes(n, 10**10 // bucket) <= free


def test_release_without_a_solve_is_harmless():
    cuda.release()
    assert cuda.workspace_bytes() == 0


# ---------------------------------------------------------------------------- on a device
def random_chain(rng, n, multi_tape):
    act = rng.integers(1, 5000, size=n)
    return Chain(t_fwd=rng.random(n) * 3, t_fwd_nograd=rng.random(n) * 3, t_bwd=rng.random(n) * 6,
                 act_bytes=act, grad_bytes=act, tape_bytes=rng.integers(1, 9000, size=n),
                 fwd_nograd_extra=rng.integers(0, 2000, size=n), fwd_grad_extra=rng.integers(0, 2000, size=n),
                 bwd_extra=rng.integers(0, 3000, size=n), input_bytes=int(rng.integers(0, 5000)),
                 multi_tape=multi_tape)


def compare(cuda, problem, band=True, geometry=None):
    m_top = problem.buckets
    curve_c, pol_c = cpu.run(problem, m_top)
    curve_g, pol_g = cuda.run(problem, m_top, band=band, geometry=geometry)
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
def test_random_chains_match_cpu(gpu, seed, multi_tape):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 61))
    chain = random_chain(rng, n, multi_tape)
    total = int(chain.tape_bytes.sum())
    buckets = int(rng.integers(50, 600))
    problem = Problem.build(chain, max(1, total // (buckets // 2)), buckets)
    compare(gpu, problem)
    if seed == 0:
        compare(gpu, problem, band=False)
        compare(gpu, problem, geometry=OTHER_GEOMETRY)


@pytest.mark.gpu
@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
@pytest.mark.parametrize("fuse", [True, False])
def test_profiles_match_cpu(gpu, path, fuse):
    chain = Chain.from_profile(path, fuse_aliasing=fuse)
    buckets = 512 if chain.n > 100 else 2048
    budget = int(chain.tape_bytes.sum() // 3)
    problem = Problem.build(chain, -(-budget // buckets), buckets)
    compare(gpu, problem)


@pytest.mark.gpu
@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_solve_front_end_same_time(gpu, path):
    chain = Chain.from_profile(path)
    # halfway from the least feasible budget to the store-all peak (a third of the summed tapes, as
    # above, is below vgg16_b64's least: solve() raises)
    budget = (min_feasible_bytes(chain) + store_all_peak_bytes(chain)) // 2
    plan_c = solve(chain, budget, bucket=-(-budget // 1024), backend="cpu")
    plan_g = solve(chain, budget, bucket=-(-budget // 1024), backend="cuda")
    assert plan_g.backend == "cuda"
    assert plan_g.predicted_time_ms == pytest.approx(plan_c.predicted_time_ms, rel=1e-5)
    assert simulate(chain, plan_g.schedule).time_ms == pytest.approx(simulate(chain, plan_c.schedule).time_ms,
                                                                     rel=1e-9)


@pytest.mark.gpu
@pytest.mark.device_state
@pytest.mark.parametrize("seed", range(3))
def test_batched_walks_give_the_cpu_policies(gpu, seed):
    """DeviceTable.prefetch: dp_recover with one block per column (each its own slices of the buffers),
    over two launches when the columns exceed RECOVERY_BATCH; every policy the CPU's, and a table that
    walks them one at a time agrees. (device_state: the stand-in's tables are the CPU's, without it.)"""
    rng = np.random.default_rng(100 + seed)
    chain = random_chain(rng, int(rng.integers(20, 80)), True)
    buckets = 700
    problem = Problem.build(chain, max(1, int(chain.tape_bytes.sum()) // (buckets // 2)), buckets)
    host = cpu.fill(problem)
    feasible = [int(m) for m in np.flatnonzero(np.isfinite(host.curve))]
    assert len(feasible) > gpu.RECOVERY_BATCH
    table = gpu.fill(problem)
    table.prefetch(feasible)
    for m in feasible[::3]:
        assert table.policy(m) == host.policy(m), m
    alone = gpu.fill(problem)
    for m in feasible[::41]:
        assert alone.policy(m) == host.policy(m), m


def held_by_others() -> tuple[int, int]:
    """CuPy's pool before a test: the bytes in use (arrays that earlier tests' objects still hold; on
    the H100, 271 987 200 B after 25 gpu tests, before release() collected reference cycles; its
    holder was not identified there) and the bytes it holds in all. release() frees what the solver
    holds, not what they hold."""
    import cupy
    import gc
    gc.collect()
    pool = cupy.get_default_memory_pool()
    return pool.used_bytes(), pool.total_bytes()


def assert_pool_emptied(before: tuple[int, int]) -> None:
    """Nothing of this test's stays in CuPy's pool after release(). A free block stays cached only beside
    a block in use in the same device allocation (``free_all_blocks`` frees whole allocations): on the H200
    (2026-11-28) 1 022 976 B stayed so, the pool's total not above its total before the test."""
    import cupy
    pool = cupy.get_default_memory_pool()
    used_before, total_before = before
    assert pool.used_bytes() <= used_before, (pool.used_bytes(), used_before)  # nothing of this test's stays
    assert pool.total_bytes() <= total_before, (pool.total_bytes(), total_before)  # its blocks went back
    assert pool.free_bytes() == 0 or pool.used_bytes() > 0, pool.free_bytes()  # free blocks only beside used ones


@pytest.mark.gpu
@pytest.mark.device_state
def test_timings_and_workspace_reuse(gpu):
    """Phases are timed; a second solve of the same shape reuses the table and the side arrays;
    a larger one grows the table; release() empties CuPy's pool of what this test allocated."""
    import cupy
    held_before = held_by_others()
    chain = Chain.from_profile(PROFILES[0], fuse_aliasing=False)
    budget = int(chain.tape_bytes.sum() // 3)
    problem = Problem.build(chain, -(-budget // 256), 256)
    timings: dict = {}
    gpu.run(problem, problem.buckets, timings=timings)
    assert {"dp", "recover", "device_setup", "curve"} <= set(timings) and timings["dp"] > 0
    parts = timings["device_check"] + timings["device_upload"] + timings["device_table"]  # device_setup's parts
    assert parts == pytest.approx(timings["device_setup"], rel=1e-6)
    ws = gpu._WORKSPACES[cupy.cuda.Device().id]
    table_ptr, arrays = ws.table.data.ptr, dict(ws.dev)
    held = gpu.workspace_bytes()
    assert held >= (problem.pairs + 1) * (problem.buckets + 1) * 4
    assert gpu.free_device_bytes() >= held  # the workspace counts as available
    compare(gpu, problem)
    assert ws.table.data.ptr == table_ptr
    assert all(ws.dev[name] is arrays[name] for name in arrays)  # identical side arrays: not uploaded again
    bigger = Problem.build(chain, -(-budget // 512), 512)
    compare(gpu, bigger)
    assert ws.table.size >= (bigger.pairs + 1) * (bigger.buckets + 1)
    # this test's own references to the workspace's arrays go first: on the H200 (2026-11-28) they held
    # 33 280 B in the pool past release() (bench/results/gpu_runs/2026-11-28_nvidia_h200_*/pytest_gpu.txt)
    del ws, arrays
    gpu.release()
    assert gpu.workspace_bytes() == 0
    assert_pool_emptied(held_before)


@pytest.mark.gpu
@pytest.mark.device_state
def test_memory_check_and_user_bucket_too_fine(gpu):
    held_before = held_by_others()
    chain = Chain.from_profile(PROFILES[0], fuse_aliasing=False)
    budget = int(chain.tape_bytes.sum() // 3)
    solve(chain, budget, backend="cuda")
    gpu.release()
    assert_pool_emptied(held_before)
    free = gpu.free_device_bytes()
    too_fine = max(1, budget // (4 * free // (chain.n * (chain.n + 1) * 2) + 1))
    with pytest.raises(MemoryError, match="use a bucket of at least"):
        solve(chain, budget, bucket=too_fine, backend="cuda")
    plan = solve(chain, budget, backend="cuda")  # our default bucket: fits or is coarsened with a note
    assert plan.feasible
    gpu.release()


@pytest.mark.gpu
@pytest.mark.device_state
def test_torch_stream_without_deprecation_warning(gpu):
    """Under torch the solve runs on torch's stream through CuPy's non-deprecated API."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    assert "torch" in sys.modules
    chain = Chain.from_profile(PROFILES[0], fuse_aliasing=False)
    budget = int(chain.tape_bytes.sum() // 3)
    problem = Problem.build(chain, -(-budget // 64), 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        curve, _ = gpu.run(problem, problem.buckets)
    assert np.isfinite(curve[-1])
    gpu.release()
