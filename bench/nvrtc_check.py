"""Compile the CUDA kernels with NVRTC exactly as ``cupy.RawModule`` does at run time, without a GPU.

    python bench/nvrtc_check.py [--arch 90] [--geometry default|all]

``cupy.RawModule(code=..., options=COMPILE_OPTIONS)`` compiles through
``cupy._core.core.compile_with_cache`` (which adds CuPy's include paths) and
``cupy.cuda.compiler._compile_with_cache_cuda`` (which adds ``-ftz=true``, the arch and
``--device-as-default-execution-space``, and caches the binary). This script calls that same
``compile_with_cache`` with three things stubbed, because there is no device: the device's compute
capability (``_get_arch``: sm_90 by default, an H100), CuPy's per-device memoization of the arch
option, and the module load (the cubin is captured instead of loaded). The kernel cache goes to a
fresh temporary folder (CuPy's disk cache backend), so NVRTC really runs. It needs ``cupy-cuda13x`` and the NVRTC wheel
(``nvidia-cuda-nvrtc``), which install without a GPU.

It fails (exit 1, one line per problem) on a compile error, any NVRTC log output (warnings), a
kernel of ``gpusolve.dp.cuda.KERNEL_NAMES`` missing from the cubin, a register spill or a stack
frame, or registers in the cubin that disagree with ptxas' own report; it prints registers per
kernel. The ptxas report comes from a second NVRTC compile with the same options plus
``--ptxas-options=-v`` (whose log is the report).

Note: CuPy 14.2's ``nvrtc.getCUBIN`` returns the cubin without its last byte (a zero of the ELF
program header table); the driver loads it regardless. :func:`full_cubin` restores the length
the ELF headers give, for the disassembler.
"""
from __future__ import annotations

import argparse
import io
import re
import struct
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpusolve.dp import cuda  # noqa: E402

DEFAULT_ARCH = "90"


class CompileResult:
    def __init__(self, cubin: bytes, log: str, options: tuple, report: str):
        self.cubin = cubin          # as CuPy would load it, padded to its ELF length (full_cubin)
        self.log = log              # NVRTC's log of the CuPy compile (empty when clean)
        self.options = options      # the NVRTC options CuPy passed
        self.report = report        # ptxas -v report of the same compile


def compile_like_rawmodule(source: str, options: tuple = cuda.COMPILE_OPTIONS, arch: str = DEFAULT_ARCH) -> CompileResult:
    """(cubin, NVRTC log, options) of ``cupy.RawModule(code=source, options=options)`` on an sm_<arch>
    device, through CuPy's own compile path with the device query and the module load stubbed."""
    import cupy
    from cupy.cuda import compiler, function

    if compiler._use_ptx:
        raise SystemExit("nvrtc_check: CUPY_COMPILE_WITH_PTX is set; unset it to check the cubin CuPy builds")
    captured: dict = {}

    class CapturingModule(function.Module):
        def load(self, cubin):  # the real one loads into the current CUDA context
            captured["cubin"] = bytes(cubin)

    calls: list = []
    real_compile = compiler._NVRTCProgram.compile

    def recording_compile(self, opts=(), log_stream=None):
        calls.append((tuple(opts), self.method))
        return real_compile(self, opts, log_stream)

    def arch_option(arch_=None):  # _get_arch_for_options_for_nvrtc without the per-device memo
        arch_ = arch_ or arch
        if not compiler._use_ptx and int(arch_) <= int(compiler._get_max_compute_capability()):
            return f"-arch=sm_{arch_}", "cubin"
        return f"-arch=compute_{arch_}", "ptx"

    saved = (compiler._get_arch, compiler._get_arch_for_options_for_nvrtc, compiler.function,
             compiler._NVRTCProgram.compile, compiler._kernel_cache_backend)
    # A fresh disk cache, so that NVRTC really runs (CuPy's default backend, another folder), removed after.
    cache_dir = tempfile.TemporaryDirectory(prefix="gpusolve-nvrtc-")
    compiler._set_kernel_cache_backend(compiler._DiskKernelCacheBackend(cache_dir.name))
    compiler._get_arch = lambda: arch
    compiler._get_arch_for_options_for_nvrtc = arch_option
    compiler.function = types.SimpleNamespace(Module=CapturingModule, LinkState=function.LinkState)
    compiler._NVRTCProgram.compile = recording_compile
    log = io.StringIO()
    try:
        # What cupy/_core/raw.pyx's _get_raw_module calls for RawModule(code=..., options=...).
        cupy._core.core.compile_with_cache(source, tuple(options), prepend_cupy_headers=False, backend="nvrtc",
                                           translate_cucomplex=False, enable_cooperative_groups=False,
                                           name_expressions=None, log_stream=log, jitify=False)
    finally:
        (compiler._get_arch, compiler._get_arch_for_options_for_nvrtc, compiler.function,
         compiler._NVRTCProgram.compile, cache) = saved
        compiler._set_kernel_cache_backend(cache)
        cache_dir.cleanup()
    final = [c for c in calls if c[1] == "cubin"]
    if "cubin" not in captured or not final:
        raise SystemExit("nvrtc_check: CuPy produced no cubin (was the kernel cache hit?)")
    used = final[-1][0]
    return CompileResult(full_cubin(captured["cubin"]), log.getvalue(), used, ptxas_report(source, used))


