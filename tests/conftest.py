"""Shared fixtures; tests marked ``gpu`` are skipped cleanly when no CUDA device is usable."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from gpusolve import Chain

PROFILES = sorted((Path(__file__).resolve().parent.parent / "gpusolve" / "profiles").glob("*.json"))


@functools.lru_cache(maxsize=1)
def cuda_device_reason() -> str | None:
    """None when a CUDA device is usable through CuPy, else why not."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # ImportError, CUDARuntimeError without a driver
        return f"no CUDA device via CuPy ({type(err).__name__}: {err})"
    return None if count > 0 else "CuPy sees no CUDA device"


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or cuda_device_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def random_chain(rng: np.random.Generator, n: int, multi_tape: bool = True, scale: int = 20) -> Chain:
    """A random chain with small integer sizes (bytes) and float times (ms)."""
    def sizes(high=scale):
        return rng.integers(0, high, n)
    return Chain(t_fwd=rng.random(n), t_fwd_nograd=rng.random(n), t_bwd=rng.random(n),
                 act_bytes=sizes(), grad_bytes=sizes(), tape_bytes=sizes() + sizes(),
                 fwd_nograd_extra=sizes(5), fwd_grad_extra=sizes(5), bwd_extra=sizes(5),
                 input_bytes=int(rng.integers(0, scale)), multi_tape=multi_tape)
