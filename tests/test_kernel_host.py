"""CI check of the CUDA kernels' arithmetic without a GPU, and that every kernel compiles.

tests/kernel_host/harness.cpp includes kernels/dp_common.cuh (the per-state functions the
kernels call) and emulates the launches of gpusolve.dp.cuda.launch_plan block by block with
the kernels' staging and update functions. Its whole table must equal gpusolve.dp.cpu's bit for
bit, and its device-style recovery must give recover_policy's policy.
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
from gpusolve.dp.recover import recover_policy, table_lookup
from gpusolve.profiles import __file__ as _profiles_init

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "kernels"
HARNESS = ROOT / "tests" / "kernel_host" / "harness.cpp"
PROFILES = Path(_profiles_init).parent


def _host_compiler():
    for name in ("g++", "c++", "clang++"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    compiler = _host_compiler()
    out = tmp_path_factory.mktemp("harness") / "harness"
    if compiler is not None:
        cmd = compiler + ["-O2", "-std=c++14", "-ffp-contract=off", "-Wno-unknown-pragmas", f"-I{KERNELS}",
                          str(HARNESS), "-o", str(out)]
    elif shutil.which("nvcc"):
        cmd = ["nvcc", "-O2", "-x", "c++", f"-I{KERNELS}", str(HARNESS), "-o", str(out)]
    else:
        pytest.skip("no host C++ compiler")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def run_harness(harness: Path, problem: Problem, m_top: int, folder: Path, band: bool = True):
    """Dump ``problem``, run the emulated kernels; returns (table, quads or count)."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = cuda.device_arrays(problem)
    for name, arr in arrays.items():
        np.ascontiguousarray(arr).tofile(folder / f"{name}.bin")
    width = problem.buckets + 1
    (folder / "meta.txt").write_text(
        f"{problem.n} {width} {int(problem.multi_tape)} {problem.bucket_bytes} {m_top}\n")
    (folder / "plan.txt").write_text("".join(f"{k} {a} {b}\n" for k, a, b in cuda.launch_plan(problem.n, band)))
    proc = subprocess.run([str(harness), str(folder)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    table = np.fromfile(folder / "table.bin", dtype=np.float32).reshape(problem.pairs, width)
    rec = np.fromfile(folder / "recover.bin", dtype=np.int32)
    count = int(rec[0])
    quads = rec[1:1 + 4 * count].reshape(count, 4) if count > 0 else count
    return table, quads


def random_chain(rng, n: int, multi_tape: bool) -> Chain:
    def sizes(lo, hi, zero_frac=0.1):
        v = rng.integers(lo, hi, size=n)
        v[rng.random(n) < zero_frac] = 0
        return v

    # Times rounded to few bits, so that ties between candidates happen (tie-break coverage).
    times = lambda scale: np.round(rng.random(n) * scale * 4) / 4  # noqa: E731
    act = sizes(1, 5000)
    return Chain(t_fwd=times(3), t_fwd_nograd=times(3), t_bwd=times(6), act_bytes=act,
                 grad_bytes=np.maximum(act, rng.integers(0, 5000, size=n) * (rng.random(n) < 0.3)),
                 tape_bytes=sizes(1, 9000), fwd_nograd_extra=sizes(0, 2000, 0.5),
                 fwd_grad_extra=sizes(0, 2000, 0.5), bwd_extra=sizes(0, 3000, 0.5),
                 input_bytes=int(rng.integers(0, 5000)), multi_tape=multi_tape)


def assert_same(harness, problem, folder, band=True):
    ref = cpu.solve_table(problem)
    m_top = problem.buckets
    table, quads = run_harness(harness, problem, m_top, folder, band)
    assert table.view(np.uint32).tobytes() == ref.view(np.uint32).tobytes(), _first_diff(problem, table, ref)
    curve = ref[problem.row(0, problem.n)]
    if np.isfinite(curve[m_top]):
        expected = recover_policy(problem, table_lookup(ref), m_top)
        assert not isinstance(quads, int), f"device recovery failed: {quads}"
        assert cuda.policy_from_order(problem, quads) == expected
    else:
        assert quads == -1


def _first_diff(problem, table, ref):
    bad = np.argwhere(table.view(np.uint32) != ref.view(np.uint32))
    r, m = (int(v) for v in bad[0])
    d = int(np.searchsorted(problem.diag_offset, r, side="right") - 1)
    i = r - int(problem.diag_offset[d])
    return f"{len(bad)} states differ; first (i={i}, j={i + d}, m={m}): harness {table[r, m]!r} cpu {ref[r, m]!r}"


@pytest.mark.parametrize("multi_tape", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_random_chains_bit_identical(harness, tmp_path, seed, multi_tape):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 61)) if seed else 45  # seed 0: several bulk bands
    chain = random_chain(rng, n, multi_tape)
    total = int(chain.tape_bytes.sum() + chain.grad_bytes.max() + chain.bwd_extra.max())
    buckets = int(rng.integers(40, 300))
    bucket = max(1, total // int(rng.integers(buckets // 4 + 1, buckets + 1)))
    problem = Problem.build(chain, bucket, buckets)
    assert_same(harness, problem, tmp_path / "band")
    if seed == 0:
        assert_same(harness, problem, tmp_path / "noband", band=False)


def test_thesis_chain_bit_identical(harness, tmp_path):
    rng = np.random.default_rng(7)
    n = 30
    chain = Chain.from_thesis(rng.random(n + 2) * 5, rng.random(n + 2) * 5,
                              rng.integers(1, 20, n + 2), rng.integers(1, 20, n + 2))
    problem = Problem.build(chain, 1, 200)
    assert_same(harness, problem, tmp_path / "thesis")


def test_profile_bit_identical(harness, tmp_path):
    chain = Chain.from_profile(PROFILES / "densenet121_b64.json", fuse_aliasing=False)
    budget = int(chain.tape_bytes.sum() // 3)
    problem = Problem.build(chain, -(-budget // 160), 160)
    assert_same(harness, problem, tmp_path / "densenet")


def test_launch_plan_covers_each_diagonal_once():
    for n in (1, 5, 15, 16, 17, 40, 367):
        for band in (True, False):
            plan = cuda.launch_plan(n, band)
            diags = [a for kind, a, _ in plan if kind == "diag"]
            assert diags == list(range(1, n + 1))
            for idx, (kind, a, b) in enumerate(plan):
                if kind == "bulk":  # its band's diagonals follow, each with band_start = a
                    assert a >= cuda.BAND + 1
                    assert plan[idx + 1:idx + 1 + b] == [("diag", e, a) for e in range(a, a + b)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("source", sorted(p.name for p in KERNELS.glob("*.cu")))
def test_kernels_compile_with_nvcc(tmp_path, source):
    proc = subprocess.run(["nvcc", "-arch=sm_90", "--ptx", f"-I{KERNELS}", str(KERNELS / source),
                           "-o", str(tmp_path / "out.ptx")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_inlined_source_compiles(tmp_path):
    """The single translation unit handed to NVRTC (header inlined) compiles on its own."""
    src = tmp_path / "inlined.cu"
    src.write_text(cuda.kernel_source())
    proc = subprocess.run(["nvcc", "-arch=sm_90", "--ptx", str(src), "-o", str(tmp_path / "out.ptx")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
