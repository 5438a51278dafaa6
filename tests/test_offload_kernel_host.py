"""CI check of the CUDA offload kernel's arithmetic without a GPU, and that it compiles.

tests/kernel_host/offload_harness.cpp includes kernels/offload_common.cuh (the staging and per-thread
functions the kernel offload_diag calls) and emulates the launches of
gpusolve.offload.cuda.launch_plan block by block, thread by thread. It is built with the launch
geometry of gpusolve.offload.cuda.OffloadGeometry as -D options, exactly what the NVRTC source gets as
#defines, and reads the arrays of gpusolve.offload.cuda.device_arrays. Both of its planes must equal
gpusolve.offload.dp.solve_tables' bit for bit (and, over a useless link, the chain DP's table).
The device backend's host side (recovery over on-demand element reads) runs here on a stand-in for
device memory.
"""
from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from gpusolve import Chain
from gpusolve.dp import cpu
from gpusolve.dp.problem import Problem
from gpusolve.offload import cuda as offload_cuda
from gpusolve.offload.dp import OffloadTable, SwapArrays, fill, solve_tables
from gpusolve.offload.link import Link
from gpusolve.simulate import store_all_peak_bytes
from _kernel_host import (C_TYPES, HostArray, assert_imports_without_cupy, assert_nvcc_compiles,
                          assert_nvrtc_compiles, build_harness, dump_arrays, exec_harness, fake_cupy, kernel_params,
                          read_stats)
from test_kernel_host import binding_chain, random_chain

# Unlike the default in every field: one warp per block, three buckets per thread (blocks straddle the
# last bucket with partial threads), k tiles of 5 (many tiles, a partial last one).
OTHER_GEOMETRY = offload_cuda.OffloadGeometry(threads=32, mpt=3, ktile=5)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return build_harness("offload_harness.cpp", tmp_path_factory.mktemp("offload_harness"), offload_cuda.GEOMETRY)


@pytest.fixture(scope="module")
def other_harness(tmp_path_factory):
    return build_harness("offload_harness.cpp", tmp_path_factory.mktemp("offload_harness_other"), OTHER_GEOMETRY)


def run_harness(harness: Path, problem: Problem, swap: SwapArrays, folder: Path, geometry=None):
    """Dump the kernel's inputs, emulate the launches; returns (planes [2, pairs, W], stats)."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = offload_cuda.device_arrays(problem, swap)
    dump_arrays(folder, arrays, offload_cuda.ARRAY_ORDER)
    width = problem.buckets + 1
    n, _, multi, bucket = (int(v) for v in offload_cuda.scalars(problem))
    (folder / "meta.txt").write_text(f"{n} {width} {multi} {bucket}\n")
    plan = offload_cuda.launch_plan(problem.n, width, geometry)
    (folder / "plan.txt").write_text("".join(f"{d} {gx} {gy}\n" for d, (gx, gy) in plan))
    exec_harness(harness, folder)
    planes = np.fromfile(folder / "planes.bin", dtype=np.float32).reshape(2, problem.pairs, width)
    stats = read_stats(folder)
    return planes, stats


def _state(problem: Problem, r: int) -> tuple[int, int]:
    d = int(np.searchsorted(problem.diag_offset, r, side="right") - 1)
    i = r - int(problem.diag_offset[d])
    return i, i + d


def assert_same(harness, problem: Problem, chain: Chain, link: Link, folder: Path, geometry=None):
    """Both harness planes bit-identical to solve_tables'; returns ((plane 0, plane 1), swap, stats)."""
    swap = SwapArrays.build(problem, chain, link)
    ref = solve_tables(problem, swap)
    planes, stats = run_harness(harness, problem, swap, folder, geometry)
    for s in (0, 1):
        got, want = planes[s].view(np.uint32), ref[s].view(np.uint32)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            r, m = (int(v) for v in bad[0])
            i, j = _state(problem, r)
            raise AssertionError(f"plane {s}: {len(bad)} values differ; first at (i={i}, j={j}, m={m}): "
                                 f"harness {planes[s][r, m]!r}, cpu {ref[s][r, m]!r}")
    return ref, swap, stats


