"""CUDA join backend (gpusolve.join.cuda) against the CPU join DP (gpusolve.join.dp).

Tests marked ``gpu`` are skipped only when the machine has no CUDA device (tests/conftest.py asks the
driver); on a machine with one, a missing CuPy or a kernel that fails to compile makes them fail
(``ensure_available()`` is called, never caught). The kernel uses the CPU's float32 operations in
the CPU's order, so the J tables (and the chain tables the chain kernels fill) are compared bit for
bit; the policies come from the same host walk over on-demand reads of the device table, so they
must be identical. Bit for bit holds while no time is subnormal (CuPy compiles with -ftz=true).
The kernel arithmetic itself is checked without a GPU by tests/test_join_kernel_host.py.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from gpusolve import BackendUnavailableError, Chain, FallbackWarning
from gpusolve.join import JoinNet, JoinProblem, Turn, fill_join, join_policy_to_schedule, simulate_join, solve_join
from gpusolve.join import cuda as join_cuda
from gpusolve.join.bytesim import store_all_join_peak_bytes
from test_join_dp import VECTORS, vector_net
from test_join_kernel_host import CASES, OTHER_GEOMETRY, bucketed, random_net
from conftest import cuda_device_reason


@pytest.fixture
def gpu():
    join_cuda.ensure_available()
    return join_cuda


def profile_net() -> JoinNet:
    return JoinNet([Chain.load("resnet50_b128"), Chain.load("resnet50_b128")],
                   Turn(t_fwd=0.5, t_bwd=0.5, tape_bytes=1 << 20, bwd_extra=1 << 20))


# ---------------------------------------------------------------------------- everywhere
def test_backend_names():
    with pytest.raises(ValueError, match="'exact' is not one of 'cpu', 'cuda', 'auto' for a join"):
        solve_join(profile_net().branches, profile_net().turn, "50%", backend="exact")


@pytest.mark.skipif(cuda_device_reason() is None, reason="a CUDA device is present")
def test_without_a_device_cuda_raises_and_auto_falls_back():
    net = profile_net()
    with pytest.raises(BackendUnavailableError, match="the CUDA backend cannot run"):
        solve_join(net.branches, net.turn, "50%", backend="cuda")
    with pytest.warns(FallbackWarning, match="solving on the CPU"):
        plan = solve_join(net.branches, net.turn, "50%", backend="auto")
    assert plan.backend == "cpu" and any("CUDA backend unavailable" in n for n in plan.notes)
    assert plan.to_dict()["backend"] == "cpu"


# ---------------------------------------------------------------------------- on a device
def compare(gpu, jp: JoinProblem, geometry=None, points: int = 5):
    """J and chain tables bit-identical, same curve, identical policies at several budgets (the
    recovery reading a small part of the device table)."""
    ref = fill_join(jp)
    timings: dict = {}
    got = gpu.fill(jp, timings=timings, geometry=geometry)
    assert {"chain_tables", "device_setup", "dp", "curve"} <= set(timings)
    assert got.host_table().view(np.uint32).tobytes() == ref.table.view(np.uint32).tobytes()
    for mine, theirs in zip(got.host_chain_tables(), ref.ctables, strict=True):
        assert (mine is None) == (theirs is None)
        if mine is not None:
            assert mine.view(np.uint32).tobytes() == theirs.view(np.uint32).tobytes()
    assert got.curve.view(np.uint32).tobytes() == ref.curve.view(np.uint32).tobytes()
    feasible = np.flatnonzero(np.isfinite(ref.curve))
    picks = sorted({jp.buckets, *(int(v) for v in np.linspace(feasible[0], jp.buckets, points))}) if len(feasible) \
        else [jp.buckets]
    for m in picks:
        assert got.policy(m) == ref.policy(m), m
    _, chain_elements = gpu.chain_table_offsets(jp)
    # each row at most once, row 0 (the curve) at most twice: small tables are copied whole at the first
    # recovery (HOST_COPY_BYTES), after the curve
    assert got.copied_bytes <= 1.05 * (jp.table_bytes() + 4 * chain_elements) + 4 * (jp.buckets + 1)
    return got


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}" for c in CASES])
def test_random_joins_match_cpu(gpu, case):
    seed, k, empty, frees, multi, buckets = case
    jp = bucketed(random_net(seed, k, empty, frees, multi), buckets)
    compare(gpu, jp)
    if seed % 3 == 0:
        compare(gpu, jp, geometry=OTHER_GEOMETRY)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(VECTORS))
@pytest.mark.parametrize("frees", [True, False])
def test_spec_vectors_match_cpu(gpu, name, frees):
    vector = VECTORS[name]
    top = max(int(m) for m in vector["rows"])
    got = compare(gpu, JoinProblem.build(vector_net(vector, frees), 1, top))
    for m, row in vector["rows"].items():
        value = row[0 if frees else 1]
        assert float(got.curve[int(m)]) == (np.inf if value is None else float(value))


@pytest.mark.gpu
def test_profile_branches_fine_buckets(gpu):
    net = profile_net()
    budget = store_all_join_peak_bytes(net) // 2
    compare(gpu, JoinProblem.build(net, -(-budget // 2048), 2048), points=3)


@pytest.mark.gpu
@pytest.mark.parametrize("budget", ["35%", "50%", "80%"])
def test_solve_join_cuda_plans_fit(gpu, budget):
    net = profile_net()
    plan_c = solve_join(net.branches, net.turn, budget, backend="cpu")
    plan_g = solve_join(net.branches, net.turn, budget, backend="cuda")
    assert plan_g.backend == "cuda" and plan_c.backend == "cpu"
    assert plan_g.bucket_bytes == plan_c.bucket_bytes
    sim = simulate_join(plan_g.net, plan_g.schedule)
    assert (sim.time_ms, sim.peak_bytes) == (plan_g.predicted_time_ms, plan_g.predicted_peak_bytes)
    assert sim.peak_bytes <= plan_g.budget_bytes
    assert plan_g.curve.time_ms.tobytes() == plan_c.curve.time_ms.tobytes()
    assert plan_g.policy == plan_c.policy and plan_g.schedule == plan_c.schedule
    if plan_g.policy is not None:
        assert join_policy_to_schedule(net, plan_g.policy) == plan_g.schedule or plan_g.decided_by != "join DP"


@pytest.mark.gpu
def test_auto_picks_cuda_and_says_so(gpu):
    net = profile_net()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        plan = solve_join(net.branches, net.turn, "50%", backend="auto")
    assert plan.backend == "cuda"
    assert sum("backend auto: the join DP runs on CUDA" in n for n in plan.notes) == 1