def ptxas_report(source: str, options: tuple) -> str:
    """ptxas' -v report of an NVRTC compile of ``source`` with ``options`` (CuPy's binding)."""
    from cupy_backends.cuda.libs import nvrtc
    prog = nvrtc.createProgram(source, "dp.cu", (), ())
    try:
        nvrtc.compileProgram(prog, tuple(options) + ("--ptxas-options=-v",))
        return nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


# ---------------------------------------------------------------------------- cubin (ELF64) reading
def _sections(cubin: bytes):
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + idx * shentsize) for idx in range(shnum)]
    names_off = raw[shstrndx][4]

    def cstr(offset):
        end = cubin.index(b"\0", offset)
        return cubin[offset:end].decode()

    return [dict(name=cstr(names_off + s[0]), type=s[1], offset=s[4], size=s[5], link=s[6], info=s[7],
                 entsize=s[9]) for s in raw]


def full_cubin(cubin: bytes) -> bytes:
    """``cubin`` padded with zeros to the length its ELF headers give (see the module note)."""
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    end = max([end] + [s["offset"] + s["size"] for s in _sections(cubin) if s["type"] != 8])  # 8: NOBITS
    return cubin + b"\0" * max(0, end - len(cubin))


def cubin_kernels(cubin: bytes) -> dict[str, dict]:
    """Kernel entry points of a cubin: name -> {"registers", "frame"} from the .nv.info attributes
    EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11), each (symbol index, value)."""
    sections = _sections(cubin)
    names = {}
    for sec in sections:
        if sec["type"] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sec["link"]]
        for index, off in enumerate(range(sec["offset"], sec["offset"] + sec["size"], sec["entsize"])):
            st_name, st_info = struct.unpack_from("<IB", cubin, off)
            if st_info & 0xF == 2 and st_info >> 4 == 1:  # STT_FUNC, STB_GLOBAL
                end = cubin.index(b"\0", strtab["offset"] + st_name)
                names[index] = cubin[strtab["offset"] + st_name:end].decode()
    attrs: dict[int, dict] = {}
    for sec in sections:
        if sec["name"] != ".nv.info":
            continue
        off, end = sec["offset"], sec["offset"] + sec["size"]
        while off < end:
            fmt, attr = cubin[off], cubin[off + 1]
            if fmt != 4:  # EIFMT_SVAL: u16 size, then the payload; NVAL (1) is 2 bytes, BVAL/HVAL 4
                off += 2 if fmt == 1 else 4
                continue
            size, = struct.unpack_from("<H", cubin, off + 2)
            if attr in (0x2F, 0x11) and size == 8:
                sym, value = struct.unpack_from("<II", cubin, off + 4)
                attrs.setdefault(sym, {})["registers" if attr == 0x2F else "frame"] = value
            off += 4 + size
    return {name: {"registers": attrs.get(idx, {}).get("registers"), "frame": attrs.get(idx, {}).get("frame", 0)}
            for idx, name in names.items()}


