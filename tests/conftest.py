"""Shared fixtures; tests marked ``gpu`` are skipped when, and only when, the machine has no CUDA device."""
from __future__ import annotations

import functools
import random
from pathlib import Path

import numpy as np
import pytest

from gpusolve import Chain
from gpusolve.schedule import Checkpoint, Swap, Tape

PROFILES = sorted((Path(__file__).resolve().parent.parent / "gpusolve" / "profiles").glob("*.json"))


@functools.lru_cache(maxsize=1)
def cuda_device_reason() -> str | None:
    """None when the CUDA driver reports a device, else why not.

    Asked of the driver (libcuda) directly, not of CuPy: on a machine with a device, a missing or
    broken CuPy, or kernels that fail to compile or load, must fail the ``gpu`` tests, not skip them.
    """
    import ctypes
    import ctypes.util
    names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda"), "nvcuda.dll"]
    lib = None
    for name in filter(None, names):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return "no CUDA driver (libcuda) on this machine"
    status = lib.cuInit(0)
    if status == 100:  # CUDA_ERROR_NO_DEVICE
        return "the CUDA driver reports no device"
    if status == 34:  # CUDA_ERROR_STUB_LIBRARY: the toolkit's link stub, not a driver
        return "no CUDA driver (only the toolkit's stub libcuda)"
    if status != 0:
        return None  # a device may be there but the driver fails: let the tests show the error
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "the CUDA driver reports no device"
    return None


def pytest_addoption(parser):
    parser.addoption("--gpu-standin", action="store_true",
                     help="rehearse the solvers' gpu tests without a GPU, the CPU DPs standing in for the CUDA "
                          "ones (tests/_gpu_standin.py): checks the tests' own logic, not the kernels")


def pytest_configure(config):
    if config.getoption("--gpu-standin"):
        import _gpu_standin
        _gpu_standin.install()


def pytest_collection_modifyitems(config, items):
    standin = config.getoption("--gpu-standin")
    reason = None
    for item in items:
        if "gpu" not in item.keywords:
            continue
        if standin:
            import _gpu_standin
            why = _gpu_standin.sits_out(item)
        else:
            why = reason = reason or cuda_device_reason()
        if why:
            item.add_marker(pytest.mark.skip(reason=why))


def random_chain(rng: np.random.Generator, n: int, multi_tape: bool = True, scale: int = 20) -> Chain:
    """A random chain with small integer sizes (bytes) and float times (ms). About half the stages
    release part of their tape before their backward (``bwd_tape_bytes`` < ``tape_bytes``), and
    about half the chains reserve bytes for the whole step."""
    def sizes(high=scale):
        return rng.integers(0, high, n)
    tape = sizes() + sizes()
    released = np.where(rng.random(n) < 0.5, rng.integers(0, tape + 1), 0)
    return Chain(t_fwd=rng.random(n), t_fwd_nograd=rng.random(n), t_bwd=rng.random(n),
                 act_bytes=sizes(), grad_bytes=sizes(), tape_bytes=tape, bwd_tape_bytes=tape - released,
                 fwd_nograd_extra=sizes(5), fwd_grad_extra=sizes(5), bwd_extra=sizes(5),
                 input_bytes=int(rng.integers(0, scale)),
                 reserved_bytes=int(rng.integers(0, scale)) if rng.random() < 0.5 else 0, multi_tape=multi_tape)


@pytest.fixture(autouse=True)
def _warnings_shown_afresh():
    """Each test sees its once-per-process warnings (Note [Warnings once per process])."""
    from gpusolve import errors
    errors._SHOWN.clear()
    yield


def random_policy(rng: random.Random, i: int, j: int, p_ckpt: float = 0.5, *, sigma: bool = False,
                  p_swap: float | None = None):
    """A random policy tree over (i, j): every node Tape or Checkpoint(k) at random. With ``p_swap``, the
    offload DP's class: where a_i is a plain checkpoint (``sigma``), Checkpoint(k) is Swap(k) with
    probability ``p_swap``, either prefetch variant. Without it, no random number is drawn for swaps."""
    if j == i + 1:
        return Tape(None)
    if rng.random() < p_ckpt:
        k = rng.randint(i + 1, j - 1)
        right = random_policy(rng, k, j, p_ckpt, sigma=True, p_swap=p_swap)
        if p_swap is not None and sigma and rng.random() < p_swap:
            return Swap(k, right=right, left=random_policy(rng, i, k, p_ckpt, sigma=True, p_swap=p_swap),
                        overlap=rng.random() < 0.5)
        return Checkpoint(k, right=right, left=random_policy(rng, i, k, p_ckpt, sigma=sigma, p_swap=p_swap))
    return Tape(random_policy(rng, i + 1, j, p_ckpt, p_swap=p_swap))


@pytest.fixture
def profiles(monkeypatch):
    """The number of profiles taken (every chain stage profile goes through executor.profile_dict) (torch tests)."""
    import torch_exec.executor as ex
    count = [0]
    real = ex.profile_dict

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(ex, "profile_dict", counted)
    return count
