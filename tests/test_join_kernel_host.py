"""CI check of the CUDA join kernel's arithmetic without a GPU, and that it compiles.

tests/kernel_host/join_harness.cpp includes kernels/join_common.cuh (the per-thread function the
kernel join_plane calls) and emulates the launches of gpusolve.join.cuda.launch_plan block by
block, thread by thread. It is built with the launch geometry of gpusolve.join.cuda.JoinGeometry as
-D options, exactly what the NVRTC source gets as #defines, and reads the arrays of
gpusolve.join.cuda.device_arrays. The branch chain tables it reads are gpusolve.dp.cpu's, which
tests/test_kernel_host.py shows equal bit for bit to what the chain kernels leave on the device.
Its whole J table must equal gpusolve.join.dp.fill_join's bit for bit.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from gpusolve import Chain
from gpusolve.join import EmptyBranch, JoinNet, JoinProblem, Turn, fill_join, min_peak_join
from gpusolve.join import cuda as join_cuda
from gpusolve.join.bytesim import store_all_join_peak_bytes
from _kernel_host import (C_TYPES, assert_imports_without_cupy, assert_nvcc_compiles,
                          assert_nvrtc_compiles, build_harness, dump_arrays, exec_harness, fake_cupy, kernel_params)
from _gpu_standin import join_fill
from test_join_dp import VECTORS, vector_net

# Unlike the default in both fields: one warp per block, three buckets per thread (so that blocks
# straddle the last bucket with partial threads).
OTHER_GEOMETRY = join_cuda.JoinGeometry(threads=32, mpt=3)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return build_harness("join_harness.cpp", tmp_path_factory.mktemp("join_harness"), join_cuda.GEOMETRY)


@pytest.fixture(scope="module")
def other_harness(tmp_path_factory):
    return build_harness("join_harness.cpp", tmp_path_factory.mktemp("join_harness_other"), OTHER_GEOMETRY)


def run_harness(harness: Path, jp: JoinProblem, ctables: list, folder: Path, geometry=None) -> np.ndarray:
    """Dump ``jp`` and the chain tables, emulate the launches; returns the J table (rows x W)."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = join_cuda.device_arrays(jp)
    dump_arrays(folder, arrays, ("plane_rows", *join_cuda.ARRAY_ORDER))
    offsets, total = join_cuda.chain_table_offsets(jp)
    ctab = np.zeros(total, dtype=np.float32)
    width = jp.buckets + 1
    for b, table in enumerate(ctables):
        if table is not None:
            ctab[offsets[b]:offsets[b] + table.size] = table.reshape(-1)
    ctab.tofile(folder / "ctab.bin")
    t_bits = int(np.float32(arrays["t_turn"]).view(np.uint32))
    (folder / "meta.txt").write_text(f"{arrays['k']} {width} {arrays['bucket']} {arrays['turn_need']} {t_bits} "
                                     f"{jp.rows} {total}\n")
    plan = join_cuda.launch_plan(jp, geometry, arrays)
    (folder / "plan.txt").write_text("".join(f"{start} {count} {gx} {gy}\n" for _d, start, count, (gx, gy) in plan))
    exec_harness(harness, folder)
    return np.fromfile(folder / "J.bin", dtype=np.float32).reshape(jp.rows, width)


def assert_same(harness, jp: JoinProblem, folder: Path, geometry=None):
    """The harness's J table is bit-identical to fill_join's; returns the CPU's JoinTable."""
    ref = fill_join(jp)
    table = run_harness(harness, jp, ref.ctables, folder, geometry)
    got, want = table.view(np.uint32), ref.table.view(np.uint32)
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        row, m = (int(v) for v in bad[0])
        raise AssertionError(f"{len(bad)} values differ; first at state s={tuple(jp.s[row])} "
                             f"u={tuple(jp.u[row])} (row {row}), m={m}: harness {table[row, m]!r}, "
                             f"cpu {ref.table[row, m]!r}")
    return ref


