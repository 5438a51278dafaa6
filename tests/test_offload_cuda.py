"""CUDA offload backend (gpusolve.offload.cuda) against the CPU offload DP (gpusolve.offload.dp).

Tests marked ``gpu`` are skipped only when the machine has no CUDA device (tests/conftest.py asks the
driver); on a machine with one, a missing CuPy or a kernel that fails to compile makes them fail
(``ensure_available()`` is called, never caught). The kernel uses the CPU's float32 operations in the
CPU's order, so both planes are compared bit for bit; the policies come from the same host walk and
tie-break (gpusolve.offload.dp.recover) over element reads of the device planes, so they must be
identical. Bit for bit holds while no time is subnormal (CuPy compiles with -ftz=true). The kernel
arithmetic itself is checked without a GPU by tests/test_offload_kernel_host.py.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from gpusolve import BackendUnavailableError, Chain, FallbackWarning
from gpusolve.dp import cpu
from gpusolve.dp.problem import Problem
from gpusolve.offload import cuda as offload_cuda
from gpusolve.offload.dp import fill
from gpusolve.offload.link import Link
from gpusolve.offload.solver import solve_offload
from gpusolve.schedule import policy_to_schedule
from gpusolve.simulate import simulate, store_all_peak_bytes
from conftest import cuda_device_reason
from _gpu_standin import offload_fill
from _kernel_host import fake_cupy
from test_offload_kernel_host import CASES, OTHER_GEOMETRY, random_link, random_problem


@pytest.fixture
def gpu():
    offload_cuda.ensure_available()
    return offload_cuda


FAST = Link.parse("200GB/s", latency_ms=0.01)  # fast enough that the resnet50_b128 plans swap


# ---------------------------------------------------------------------------- everywhere
def test_backend_names():
    with pytest.raises(ValueError, match="'exact' is not one of 'cpu', 'cuda', 'auto' for the offload DP"):
        solve_offload(Chain.load("resnet50_b128"), "50%", FAST, backend="exact")


@pytest.mark.skipif(cuda_device_reason() is None, reason="a CUDA device is present")
def test_without_a_device_cuda_raises_and_auto_falls_back():
    chain = Chain.load("resnet50_b128")
    with pytest.raises(BackendUnavailableError, match="the CUDA backend cannot run"):
        solve_offload(chain, "50%", FAST, backend="cuda")
    with pytest.warns(FallbackWarning, match="solving on the CPU"):
        plan = solve_offload(chain, "50%", FAST, backend="auto")
    assert plan.backend == "cpu" and any("CUDA backend unavailable" in n for n in plan.notes)
    assert plan.to_dict()["backend"] == "cpu"
    assert plan.policy == solve_offload(chain, "50%", FAST, backend="cpu").policy


def test_cuda_wiring_on_a_stand_in_device(monkeypatch):
    """solve_offload(backend="cuda") through the one selection rule (gpusolve.solve._pick_backend, here
    told that CUDA can run), gpusolve.offload.cuda.ensure_available and its fill, the device stood in
    for by the CPU fill's planes in host memory read through DevicePlane: the plan is the CPU's, named
    "cuda", with the device's 8 bytes per state."""
    import sys

    chain_solve = sys.modules["gpusolve.solve"]  # the module (gpusolve.solve is the function)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    calls = []
    # the chain DP's fill stands in for its kernels too (the recompute-only reference of Note [Never
    # slower than recompute only] goes through the same rule)
    monkeypatch.setattr(chain_solve, "_pick_backend", lambda backend, notes: calls.append(backend) or
                        ("cpu" if backend == "cpu" else "cuda", cpu.fill))
    monkeypatch.setattr(offload_cuda, "ensure_available", lambda geometry=None: None)
    monkeypatch.setattr(offload_cuda, "fill", offload_fill)
    chain = Chain.load("resnet50_b128")
    for budget in ("35%", "60%"):
        plan_g = solve_offload(chain, budget, FAST, backend="cuda")
        plan_c = solve_offload(chain, budget, FAST, backend="cpu")
        assert plan_g.backend == "cuda" and plan_c.backend == "cpu" and plan_g.bytes_per_state == 8
        assert plan_g.policy == plan_c.policy and plan_g.schedule == plan_c.schedule and plan_g.swaps > 0
        assert plan_g.curve.time_ms.tobytes() == plan_c.curve.time_ms.tobytes()
        assert plan_g.predicted_peak_bytes <= plan_g.budget_bytes
    plan_a = solve_offload(chain, "50%", FAST, backend="auto")
    assert plan_a.backend == "cuda" and any("backend auto: the offload DP runs on CUDA" in n for n in plan_a.notes)
    # every backend name goes through the one rule, the reference's after the offload DP's; "auto" on
    # this 21-stage chain takes the exact DP for the reference, as gpusolve.solve would
    assert calls == ["cuda", "cuda", "cpu", "cpu"] * 2 + ["auto"]
    assert plan_a.recompute_only.backend == "exact"


