"""CI check of the CUDA kernels' arithmetic without a GPU, and that every kernel compiles.

tests/kernel_host/harness.cpp includes kernels/dp_common.cuh (the per-state functions the
kernels call) and emulates the launches of gpusolve.dp.cuda.launch_plan block by block with
the kernels' staging and update functions. It is built with the launch geometry of
gpusolve.dp.cuda.Geometry as -D options, exactly what the NVRTC source gets as #defines. Its whole
table must equal gpusolve.dp.cpu's bit for bit, and its emulation of the device's block-parallel
recovery must give recover_policy's policy, on every case.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gpusolve import Chain
from gpusolve.dp import cpu, cuda
from gpusolve.dp.problem import Problem
from gpusolve.dp.recover import choose, recover_policy, table_lookup
from gpusolve.profiles import __file__ as _profiles_init
from _kernel_host import KERNELS, assert_nvcc_compiles, build_harness, dump_arrays, exec_harness, read_stats

PROFILES = Path(_profiles_init).parent

# A geometry unlike the default in every field: other block sizes, buckets per thread, k tiles,
# band width (hence other bulk bands and launch plans), a recovery block of one warp.
OTHER_GEOMETRY = cuda.Geometry(diag_threads=64, diag_mpt=3, ktile=5, band=4, bulk_threads=64, bulk_ktile=3,
                               rec_threads=32)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return build_harness("harness.cpp", tmp_path_factory.mktemp("harness"), cuda.GEOMETRY)


@pytest.fixture(scope="module")
def other_harness(tmp_path_factory):
    return build_harness("harness.cpp", tmp_path_factory.mktemp("harness_other"), OTHER_GEOMETRY)


def run_harness(harness: Path, problem: Problem, m_top: int, folder: Path, band: bool = True,
                geometry: cuda.Geometry | None = None, states=None):
    """Dump ``problem``, run the emulated kernels; returns (table with the sentinel row, quads or
    count, stats), and with ``states`` ((i, j, m) rows) also the recovery block's choice at each."""
    folder.mkdir(parents=True, exist_ok=True)
    if states is not None:
        (folder / "states.txt").write_text("".join(f"{i} {j} {m}\n" for i, j, m in states))
    arrays = cuda.device_arrays(problem)
    dump_arrays(folder, arrays)
    width = problem.buckets + 1
    (folder / "meta.txt").write_text(
        f"{problem.n} {width} {int(problem.multi_tape)} {problem.bucket_bytes} {m_top}\n")
    plan = cuda.launch_plan(problem.n, band, geometry)
    (folder / "plan.txt").write_text("".join(f"{k} {a} {b}\n" for k, a, b in plan))
    exec_harness(harness, folder)
    table = np.fromfile(folder / "table.bin", dtype=np.float32).reshape(problem.pairs + 1, width)
    rec = np.fromfile(folder / "recover.bin", dtype=np.int32)
    count = int(rec[0])
    quads = rec[1:1 + 4 * count].reshape(count, 4) if count > 0 else count
    stats = read_stats(folder)
    if states is not None:
        return table, quads, stats, np.fromfile(folder / "choices.bin", dtype=np.int32)
    return table, quads, stats


def random_chain(rng, n: int, multi_tape: bool) -> Chain:
    def sizes(lo, hi, zero_frac=0.1):
        v = rng.integers(lo, hi, size=n)
        v[rng.random(n) < zero_frac] = 0
        return v

    # Times rounded to few bits, so that ties between candidates happen (tie-break coverage).
    times = lambda scale: np.round(rng.random(n) * scale * 4) / 4  # noqa: E731
    act = sizes(1, 5000)
    tape = sizes(1, 9000)
    released = np.where(rng.random(n) < 0.5, rng.integers(0, tape + 1), 0)  # bwd_tape_bytes < tape_bytes
    return Chain(t_fwd=times(3), t_fwd_nograd=times(3), t_bwd=times(6), act_bytes=act,
                 grad_bytes=np.maximum(act, rng.integers(0, 5000, size=n) * (rng.random(n) < 0.3)),
                 tape_bytes=tape, bwd_tape_bytes=tape - released, fwd_nograd_extra=sizes(0, 2000, 0.5),
                 fwd_grad_extra=sizes(0, 2000, 0.5), bwd_extra=sizes(0, 3000, 0.5),
                 input_bytes=int(rng.integers(0, 5000)), reserved_bytes=int(rng.integers(0, 3000)),
                 multi_tape=multi_tape)