# ---------------------------------------------------------------------------- instances
def random_branch(rng, n: int, multi_tape: bool) -> Chain:
    """Heterogeneous stages; times in quarters of a ms (ties between candidates happen), sizes with
    zeros, large no-grad workspaces on some stages (checkpoint thresholds that bind), released tapes."""
    def sizes(lo, hi, zero_frac=0.1):
        v = rng.integers(lo, hi, size=n)
        v[rng.random(n) < zero_frac] = 0
        return v

    def times(scale):
        return np.round(rng.random(n) * scale * 4) / 4

    act, tape = sizes(1, 5000), sizes(1, 9000)
    released = np.where(rng.random(n) < 0.5, rng.integers(0, tape + 1), 0)
    nograd = np.where(rng.random(n) < 0.3, rng.integers(5000, 20000, size=n), sizes(0, 2000, 0.5))
    return Chain(t_fwd=times(3), t_fwd_nograd=times(3), t_bwd=times(6), act_bytes=act,
                 grad_bytes=np.maximum(act, rng.integers(0, 5000, size=n) * (rng.random(n) < 0.3)),
                 tape_bytes=tape, bwd_tape_bytes=tape - released, fwd_nograd_extra=nograd,
                 fwd_grad_extra=sizes(0, 2000, 0.5), bwd_extra=sizes(0, 3000, 0.5),
                 input_bytes=int(rng.integers(0, 5000)), input_grad_bytes=int(rng.integers(0, 5000)),
                 reserved_bytes=int(rng.integers(0, 3000)) if rng.random() < 0.5 else 0, multi_tape=multi_tape)


def random_net(seed: int, k: int, empty: bool, frees: bool, multi: str) -> JoinNet:
    """k branches (one empty when ``empty``); ``multi``: "all" multi-tape, "none" (thesis mode), "mixed"."""
    rng = np.random.default_rng(1000 + seed)
    lengths = [int(v) for v in rng.integers(2, 8 if k == 2 else 5, size=k)]
    if empty:
        lengths[int(rng.integers(k))] = 0
    flags = {"all": [True] * k, "none": [False] * k, "mixed": [b % 2 == 0 for b in range(k)]}[multi]
    branches = [EmptyBranch(int(rng.integers(0, 5000)), int(rng.integers(0, 5000))) if n == 0 else
                random_branch(rng, n, flags[b]) for b, n in enumerate(lengths)]
    turn = Turn(t_fwd=float(np.round(rng.random() * 8) / 4), t_bwd=float(np.round(rng.random() * 8) / 4),
                tape_bytes=int(rng.integers(0, 3000)), fwd_extra=int(rng.integers(0, 3000)),
                bwd_extra=int(rng.integers(0, 3000)), frees_inputs=frees)
    return JoinNet(branches, turn, reserved_bytes=int(rng.integers(0, 2000)))


def bucketed(net: JoinNet, buckets: int) -> JoinProblem:
    """Columns from below the least peak to above the store-all peak, ``buckets`` of them."""
    top = max(store_all_join_peak_bytes(net), min_peak_join(net).min_bytes) * 11 // 10
    return JoinProblem.build(net, max(1, -(-top // buckets)), buckets)


CASES = [  # (seed, k, empty branch, frees_inputs, multi_tape, buckets)
    (0, 2, False, True, "all", 150),
    (1, 2, False, False, "all", 97),
    (2, 2, True, True, "mixed", 300),
    (3, 2, False, True, "none", 64),
    (4, 3, False, True, "mixed", 120),
    (5, 3, True, False, "all", 200),
    (6, 3, False, False, "none", 80),
    (7, 3, True, True, "all", 33),
    (8, 2, False, True, "mixed", 517),
    (9, 3, False, True, "all", 260),
]


@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}-k{c[1]}{'-empty' if c[2] else ''}-"
                                              f"{'frees' if c[3] else 'keeps'}-{c[4]}-M{c[5]}" for c in CASES])
def test_random_joins_bit_identical(harness, tmp_path, case):
    seed, k, empty, frees, multi, buckets = case
    jp = bucketed(random_net(seed, k, empty, frees, multi), buckets)
    ref = assert_same(harness, jp, tmp_path)
    finite = np.isfinite(ref.curve)
    # Not a vacuous comparison: the curve has a feasible range and several distinct optima.
    assert finite.any() and not finite.all() and len(set(ref.curve[finite].tolist())) >= 2, ref.curve