def parse_report(report: str) -> dict[str, dict]:
    """ptxas -v report -> kernel -> registers, stack frame, spill store/load bytes."""
    out: dict[str, dict] = {}
    current = None
    for line in report.splitlines():
        m = re.search(r"Function properties for (\w+)", line)
        if m:
            current = out.setdefault(m.group(1), {})
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current is not None:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = out.setdefault(m.group(1), {})
        m = re.search(r"Used (\d+) registers", line)
        if m and current is not None:
            current["registers"] = int(m.group(1))
    return out


def check(result: CompileResult, label: str) -> list[str]:
    """Problems with one compile (empty when it passes); prints registers per kernel."""
    problems = []
    if result.log.strip():
        problems.append(f"{label}: NVRTC printed a log (a warning or remark): {' | '.join(result.log.strip().splitlines()[:6])}")
    kernels = cubin_kernels(result.cubin)
    report = parse_report(result.report)
    for name in cuda.KERNEL_NAMES:
        if name not in kernels:
            problems.append(f"{label}: kernel {name} is missing from the cubin (has {sorted(kernels)})")
            continue
        info = report.get(name, {})
        regs = kernels[name]["registers"]
        spill = info.get("spill_stores", -1) + info.get("spill_loads", -1)
        print(f"{label}: {name}: {regs} registers, {info.get('stack', '?')} B stack frame, "
              f"{info.get('spill_stores', '?')} B spill stores, {info.get('spill_loads', '?')} B spill loads")
        if not info:
            problems.append(f"{label}: ptxas printed no report for {name}")
        elif spill != 0 or info.get("stack", 0) != 0 or kernels[name]["frame"]:
            problems.append(f"{label}: {name} spills ({info['spill_stores']} B stores, {info['spill_loads']} B loads, "
                            f"{info['stack']} B stack frame)")
        elif info.get("registers") != regs:
            problems.append(f"{label}: {name}: cubin says {regs} registers, ptxas {info.get('registers')}")
    return problems


def geometries(which: str) -> list[tuple[str, cuda.Geometry]]:
    out = [("default", cuda.GEOMETRY)]
    if which == "all":  # the host harness's second geometry, plus a wider band
        out += [("small", cuda.Geometry(diag_threads=64, diag_mpt=3, ktile=5, band=4, bulk_threads=64, bulk_ktile=3,
                                        rec_threads=32)),
                ("wide", cuda.Geometry(diag_threads=256, diag_mpt=2, ktile=64, band=8, bulk_threads=256,
                                       bulk_ktile=4, rec_threads=1024))]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default=DEFAULT_ARCH, help="compute capability CuPy would see (default 90: H100)")
    parser.add_argument("--geometry", choices=["default", "all"], default="default")
    args = parser.parse_args(argv)
    import cupy
    from cupy.cuda import compiler
    major, minor = compiler._get_nvrtc_version()
    print(f"CuPy {cupy.__version__}, NVRTC {major}.{minor}, arch sm_{args.arch}")
    problems = []
    for label, geometry in geometries(args.geometry):
        try:
            result = compile_like_rawmodule(cuda.kernel_source(geometry), cuda.COMPILE_OPTIONS, args.arch)
        except Exception as err:  # CompileException carries NVRTC's log
            problems.append(f"{label}: NVRTC failed: {type(err).__name__}: {' | '.join(str(err).strip().splitlines()[:8])}")
            continue
        print(f"{label}: NVRTC options: {' '.join(o for o in result.options if not o.startswith('-I'))}")
        problems += check(result, label)
    for line in problems:
        print(f"FAIL {line}", file=sys.stderr)
    print("nvrtc_check: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