def binding_chain(rng, n: int, multi_tape: bool) -> Chain:
    """Large no-grad workspaces on some stages, small forward-with-grad ones: the checkpoint
    thresholds then bind where both sub-problems are feasible (in random_chain they never do)."""
    c = random_chain(rng, n, multi_tape)
    extra = np.where(rng.random(n) < 0.3, rng.integers(5000, 30000, size=n), 0)
    return Chain(t_fwd=c.t_fwd, t_fwd_nograd=c.t_fwd_nograd, t_bwd=c.t_bwd, act_bytes=c.act_bytes,
                 grad_bytes=c.grad_bytes, tape_bytes=c.tape_bytes, fwd_nograd_extra=extra,
                 fwd_grad_extra=c.fwd_grad_extra // 4, bwd_extra=c.bwd_extra, input_bytes=c.input_bytes,
                 multi_tape=multi_tape)


def assert_same(harness, problem, folder, band=True, geometry=None, m_tops=None):
    """Table bit-identical to the CPU's (sentinel row still +inf) and, at every m_top, the device
    recovery's policy identical to recover_policy's. Returns the harness stats."""
    ref = cpu.solve_table(problem)
    m_tops = [problem.buckets] if m_tops is None else m_tops
    stats = None
    for idx, m_top in enumerate(m_tops):
        table, quads, stats_m = run_harness(harness, problem, m_top, folder / str(idx), band, geometry)
        stats = stats or stats_m
        if idx == 0:
            assert table[:-1].view(np.uint32).tobytes() == ref.view(np.uint32).tobytes(), \
                _first_diff(problem, table[:-1], ref)
            assert np.all(table[-1] == np.inf), "the sentinel row was written"
        curve = ref[problem.row(0, problem.n)]
        if np.isfinite(curve[m_top]):
            expected = recover_policy(problem, table_lookup(ref), m_top)
            assert not isinstance(quads, int), f"device recovery failed at m = {m_top}: {quads}"
            assert cuda.policy_from_order(problem, quads) == expected, f"policies differ at m = {m_top}"
        else:
            assert quads == -1
    return stats


def recovery_points(problem, ref_curve=None, count=4) -> list[int]:
    """m_top values for the recovery check: the top bucket and a few feasible ones below."""
    curve = cpu.solve_table(problem)[problem.row(0, problem.n)] if ref_curve is None else ref_curve
    feasible = np.flatnonzero(np.isfinite(curve))
    picks = [problem.buckets]
    if len(feasible):
        picks += [int(v) for v in np.linspace(feasible[0], problem.buckets, count)[:-1]]
    return sorted(set(picks))


def _first_diff(problem, table, ref):
    bad = np.argwhere(table.view(np.uint32) != ref.view(np.uint32))
    r, m = (int(v) for v in bad[0])
    d = int(np.searchsorted(problem.diag_offset, r, side="right") - 1)
    i = r - int(problem.diag_offset[d])
    return f"{len(bad)} states differ; first (i={i}, j={i + d}, m={m}): harness {table[r, m]!r} cpu {ref[r, m]!r}"