# ---------------------------------------------------------------------------- on a device
def compare(gpu, problem: Problem, chain: Chain, link: Link, geometry=None, points: int = 6):
    """Both planes bit-identical, same curve, identical policies at several budgets (recovery reading a
    small part of the device planes)."""
    ref = fill(problem, chain, link)
    timings: dict = {}
    got = gpu.fill(problem, chain, link, timings=timings, geometry=geometry)
    assert {"device_setup", "dp", "curve"} <= set(timings)
    host0, host1 = got.host_planes()
    assert host0.view(np.uint32).tobytes() == ref.planes[0].view(np.uint32).tobytes()
    assert host1.view(np.uint32).tobytes() == ref.planes[1].view(np.uint32).tobytes()
    assert got.curve.view(np.uint32).tobytes() == ref.curve.view(np.uint32).tobytes()
    feasible = np.flatnonzero(np.isfinite(ref.curve))
    picks = sorted({problem.buckets, *(int(v) for v in np.linspace(feasible[0], problem.buckets, points))}) \
        if len(feasible) else [problem.buckets]
    for m in picks:
        assert got.policy(m) == ref.policy(m), m
    # Element reads only: at most 2N - 1 states per policy, a handful of O(N) gathers each.
    assert got.copied_bytes <= len(picks) * 4 * 6 * (2 * problem.n) * problem.n
    return got, ref


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}-{c[2]}" for c in CASES])
def test_random_chains_match_cpu(gpu, case):
    seed, multi, kind = case
    problem, chain = random_problem(seed, multi)
    link = random_link(np.random.default_rng(seed), kind)
    compare(gpu, problem, chain, link)
    if seed % 3 == 0:
        compare(gpu, problem, chain, link, geometry=OTHER_GEOMETRY)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["useless", "d2h_only"])
def test_useless_link_gives_the_chain_table(gpu, kind):
    problem, chain = random_problem(4, True)
    got, _ = compare(gpu, problem, chain, random_link(np.random.default_rng(4), kind))
    chain_table = cpu.fill(problem).table
    host0, host1 = got.host_planes()
    assert np.array_equal(host0, chain_table) and np.array_equal(host1, chain_table)


@pytest.mark.gpu
@pytest.mark.parametrize("buckets", [96, 2048])
def test_profile_matches_cpu(gpu, buckets):
    chain = Chain.load("resnet50_b128")
    budget = store_all_peak_bytes(chain) // 2
    problem = Problem.build(chain, budget // buckets, buckets)
    got, ref = compare(gpu, problem, chain, FAST, points=3)
    assert np.any(ref.planes[1] < ref.planes[0])


@pytest.mark.gpu
@pytest.mark.parametrize("budget", ["35%", "50%", "80%"])
def test_solve_offload_cuda_plans_fit(gpu, budget):
    chain = Chain.load("resnet50_b128")
    plan_c = solve_offload(chain, budget, FAST, backend="cpu")
    plan_g = solve_offload(chain, budget, FAST, backend="cuda")
    assert plan_g.backend == "cuda" and plan_c.backend == "cpu"
    assert plan_g.bucket_bytes == plan_c.bucket_bytes and plan_g.bytes_per_state == 8
    assert plan_g.curve.time_ms.tobytes() == plan_c.curve.time_ms.tobytes()
    assert plan_g.policy == plan_c.policy and plan_g.schedule == plan_c.schedule
    assert plan_g.dp_time_ms == plan_c.dp_time_ms
    sim = simulate(chain, policy_to_schedule(plan_g.policy, 0, chain.n), link=FAST)
    assert sim.peak_bytes <= plan_g.budget_bytes
    assert (sim.time_ms, sim.peak_bytes) == (plan_g.predicted_time_ms, plan_g.predicted_peak_bytes)


@pytest.mark.gpu
def test_auto_picks_cuda_and_says_so(gpu):
    chain = Chain.load("resnet50_b128")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        plan = solve_offload(chain, "50%", FAST, backend="auto")
    assert plan.backend == "cuda"
    assert sum("backend auto: the offload DP runs on CUDA" in n for n in plan.notes) == 1


@pytest.mark.gpu
@pytest.mark.device_state
def test_too_large_for_the_device_names_a_bucket(gpu):
    chain = Chain.load("resnet50_b128")
    budget = store_all_peak_bytes(chain)
    free = int(0.9 * offload_cuda.chain_cuda.free_device_bytes())
    buckets = 2 * free // (2 * 4 * chain.n * (chain.n + 1) // 2)
    problem = Problem.build(chain, max(1, budget // buckets), buckets)
    with pytest.raises(MemoryError, match="use a bucket of at least"):
        offload_cuda.fill(problem, chain, FAST)