# ---------------------------------------------------------------------------- instances
def random_link(rng, kind: str) -> Link:
    """Links whose transfer times are of the order of the random chains' stage times (act ~ 5e3 B,
    times ~ 1-10 ms), so that swaps win some states and lose others."""
    if kind == "useless":
        return Link.useless()
    if kind == "d2h_only":
        return Link(float(rng.uniform(200, 3000)), 0.0)
    if kind == "h2d_only":
        return Link(0.0, float(rng.uniform(200, 3000)))
    if kind == "latency_only":
        return Link(math.inf, math.inf, float(rng.choice([0.25, 0.5, 2.0])))
    latency = 0.0 if kind == "zero_latency" else float(rng.uniform(0.0, 0.5))
    return Link(float(rng.uniform(300, 3000)), float(rng.uniform(300, 3000)), latency)


def random_problem(seed: int, multi_tape: bool, binding: bool = False) -> tuple[Problem, Chain]:
    rng = np.random.default_rng(700 + seed)
    n = int(rng.integers(2, 41)) if seed else 38  # seed 0: more k than one tile (default ktile 32)
    chain = (binding_chain if binding else random_chain)(rng, n, multi_tape)
    total = int(chain.tape_bytes.sum() + chain.grad_bytes.max() + chain.bwd_extra.max())
    buckets = int(rng.integers(40, 300)) if seed else 290  # seed 0: two blocks along m (256 per block)
    bucket = max(1, total // int(rng.integers(buckets // 4 + 1, buckets + 1)))
    return Problem.build(chain, bucket, buckets), chain


LINKS = ("finite", "zero_latency", "latency_only")
CASES = [(seed, multi, kind) for seed in range(6) for multi, kind in
         [(bool(seed % 3), LINKS[seed % 3]), (not seed % 2, LINKS[(seed + 1) % 3])]]


def _nonvacuous(problem: Problem, ref) -> None:
    """The curve has a feasible range with several optima, and offloading decides some values."""
    curve = ref[0][problem.row(0, problem.n)]
    finite = np.isfinite(curve)
    assert finite.any() and not finite.all() and len(set(curve[finite].tolist())) >= 2, curve
    assert np.any(ref[1] < ref[0]), "no state where a swap helps: the swap candidate is not exercised"


@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}-{'multi' if c[1] else 'thesis'}-{c[2]}" for c in CASES])
def test_random_chains_bit_identical(harness, tmp_path, case):
    seed, multi, kind = case
    problem, chain = random_problem(seed, multi)
    link = random_link(np.random.default_rng(seed), kind)
    ref, _, stats = assert_same(harness, problem, chain, link, tmp_path)
    _nonvacuous(problem, ref)
    if seed == 0:
        assert stats["blocks"] >= 2 * problem.n  # two blocks along m per pair
        assert stats["later_tiles"] > 0  # some pair evaluates a second k tile


@pytest.mark.parametrize("case", CASES[::3], ids=[f"seed{c[0]}" for c in CASES[::3]])
def test_other_geometry_bit_identical(other_harness, tmp_path, case):
    """Geometry injection: a harness built with other -D values, launched with the grid Python derives
    from the same OffloadGeometry, still equals NumPy bit for bit."""
    seed, multi, kind = case
    problem, chain = random_problem(seed, multi)
    assert_same(other_harness, problem, chain, random_link(np.random.default_rng(seed), kind), tmp_path,
                OTHER_GEOMETRY)


@pytest.mark.parametrize("kind", ["useless", "d2h_only", "h2d_only"])
@pytest.mark.parametrize("seed", [1, 4])
def test_useless_links_give_the_chain_table(harness, other_harness, tmp_path, kind, seed):
    """Bandwidth 0 in some direction: no swap can happen (tau = inf, every swap candidate +inf and
    never NaN): both planes equal the chain DP's table (cpu.fill) bit for bit, in both geometries."""
    problem, chain = random_problem(seed, bool(seed % 2))
    link = random_link(np.random.default_rng(seed), kind)
    ref, _, _ = assert_same(harness, problem, chain, link, tmp_path / "default")
    assert_same(other_harness, problem, chain, link, tmp_path / "other", OTHER_GEOMETRY)
    chain_table = cpu.fill(problem).table
    assert np.array_equal(ref[0], chain_table) and np.array_equal(ref[1], chain_table)


