"""What the kernel host tests share (tests/test_kernel_host.py, test_join_kernel_host.py,
test_offload_kernel_host.py): building a host harness of tests/kernel_host/ with a launch geometry's
-D options (what the NVRTC source gets as #defines) and running it, the NVRTC and nvcc compile
checks of a backend's NVRTC source, the parse of a kernel's parameter list, the check that a backend
module imports without CuPy, and a stand-in for device memory.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "kernels"
HARNESSES = ROOT / "tests" / "kernel_host"
# C parameter types of the kernels' arrays -> the NumPy dtypes the backends upload.
C_TYPES = {"float*": np.float32, "double*": np.float64, "int*": np.int32, "long long*": np.int64}


# ---------------------------------------------------------------------------- harness
def host_compiler() -> str | None:
    """The first host C++ compiler on PATH (g++, c++, clang++), or None."""
    return next((shutil.which(n) for n in ("g++", "c++", "clang++") if shutil.which(n)), None)


def build_harness(harness: str, folder: Path, geometry) -> Path:
    """Build tests/kernel_host/``harness`` (a .cpp) into ``folder`` with ``geometry.defines()`` as -D
    options, without warnings, and check that the binary reports (``--geometry``) the geometry
    Python launches with. Skips the test without a host C++ compiler (or nvcc)."""
    compiler = host_compiler()
    out = folder / Path(harness).stem
    defines = [f"-D{name}={value}" for name, value in geometry.defines().items()]
    if compiler is not None:
        cmd = [compiler, "-O2", "-std=c++14", "-ffp-contract=off", "-Wall", "-Wno-unknown-pragmas", *defines,
               f"-I{KERNELS}", str(HARNESSES / harness), "-o", str(out)]
    elif shutil.which("nvcc"):
        cmd = ["nvcc", "-O2", "-x", "c++", *defines, f"-I{KERNELS}", str(HARNESSES / harness), "-o", str(out)]
    else:
        pytest.skip("no host C++ compiler")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
    shown = subprocess.run([str(out), "--geometry"], capture_output=True, text=True, check=True).stdout.split()
    assert dict(item.split("=") for item in shown) == {k: str(v) for k, v in geometry.defines().items()}
    return out


def dump_arrays(folder: Path, arrays: dict, names=None) -> None:
    """``arrays[name]`` for each of ``names`` (default: all) as the raw little-endian ``folder/<name>.bin``
    the harnesses read."""
    for name in arrays if names is None else names:
        np.ascontiguousarray(arrays[name]).tofile(folder / f"{name}.bin")


def exec_harness(harness: Path, folder: Path) -> None:
    """Run a built harness on the inputs written to ``folder``; it must succeed."""
    proc = subprocess.run([str(harness), str(folder)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def read_stats(folder: Path) -> dict[str, int]:
    """``folder/stats.txt`` ("name value" per line) as a dict."""
    return {k: int(v) for k, v in (line.split() for line in (folder / "stats.txt").read_text().splitlines())}


# ---------------------------------------------------------------------------- compilation
def nvrtc_check():
    """bench/nvrtc_check.py (CuPy's own compile path, no device needed), or None without CuPy/NVRTC."""
    if importlib.util.find_spec("cupy") is None:
        return None
    spec = importlib.util.spec_from_file_location("nvrtc_check", ROOT / "bench" / "nvrtc_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        from cupy.cuda import compiler
        compiler._get_nvrtc_version()
    except Exception:
        return None
    return module


def assert_nvrtc_compiles(source: str, options, kernel: str) -> None:
    """``source`` compiles with NVRTC exactly as cupy.RawModule compiles it at run time (sm_90), with
    no log output, ``kernel`` in the cubin, and no register spill or stack frame. Skips without
    CuPy's NVRTC."""
    check = nvrtc_check()
    if check is None:
        pytest.skip("CuPy with NVRTC not installed")
    result = check.compile_like_rawmodule(source, options)
    assert not result.log.strip(), result.log
    kernels = check.cubin_kernels(result.cubin)
    assert kernel in kernels, sorted(kernels)
    info = check.parse_report(result.report)[kernel]
    assert info["spill_stores"] == info["spill_loads"] == info["stack"] == 0, info
    assert kernels[kernel]["frame"] == 0 and info["registers"] == kernels[kernel]["registers"]


def assert_nvcc_compiles(folder: Path, source: str, name: str = "inlined.cu") -> None:
    """``source`` (a backend's single NVRTC translation unit) compiles with nvcc on its own (sm_90,
    PTX), without warnings. The caller skips where nvcc is missing."""
    src = folder / name
    src.write_text(source)
    proc = subprocess.run(["nvcc", "-arch=sm_90", "--ptx", str(src), "-o", str(folder / "out.ptx")],
                          capture_output=True, text=True, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr


def kernel_params(source_file: str, kernel: str) -> list[tuple[str, str]]:
    """(C type, name) of each parameter of ``kernel`` in kernels/``source_file``, qualifiers
    (``const``, ``__restrict__``) dropped, pointers written ``T*``."""
    source = (KERNELS / source_file).read_text()
    params = source[source.index(f"{kernel}("):]
    params = params[len(f"{kernel}("):params.index(")")]
    decls = [" ".join(p.replace("__restrict__", "").replace("const", "").split()).rsplit(" ", 1)
             for p in params.split(",")]
    return [(t.replace(" *", "*"), name) for t, name in decls]


# ---------------------------------------------------------------------------- host side of a backend
def assert_imports_without_cupy(package: str) -> None:
    """``package``.cuda's plain parts must not import CuPy (CI machines without it): in a process
    where importing CuPy fails, the module imports, gives its kernel source, and its
    ``ensure_available()`` raises BackendUnavailableError naming CuPy."""
    code = ("import sys, builtins\n"
            "real = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    if name.split('.')[0] == 'cupy': raise ImportError('no cupy here')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            f"from {package} import cuda\n"
            "cuda.kernel_source(); print('ok')\n"
            "try:\n"
            "    cuda.ensure_available()\n"
            "except cuda.BackendUnavailableError as err:\n"
            "    print('unavailable:', err)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok\nunavailable:") and "CuPy" in proc.stdout, proc.stdout


class HostArray(np.ndarray):
    """A NumPy array with CuPy's ``get()``: stands in for device memory in the backends' device tables."""

    def get(self):
        return np.array(self)

    def set(self, arr):
        self[...] = arr


def fake_cupy():
    """A ``cupy`` module with only ``asarray`` (NumPy's): enough for the device tables' reads of
    :class:`HostArray` memory. Put it in ``sys.modules["cupy"]`` for the test's duration."""
    fake = type(sys)("cupy")
    fake.asarray = np.asarray
    return fake