@pytest.mark.parametrize("case", CASES[::3], ids=[f"seed{c[0]}" for c in CASES[::3]])
def test_other_geometry_bit_identical(other_harness, tmp_path, case):
    """Geometry injection: a harness built with other -D values, launched with the grid Python derives
    from the same JoinGeometry, still equals NumPy bit for bit."""
    seed, k, empty, frees, multi, buckets = case
    jp = bucketed(random_net(seed, k, empty, frees, multi), buckets)
    assert_same(other_harness, jp, tmp_path, OTHER_GEOMETRY)


def test_fine_buckets_many_states(harness, tmp_path):
    """A larger instance: three branches, fine buckets (several blocks along m for the default geometry)."""
    jp = bucketed(random_net(11, 3, False, True, "mixed"), 700)
    assert -(-(jp.buckets + 1) // join_cuda.GEOMETRY.block_buckets) >= 2
    assert_same(harness, jp, tmp_path)


@pytest.mark.parametrize("name", sorted(VECTORS))
@pytest.mark.parametrize("frees", [True, False])
def test_spec_vectors_bit_identical(harness, other_harness, tmp_path, name, frees):
    """The spec's project-model vectors (1-byte buckets), both geometries; the CPU's curve is
    pinned to the vectors by tests/test_join_dp.py, checked here again."""
    vector = VECTORS[name]
    top = max(int(m) for m in vector["rows"])
    jp = JoinProblem.build(vector_net(vector, frees), 1, top)
    ref = assert_same(harness, jp, tmp_path / "default")
    assert_same(other_harness, jp, tmp_path / "other", OTHER_GEOMETRY)
    for m, row in vector["rows"].items():
        value = row[0 if frees else 1]
        assert float(ref.curve[int(m)]) == (np.inf if value is None else float(value))


def test_profile_branches_bit_identical(harness, tmp_path):
    """Two real profiles (the bench instance's kind), coarse buckets."""
    net = JoinNet([Chain.load("resnet50_b128"), Chain.load("resnet50_b128")],
                  Turn(t_fwd=0.5, t_bwd=0.5, tape_bytes=1 << 20, bwd_extra=1 << 20))
    budget = store_all_join_peak_bytes(net) // 2
    jp = JoinProblem.build(net, -(-budget // 64), 64)
    ref = assert_same(harness, jp, tmp_path)
    assert np.isfinite(ref.curve[-1])


# ---------------------------------------------------------------------------- launch plan, source
def test_launch_plan_covers_every_state_once_top_down():
    for case in CASES:
        jp = bucketed(random_net(*case[:5]), case[5])
        for geometry in (join_cuda.GEOMETRY, OTHER_GEOMETRY):
            arrays = join_cuda.device_arrays(jp)
            plan = join_cuda.launch_plan(jp, geometry, arrays)
            ds = [d for d, *_ in plan]
            assert ds == sorted(ds, reverse=True) and ds[0] == sum(jp.lengths) and ds[-1] == 0
            rows = np.concatenate([arrays["plane_rows"][s:s + c] for _d, s, c, _g in plan])
            assert sorted(rows.tolist()) == list(range(jp.rows))
            for d, start, count, (gx, gy) in plan:
                assert gx == count and np.all(jp.s[arrays["plane_rows"][start:start + count]].sum(axis=1) == d)
                assert gy * geometry.block_buckets >= jp.buckets + 1 > (gy - 1) * geometry.block_buckets


def test_geometry_reaches_the_source():
    source = join_cuda.kernel_source(OTHER_GEOMETRY)
    head = source[:source.index("// CUDA kernel of the heterogeneous join DP")]
    for name, value in OTHER_GEOMETRY.defines().items():
        assert f"#define {name} {value}\n" in head
        assert f"#ifndef {name}\n" in source
    assert '#include "' not in source and "#pragma once" not in source  # one translation unit
    assert source.count("struct DpArgs {") == 1  # dp_common.cuh inlined once
    with pytest.raises(ValueError, match="multiple of 32"):
        join_cuda.JoinGeometry(threads=48)


def test_device_bytes_counts_the_tables():
    jp = bucketed(random_net(4, 3, False, True, "mixed"), 120)
    tables = jp.table_bytes() + sum(p.table_bytes() for p in jp.problems if p is not None)
    assert join_cuda.device_bytes(jp) >= tables
    assert join_cuda.device_bytes(jp) == join_cuda.device_bytes_for(jp.net, jp.buckets)


def test_module_imports_without_cupy():
    """gpusolve.join.cuda's plain parts must not import CuPy (CI machines without it)."""
    assert_imports_without_cupy("gpusolve.join")


# ---------------------------------------------------------------------------- compilation
@pytest.mark.parametrize("geometry", [join_cuda.GEOMETRY, OTHER_GEOMETRY], ids=["default", "other"])
def test_nvrtc_compiles_like_rawmodule(geometry):
    """The source cupy.RawModule gets compiles with NVRTC exactly as at run time (sm_90), with no log
    output, join_plane in the cubin, and no register spill or stack frame."""
    assert_nvrtc_compiles(join_cuda.kernel_source(geometry), join_cuda.COMPILE_OPTIONS, "join_plane")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("geometry", [join_cuda.GEOMETRY, OTHER_GEOMETRY], ids=["default", "other"])
def test_inlined_source_compiles_with_nvcc(tmp_path, geometry):
    """The single translation unit handed to NVRTC compiles on its own (tests/test_kernel_host.py
    compiles kernels/join.cu itself with nvcc, as every kernels/*.cu)."""
    assert_nvcc_compiles(tmp_path, join_cuda.kernel_source(geometry), "join_inlined.cu")


# ---------------------------------------------------------------------------- host-side parts of the backend
def test_launch_arguments_match_the_kernel_signature():
    """The arrays fill() passes after (J, ctab, plane_rows, plane_start), in ARRAY_ORDER, have the
    dtypes of join_plane's parameters in order, and the scalars follow (a check of the launch ABI
    that needs no GPU)."""
    types = [t for t, _name in kernel_params("join.cu", "join_plane")]
    assert types[:4] == ["float*", "float*", "long long*", "long long"]
    arrays = join_cuda.device_arrays(bucketed(random_net(4, 3, True, True, "mixed"), 50))
    names = join_cuda.ARRAY_ORDER
    assert [C_TYPES[t] for t in types[4:4 + len(names)]] == [arrays[n].dtype.type for n in names]
    assert arrays["plane_rows"].dtype == np.int64
    assert types[4 + len(names):] == ["int", "int", "long long", "int", "float"]  # k, width, bucket, turn_need, t_turn


def test_on_demand_recovery_gives_the_cpu_policies(monkeypatch):
    """DeviceJoinTable's recovery (JoinTable.policy over DeviceRows views: only the rows and
    elements it reads are copied, each row once) on a stand-in for device memory gives the CPU's
    policies at every fifth feasible budget."""
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    monkeypatch.setattr(join_cuda, "HOST_COPY_BYTES", 0)  # no table is small enough to copy whole
    jp = bucketed(random_net(9, 3, False, True, "all"), 260)
    ref = fill_join(jp)
    _, total = join_cuda.chain_table_offsets(jp)
    got = join_fill(jp)  # the CPU's tables as device memory
    assert np.array_equal(got.curve, ref.curve)
    got._copied[0] = 0
    feasible = np.flatnonzero(np.isfinite(ref.curve))
    assert len(feasible) > 20
    for m in feasible[::5]:
        assert got.policy(int(m)) == ref.policy(int(m)), m
    # Each row is copied at most once (a filled table never changes), whatever the number of policies.
    assert got.copied_bytes <= 1.05 * (jp.table_bytes() + 4 * total), (got.copied_bytes, jp.table_bytes())
    assert got.copied_bytes < jp.table_bytes()  # on demand: not the whole table
    assert np.array_equal(got.host_table(), ref.table)


def test_small_tables_are_copied_whole_once(monkeypatch):
    """Tables of at most HOST_COPY_BYTES are copied to the host at the first recovery, once: the CPU's
    policies, and nothing copied after."""
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    jp = bucketed(random_net(9, 3, False, True, "all"), 260)
    ref = fill_join(jp)
    _, total = join_cuda.chain_table_offsets(jp)
    got = join_fill(jp)
    assert jp.table_bytes() + 4 * total <= join_cuda.HOST_COPY_BYTES
    got._copied[0] = 0
    feasible = np.flatnonzero(np.isfinite(ref.curve))
    assert got.policy(int(feasible[0])) == ref.policy(int(feasible[0]))
    whole = got.copied_bytes
    assert whole >= jp.table_bytes() + 4 * total
    for m in feasible[::5]:
        assert got.policy(int(m)) == ref.policy(int(m)), m
    assert got.copied_bytes == whole