@pytest.mark.parametrize("multi_tape", [True, False])
@pytest.mark.parametrize("other", [False, True], ids=["default", "other_geometry"])
def test_binding_thresholds_bit_identical(harness, other_harness, tmp_path, multi_tape, other):
    """Checkpoint thresholds that bind where candidates are finite (large no-grad workspaces), 600
    buckets: threads leave their k loop at their own threshold, and (one-warp blocks) whole blocks at
    the staged one."""
    rng = np.random.default_rng(500 + multi_tape)
    chain = binding_chain(rng, 40, multi_tape)
    total = int(chain.tape_bytes.sum() + chain.grad_bytes.max() + chain.bwd_extra.max())
    problem = Problem.build(chain, max(1, total // 600), 600)
    link = random_link(np.random.default_rng(9), "finite")
    ref, _, stats = assert_same(other_harness if other else harness, problem, chain, link, tmp_path,
                                OTHER_GEOMETRY if other else None)
    _nonvacuous(problem, ref)
    assert stats["thread_exits"] > 0, stats
    if other:
        assert stats["block_exits"] > 0, stats


@pytest.mark.parametrize("other", [False, True], ids=["default", "other_geometry"])
def test_threshold_exactly_at_the_last_bucket(harness, other_harness, tmp_path, other):
    """A huge no-grad workspace in stage 1 makes every checkpoint of (0, N) allowed only from the same
    bucket, chosen as the last one M: the block holding M must not leave its k loop when the first
    staged threshold equals its largest bucket (thesis mode: no tape at (0, N), so C(0, N, M) comes
    from those checkpoints and swaps alone)."""
    rng = np.random.default_rng(42)
    base = random_chain(rng, 12, False).to_dict()
    base["fwd_nograd_extra"][0] = 400_000
    chain = Chain.from_dict(base)
    bucket = 2000
    thr = int(Problem.build(chain, bucket, 1).thr_ckpt(0, chain.n, 1))
    problem = Problem.build(chain, bucket, thr)
    assert all(int(problem.thr_ckpt(0, chain.n, k)) == thr for k in range(1, chain.n))
    link = random_link(np.random.default_rng(5), "finite")
    ref, _, _ = assert_same(other_harness if other else harness, problem, chain, link, tmp_path,
                            OTHER_GEOMETRY if other else None)
    top = ref[0][problem.row(0, chain.n)]
    assert np.isfinite(top[-1]) and not np.isfinite(top[-2])


def test_both_prefetch_variants_decide_values(harness, tmp_path):
    """The instance discriminates the e_pre choice (overlap iff m - act_b[k] >= pre_b[k+1]): forcing
    either variant everywhere changes plane 1, so a kernel choosing wrongly would differ."""
    problem, chain = random_problem(0, True)
    link = random_link(np.random.default_rng(0), "finite")
    ref, swap, _ = assert_same(harness, problem, chain, link, tmp_path)
    for forced in (np.zeros_like(swap.pre_b), np.full_like(swap.pre_b, problem.buckets + 1)):
        other = SwapArrays(swap.w_off, swap.e_overlap, swap.e_full, forced, swap.pre_bytes)
        assert not np.array_equal(solve_tables(problem, other)[1], ref[1])


def test_profile_bit_identical(harness, other_harness, tmp_path):
    """resnet50_b128 at a coarse bucket (96 buckets), over a real link and a useless one."""
    chain = Chain.load("resnet50_b128")
    budget = store_all_peak_bytes(chain) // 2
    problem = Problem.build(chain, budget // 96, 96)
    link = Link.parse("12GB/s", latency_ms=0.01)
    ref, _, _ = assert_same(harness, problem, chain, link, tmp_path / "fast")
    assert np.isfinite(ref[0][problem.row(0, problem.n), -1]) and np.any(ref[1] < ref[0])
    assert_same(other_harness, problem, chain, link, tmp_path / "other", OTHER_GEOMETRY)
    useless, _, _ = assert_same(harness, problem, chain, Link.useless(), tmp_path / "useless")
    assert np.array_equal(useless[0], cpu.fill(problem).table)


# ---------------------------------------------------------------------------- launch plan, source, ABI
def test_launch_plan_covers_each_diagonal_once():
    for geometry in (offload_cuda.GEOMETRY, OTHER_GEOMETRY):
        for n in (1, 2, 21, 40):
            for width in (1, 97, geometry.block_buckets, geometry.block_buckets + 1, 3000):
                plan = offload_cuda.launch_plan(n, width, geometry)
                assert [d for d, _ in plan] == list(range(1, n + 1))
                for d, (gx, gy) in plan:
                    assert gy == n + 1 - d
                    assert gx * geometry.block_buckets >= width > (gx - 1) * geometry.block_buckets


def test_geometry_reaches_the_source():
    source = offload_cuda.kernel_source(OTHER_GEOMETRY)
    head = source[:source.index("// CUDA kernel of the combined recompute + offload DP")]
    for name, value in OTHER_GEOMETRY.defines().items():
        assert f"#define {name} {value}\n" in head
        assert f"#ifndef {name}\n" in source
    assert '#include "' not in source and "#pragma once" not in source  # one translation unit
    assert source.count("struct DpArgs {") == 1 and source.count("struct OlArgs {") == 1
    with pytest.raises(ValueError, match="multiple of 32"):
        offload_cuda.OffloadGeometry(threads=48)
    with pytest.raises(ValueError, match="ktile"):
        offload_cuda.OffloadGeometry(threads=32, ktile=33)
    with pytest.raises(ValueError, match="positive int"):
        offload_cuda.OffloadGeometry(mpt=0)


def test_launch_arguments_match_the_kernel_signature():
    """The arrays fill() passes after the planes, in ARRAY_ORDER, have the dtypes of offload_diag's
    parameters in order (and their names), and the scalars follow (n, width, multi_tape, bucket, d)."""
    decls = kernel_params("offload.cu", "offload_diag")
    types = [t for t, _ in decls]
    assert types[0] == "float*"
    # By name too: arrays of one dtype (w_off, e_overlap) swapped in ARRAY_ORDER would pass the dtype check.
    assert [name for _, name in decls] == ["planes", *offload_cuda.ARRAY_ORDER, "n", "width", "multi_tape",
                                           "bucket", "d"]
    problem, chain = random_problem(2, True)
    arrays = offload_cuda.device_arrays(problem, SwapArrays.build(problem, chain, Link(500.0, 500.0)))
    names = offload_cuda.ARRAY_ORDER
    assert [C_TYPES[t] for t in types[1:1 + len(names)]] == [arrays[n].dtype.type for n in names]
    scalar_types = {np.int32: "int", np.int64: "long long"}
    assert types[1 + len(names):] == [scalar_types[type(v)] for v in offload_cuda.scalars(problem)] + ["int"]
    n = problem.n
    assert arrays["w_off"].shape == arrays["e_overlap"].shape == ((n + 1) ** 2,)
    assert arrays["e_full"].shape == (n + 1,) and arrays["pre_b"].shape == (n + 2,)


def test_pre_b_clamp_keeps_every_comparison():
    """pre_b goes to the device as int32 clamped to W: with 1-byte buckets of a real profile the
    unclamped values overflow int32, and the clamp changes no comparison with m - act_b[k] <= M."""
    chain = Chain.load("resnet50_b128")
    problem = Problem.build(chain, 1, 1000)
    swap = SwapArrays.build(problem, chain, Link.parse("12GB/s"))
    assert swap.pre_b.max() > 2**31
    clamped = offload_cuda.device_arrays(problem, swap)["pre_b"]
    room = np.arange(-problem.buckets - 1, problem.buckets + 1)
    assert np.array_equal(room[:, None] >= clamped[None, :], room[:, None] >= swap.pre_b[None, :])


def test_device_bytes_counts_both_planes():
    problem, _ = random_problem(2, True)
    need = offload_cuda.device_bytes(problem.n, problem.buckets)
    assert need >= 2 * problem.table_bytes()
    budget = problem.bucket_bytes * problem.buckets
    bucket = offload_cuda.finest_fitting_bucket(budget, problem.n, need)
    assert bucket <= problem.bucket_bytes
    assert offload_cuda.device_bytes(problem.n, budget // bucket) <= need


def test_module_imports_without_cupy():
    """gpusolve.offload.cuda's plain parts must not import CuPy (CI machines without it)."""
    assert_imports_without_cupy("gpusolve.offload")


# ---------------------------------------------------------------------------- compilation
@pytest.mark.parametrize("geometry", [offload_cuda.GEOMETRY, OTHER_GEOMETRY], ids=["default", "other"])
def test_nvrtc_compiles_like_rawmodule(geometry):
    """The source cupy.RawModule gets compiles with NVRTC exactly as at run time (sm_90), with no log
    output, offload_diag in the cubin, and no register spill or stack frame."""
    assert_nvrtc_compiles(offload_cuda.kernel_source(geometry), offload_cuda.COMPILE_OPTIONS, "offload_diag")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("geometry", [offload_cuda.GEOMETRY, OTHER_GEOMETRY], ids=["default", "other"])
def test_inlined_source_compiles_with_nvcc(tmp_path, geometry):
    """The single translation unit handed to NVRTC compiles on its own, without warnings (and
    kernels/offload.cu itself with nvcc: tests/test_kernel_host.py compiles every kernels/*.cu)."""
    assert_nvcc_compiles(tmp_path, offload_cuda.kernel_source(geometry), "offload_inlined.cu")


# ---------------------------------------------------------------------------- host side of the backend
def test_on_demand_recovery_gives_the_cpu_policies(monkeypatch):
    """DeviceOffloadTable's recovery (the CPU's recover/choose over DevicePlane element gathers) on a
    stand-in for device memory gives the CPU's policies at every feasible budget, copying back far
    less than the table."""
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    problem, chain = random_problem(0, True)
    link = random_link(np.random.default_rng(0), "finite")
    ref = fill(problem, chain, link)
    flat = np.concatenate([ref.planes[0].reshape(-1), ref.planes[1].reshape(-1)]).view(HostArray)
    top = problem.row(0, problem.n)
    got = offload_cuda.DeviceOffloadTable(problem, ref.swap, flat, ref.planes[0][top].copy())
    assert isinstance(got, OffloadTable)
    feasible = np.flatnonzero(np.isfinite(ref.curve))
    assert len(feasible) > 20
    swaps = 0
    for m in feasible:
        policy = got.policy(int(m))
        assert policy == ref.policy(int(m)), m
        swaps += "Swap(" in repr(policy)
    assert swaps > 0  # some recovered policy offloads
    assert got.policy(int(feasible[0]) - 1) is None if feasible[0] > 0 else True
    per_policy = got.copied_bytes / len(feasible)
    assert per_policy < 0.05 * 2 * problem.table_bytes(), (per_policy, problem.table_bytes())
    for s in (0, 1):
        assert got.value(3, 9, 100, s) == ref.value(3, 9, 100, s)
    host0, host1 = got.host_planes()
    assert np.array_equal(host0, ref.planes[0]) and np.array_equal(host1, ref.planes[1])


def test_device_plane_indexing_follows_numpy():
    """DevicePlane[rows, cols]: broadcasting, scalars, negative indices, empty and out-of-range indices
    exactly as a NumPy table (choose() indexes the planes these ways)."""
    saved = sys.modules.get("cupy")
    sys.modules["cupy"] = fake_cupy()
    try:
        table = np.arange(2 * 6 * 5, dtype=np.float32).reshape(2, 6, 5)
        copied = [0]
        plane = offload_cuda.DevicePlane(table.reshape(-1).view(HostArray), 30, 6, 5, copied)
        host = table[1]
        rows, cols = np.array([0, 5, 2]), np.array([4, 0, 3])
        assert np.array_equal(plane[rows, cols], host[rows, cols])
        assert np.array_equal(plane[rows, 2], host[rows, 2])
        value = plane[np.int64(3), 1]
        assert isinstance(value, np.float32) and value == host[3, 1]
        assert plane[-1, -2] == host[-1, -2]
        assert plane[np.zeros(0, dtype=np.int64), 3].shape == (0,)
        with pytest.raises(IndexError):
            plane[6, 0]
        with pytest.raises(IndexError):
            plane[0, 5]
        assert copied[0] == 4 * (3 + 3 + 1 + 1)
    finally:
        if saved is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = saved
