"""The chain backend's batched policy recovery without a GPU: every column the slack band's search may
try is named beforehand (gpusolve.solve.slack_band_columns), and DeviceTable walks them all in one
dp_recover launch (gpusolve/dp/cuda.py). The launch is answered by a stand-in that follows the
kernel's calling convention (block b reads m_tops[b], writes its quads at out + 4 b max_nodes and its
count at result[b]) with the CPU's walk: what is checked is the host side (buffers, offsets, copy
back, errors), against the CPU's own policies. The kernel's per-block offsets are compiled in CI
(bench/nvrtc_check.py) and run on a GPU by tests/test_cuda.py."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import random_chain
from gpusolve.dp import cpu, cuda
from gpusolve.dp.problem import Problem
from gpusolve.dp.recover import build_policy
from gpusolve.schedule import Tape
from gpusolve.solve import SLACK_TRIES, slack_band_columns, slack_band_fit
from _kernel_host import HostArray, fake_cupy


@pytest.mark.parametrize("seed", range(30))
def test_the_search_tries_only_columns_it_named(seed):
    rng = np.random.default_rng(seed)
    width = int(rng.integers(1, 400))
    curve = np.sort(rng.random(width))[::-1].copy()  # nonincreasing, with plateaus
    curve[rng.random(width) < 0.3] = np.inf
    curve = np.minimum.accumulate(np.where(np.isfinite(curve), curve, np.inf))
    curve[:int(rng.integers(0, width))] = np.inf
    buckets = int(rng.integers(0, width))
    better = float(curve[buckets]) if np.isfinite(curve[buckets]) else np.inf
    named = set(slack_band_columns(curve, buckets, width - 1, better))
    assert len(named) <= 2 ** SLACK_TRIES - 1
    limit = rng.random()
    tried = []

    def fits(m):  # fits below a random limit of the band (what the search expects), sometimes anywhere
        tried.append(m)
        ok = m < buckets + limit * (width - buckets) or rng.random() < 0.2
        return ok, m
    slack_band_fit(curve, buckets, width - 1, better, fits)
    assert set(tried) <= named, sorted(set(tried) - named)


def walk_quads(problem, policy, m):
    """(i, j, m, k) of a policy's states in the device walk's order (left child next, right later): the
    inverse of recover.policy_from_choices (test_walk_quads_invert_the_tree_build)."""
    order, stack = [], [(policy, 0, problem.n, int(m))]
    while stack:
        node, i, j, mm = stack.pop()
        if isinstance(node, Tape):
            order.append((i, j, mm, 0))
            if node.right is not None:
                stack.append((node.right, i + 1, j, mm - int(problem.tape_b[i + 1])))
        else:
            order.append((i, j, mm, node.k))
            stack += [(node.right, node.k, j, mm - int(problem.act_b[node.k])), (node.left, i, node.k, mm)]
    return order


class StandInModule:
    """get_function("dp_recover"): the kernel's calling convention, each block's walk from the CPU table."""

    def __init__(self, problem, host_table):
        self.problem, self.host, self.launches = problem, host_table, []

    def get_function(self, name):
        assert name == "dp_recover"

        def launch(grid, block, args):
            m_tops, out, max_nodes, _stack, _max_stack, result = args[-6:]
            self.launches.append(grid[0])
            for b in range(grid[0]):
                m = int(m_tops[b])
                quads = walk_quads(self.problem, self.host.policy(m), m) if m >= 0 else None
                if quads is None:
                    result[b] = -1
                    continue
                base = 4 * int(max_nodes) * b
                out[base:base + 4 * len(quads)] = np.asarray(quads, dtype=np.int32).reshape(-1)
                result[b] = len(quads)
        return launch


@pytest.fixture
def device_table(monkeypatch):
    fake = fake_cupy()
    fake.empty = lambda n, dtype: np.zeros(n, dtype=dtype).view(HostArray)
    fake.int32 = np.int32
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def make(seed, buckets=60):
        rng = np.random.default_rng(seed)
        chain = random_chain(rng, int(rng.integers(4, 14)))
        hi = int(chain.tape_bytes.sum() + chain.act_bytes.sum() + chain.grad_bytes.sum()) + 60
        problem = Problem.build(chain, -(-hi // buckets), buckets)
        host = cpu.fill(problem)
        module = StandInModule(problem, host)
        table = cuda.DeviceTable(problem, module, None, [], (), cuda._Workspace(), cuda.GEOMETRY, timings={})
        table.curve = host.curve
        return table, host, module
    return make


@pytest.mark.parametrize("seed", range(8))
def test_prefetched_policies_are_the_cpu_ones_in_one_launch(device_table, seed):
    table, host, module = device_table(seed)
    feasible = [int(m) for m in np.flatnonzero(np.isfinite(host.curve))]
    assert feasible
    table.prefetch(feasible + [-1, len(host.curve)])  # out of range and infeasible columns are left out
    assert module.launches == [len(feasible)]
    for m in feasible:
        assert table.policy(m) == host.policy(m), m
    assert module.launches == [len(feasible)]  # every policy came from the one launch
    assert table.policy(len(host.curve)) is None
    table.prefetch(feasible)  # nothing left to walk: no launch
    assert module.launches == [len(feasible)] and table._timings["recover"] > table._timings["recover_walks"] > 0


def test_a_policy_not_prefetched_is_walked_alone_and_batches_split(device_table, monkeypatch):
    table, host, module = device_table(3, buckets=90)
    feasible = [int(m) for m in np.flatnonzero(np.isfinite(host.curve))]
    assert len(feasible) > 5
    assert table.policy(feasible[-1]) == host.policy(feasible[-1]) and module.launches == [1]
    monkeypatch.setattr(cuda, "RECOVERY_BATCH", 2)
    table.prefetch(feasible[:5])
    assert module.launches == [1, 2, 2, 1]
    assert all(table.policy(m) == host.policy(m) for m in feasible[:5])


def test_a_failed_walk_is_reported_for_its_column_only(device_table):
    table, host, module = device_table(5)
    table.curve = table.curve.copy()
    table.curve[0] = 1.0  # the stand-in's CPU table has no policy there: its walk fails as the kernel's would
    real = module.get_function

    def failing(name):
        launch = real(name)

        def run(grid, block, args):
            args[-6][0] = -5  # block 0 walks an infeasible state
            launch(grid, block, args)
        return run
    module.get_function = failing
    feasible = [int(m) for m in np.flatnonzero(np.isfinite(host.curve))]
    table.prefetch([0] + feasible)  # the failed walk is one of many: only its column reports it
    assert all(table.policy(m) == host.policy(m) for m in feasible)
    with pytest.raises(RuntimeError, match="at m = 0 failed .infeasible state"):
        table.policy(0)


@pytest.mark.parametrize("seed", range(6))
def test_walk_quads_invert_the_tree_build(seed):
    """walk_quads gives the CPU walk's own visiting order, which build_policy turns back into the policy."""
    from gpusolve.dp import recover
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, int(rng.integers(3, 25)))
    problem = Problem.build(chain, 3, 80)
    host = cpu.fill(problem)
    seen = []
    real = recover.policy_from_choices
    for m in np.flatnonzero(np.isfinite(host.curve))[::7]:
        m = int(m)
        recover.policy_from_choices = lambda order, tape, act: seen.append(list(order)) or real(order, tape, act)
        try:
            policy = host.policy(m)
        finally:
            recover.policy_from_choices = real
        order = walk_quads(problem, policy, m)
        assert order == [tuple(int(v) for v in q) for q in seen[-1]]
        assert build_policy(problem, np.asarray(order, dtype=np.int32)) == policy