def random_problem(seed: int, multi_tape: bool) -> Problem:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 61)) if seed else 45  # seed 0: several bulk bands
    chain = random_chain(rng, n, multi_tape)
    total = int(chain.tape_bytes.sum() + chain.grad_bytes.max() + chain.bwd_extra.max())
    buckets = int(rng.integers(40, 300))
    bucket = max(1, total // int(rng.integers(buckets // 4 + 1, buckets + 1)))
    return Problem.build(chain, bucket, buckets)


@pytest.mark.parametrize("multi_tape", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_random_chains_bit_identical(harness, tmp_path, seed, multi_tape):
    problem = random_problem(seed, multi_tape)
    assert_same(harness, problem, tmp_path / "band", m_tops=recovery_points(problem))
    if seed == 0:
        assert_same(harness, problem, tmp_path / "noband", band=False)


@pytest.mark.parametrize("multi_tape", [True, False])
@pytest.mark.parametrize("seed", [0, 3])
def test_other_geometry_bit_identical(other_harness, tmp_path, seed, multi_tape):
    """Geometry injection: a harness built with other -D values, launched with the plan and grid
    Python derives from the same Geometry, still equals NumPy bit for bit."""
    problem = random_problem(seed, multi_tape)
    stats = assert_same(other_harness, problem, tmp_path / "band", geometry=OTHER_GEOMETRY,
                        m_tops=recovery_points(problem))
    if seed == 0:
        assert stats["bulk_tiles_unchecked"] + stats["bulk_tiles_checked"] > 0  # band 4: bulk from d = 8
        assert_same(other_harness, problem, tmp_path / "noband", band=False, geometry=OTHER_GEOMETRY)


@pytest.mark.parametrize("multi_tape", [True, False])
@pytest.mark.parametrize("other", [False, True], ids=["default", "other_geometry"])
def test_binding_thresholds_bit_identical(harness, other_harness, tmp_path, multi_tape, other):
    """Checkpoint thresholds that bind where the candidate is finite: every threshold test of the
    kernels (dp_diag, dp_bulk's checked tiles, recovery) decides values here."""
    rng = np.random.default_rng(500 + multi_tape)
    chain = binding_chain(rng, 40, multi_tape)
    total = int(chain.tape_bytes.sum() + chain.grad_bytes.max() + chain.bwd_extra.max())
    problem = Problem.build(chain, max(1, total // 150), 150)
    geometry = OTHER_GEOMETRY if other else None
    stats = assert_same(other_harness if other else harness, problem, tmp_path / "binding", geometry=geometry,
                        m_tops=recovery_points(problem))
    assert stats["bulk_tiles_checked"] > 0
    # The recovery block's choice, state by state, where a threshold decides it and at random states.
    ref = cpu.solve_table(problem)
    states = threshold_decided_states(problem, ref)
    if multi_tape:
        assert len(states) > 0
    rng = np.random.default_rng(3)
    i = rng.integers(0, problem.n, 300)
    j = np.minimum(i + 1 + rng.integers(0, problem.n, 300), problem.n)
    states = np.concatenate([states, np.stack([i, j, rng.integers(0, problem.buckets + 1, 300)], axis=1)])
    *_, choices = run_harness(other_harness if other else harness, problem, problem.buckets, tmp_path / "choose",
                              geometry=geometry, states=states)
    assert choices.tolist() == [_choose(problem, ref, *(int(v) for v in s)) for s in states]


@pytest.mark.parametrize("other", [False, True], ids=["default", "other_geometry"])
def test_uniform_chain_ties(harness, other_harness, tmp_path, other):
    """Identical stages: many checkpoints tie exactly, also within one recovery thread's share
    (k and k + 32 with a 32-thread block); the smallest k must win everywhere. Thesis mode, so that
    the tape (which wins ties) does not decide these states."""
    n = 75
    one = np.ones(n)
    chain = Chain(t_fwd=one, t_fwd_nograd=one, t_bwd=2 * one, act_bytes=100 * one.astype(int),
                  grad_bytes=100 * one.astype(int), tape_bytes=150 * one.astype(int),
                  fwd_nograd_extra=np.zeros(n, int), fwd_grad_extra=np.zeros(n, int), bwd_extra=np.zeros(n, int),
                  input_bytes=100, multi_tape=False)  # no tape beyond j = i + 1: checkpoints decide
    problem = Problem.build(chain, 50, 160)
    geometry = OTHER_GEOMETRY if other else None
    h = other_harness if other else harness
    assert_same(h, problem, tmp_path / "uniform", geometry=geometry, m_tops=recovery_points(problem, count=6))
    ref = cpu.solve_table(problem)
    states = same_thread_tie_states(problem, ref, (geometry or cuda.GEOMETRY).rec_threads)
    if other:
        assert len(states) > 20
    *_, choices = run_harness(h, problem, problem.buckets, tmp_path / "choose", geometry=geometry, states=states)
    expected = [_choose(problem, ref, *(int(v) for v in s)) for s in states]
    assert choices.tolist() == expected
    if other:
        assert sum(c > 0 for c in expected) > 20


def _choose(problem, ref, i, j, m) -> int:
    try:
        return choose(problem, table_lookup(ref), i, j, m)
    except ValueError:
        return -1


def same_thread_tie_states(problem: Problem, ref: np.ndarray, threads: int) -> np.ndarray:
    """(i, j, m) rows where the least allowed checkpoint value is reached by the smallest such k
    and by k + threads x (x >= 1): one recovery thread sees both (a tie inside its own share)."""
    m = np.arange(problem.buckets + 1)
    rows = []
    for d in range(threads + 2, problem.n + 1):
        for i in range(problem.n + 1 - d):
            j = i + d
            ks = np.arange(i + 1, j)
            shift = np.maximum(m[None, :] - problem.act_b[ks][:, None], 0)
            v = (problem.sfn(i, ks)[:, None] + np.take_along_axis(ref[problem.row(ks, j)], shift, 1)) + ref[problem.row(i, ks)]
            v = np.where(m[None, :] >= problem.thr_ckpt(i, j, ks)[:, None], v, np.inf)
            least = v.min(axis=0)
            for mm in np.flatnonzero(np.isfinite(least)):
                w = np.flatnonzero(v[:, mm] == least[mm])
                if np.any((w[1:] - w[0]) % threads == 0):
                    rows.append((i, j, int(mm)))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def threshold_decided_states(problem: Problem, ref: np.ndarray) -> np.ndarray:
    """(i, j, m) rows where ignoring the checkpoint thresholds would pick a strictly better value."""
    m = np.arange(problem.buckets + 1)
    rows = []
    for d in range(2, problem.n + 1):
        for i in range(problem.n + 1 - d):
            j = i + d
            ks = np.arange(i + 1, j)
            shift = np.maximum(m[None, :] - problem.act_b[ks][:, None], 0)
            v = (problem.sfn(i, ks)[:, None] + np.take_along_axis(ref[problem.row(ks, j)], shift, 1)) + ref[problem.row(i, ks)]
            v[m[None, :] < problem.act_b[ks][:, None]] = np.inf
            allowed = np.where(m[None, :] >= problem.thr_ckpt(i, j, ks)[:, None], v, np.inf).min(axis=0)
            for mm in np.flatnonzero(v.min(axis=0) < allowed):
                rows.append((i, j, int(mm)))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def test_thesis_chain_bit_identical(harness, tmp_path):
    rng = np.random.default_rng(7)
    n = 30
    chain = Chain.from_thesis(rng.random(n + 2) * 5, rng.random(n + 2) * 5,
                              rng.integers(1, 20, n + 2), rng.integers(1, 20, n + 2))
    problem = Problem.build(chain, 1, 200)
    assert_same(harness, problem, tmp_path / "thesis", m_tops=recovery_points(problem))


def test_profile_bit_identical_both_bulk_paths(harness, tmp_path):
    """A real profile with several bands: both dp_bulk paths run (tiles whose thresholds all pass
    at the block's least bucket, and checked tiles), and the table and policies still match."""
    chain = Chain.from_profile(PROFILES / "densenet121_b64.json", fuse_aliasing=False)
    budget = int(chain.tape_bytes.sum() // 3)
    problem = Problem.build(chain, -(-budget // 600), 600)
    stats = assert_same(harness, problem, tmp_path / "densenet", m_tops=recovery_points(problem))
    assert stats["bulk_tiles_unchecked"] > 0 and stats["bulk_tiles_checked"] > 0, stats


def test_profile_other_geometry(other_harness, tmp_path):
    chain = Chain.from_profile(PROFILES / "densenet121_b64.json", fuse_aliasing=False)
    budget = int(chain.tape_bytes.sum() // 3)
    problem = Problem.build(chain, -(-budget // 160), 160)
    assert_same(other_harness, problem, tmp_path / "densenet", geometry=OTHER_GEOMETRY)


def test_launch_plan_covers_each_diagonal_once():
    for geometry in (cuda.GEOMETRY, OTHER_GEOMETRY):
        for n in (1, 5, 15, 16, 17, 40, 367):
            for band in (True, False):
                plan = cuda.launch_plan(n, band, geometry)
                diags = [a for kind, a, _ in plan if kind == "diag"]
                assert diags == list(range(1, n + 1))
                for idx, (kind, a, b) in enumerate(plan):
                    if kind == "bulk":  # its band's diagonals follow, each with band_start = a
                        assert a >= geometry.first_band and b <= geometry.band
                        assert plan[idx + 1:idx + 1 + b] == [("diag", e, a) for e in range(a, a + b)]


def test_geometry_reaches_the_source():
    """The NVRTC source starts with the geometry's #defines, which the header's #ifndef defaults yield to."""
    source = cuda.kernel_source(OTHER_GEOMETRY)
    head = source[:source.index("// Per-state arithmetic")]
    for name, value in OTHER_GEOMETRY.defines().items():
        assert f"#define {name} {value}\n" in head
        assert f"#ifndef {name}\n" in source
    with pytest.raises(ValueError, match="multiple of 32"):
        cuda.Geometry(bulk_threads=100)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("source", sorted(p.name for p in KERNELS.glob("*.cu")))
def test_kernels_compile_with_nvcc(tmp_path, source):
    proc = subprocess.run(["nvcc", "-arch=sm_90", "--ptx", f"-I{KERNELS}", str(KERNELS / source),
                           "-o", str(tmp_path / "out.ptx")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("geometry", [cuda.GEOMETRY, OTHER_GEOMETRY], ids=["default", "other"])
def test_inlined_source_compiles(tmp_path, geometry):
    """The single translation unit handed to NVRTC (geometry defined, header inlined) compiles on its own."""
    assert_nvcc_compiles(tmp_path, cuda.kernel_source(geometry))
