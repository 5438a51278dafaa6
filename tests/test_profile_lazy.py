"""Note [Lazy workspaces] in torch_exec/profiler.py: memory a stage allocates on its first forward or
its first backward and keeps (as cuBLAS keeps a workspace per handle, and the autograd engine's
backward thread has handles of its own) is allocated before the memory pass, so no reading counts it.

On the CPU the memory meter reads the CPU allocator, so a stage that keeps a buffer from its first
call plays the library's part; with the memory pass first (the code before the note), the first
stage's ``x`` read the forward's buffer and its backward readings the backward's.
"""
from __future__ import annotations

import warnings

import pytest
torch = pytest.importorskip("torch")  # the suite runs without torch: these tests skip
from torch import nn

from torch_exec.profiler import CPUTimingWarning, profile_dict

KEPT = 1 << 20  # bytes each lazy buffer keeps: far above every reading of the tiny stages


class _LazyScale(torch.autograd.Function):
    """y = 2 x, allocating and keeping a buffer of KEPT bytes in its first forward and in its first
    backward (into ``store``)."""

    @staticmethod
    def forward(ctx, x, store):
        ctx.store = store
        if "fwd" not in store:
            store["fwd"] = torch.ones(KEPT // 4)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        if "bwd" not in ctx.store:
            ctx.store["bwd"] = torch.ones(KEPT // 4)
        return g * 2, None


class Lazy(nn.Module):
    def __init__(self, lazy: bool):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        # not lazy: the buffers exist before the first call (the same stage, warm)
        self.store: dict = {} if lazy else {"fwd": torch.ones(KEPT // 4), "bwd": torch.ones(KEPT // 4)}

    def forward(self, x):
        return _LazyScale.apply(self.lin(x), self.store)


def _readings(lazy: bool, isolated: bool) -> list[dict]:
    torch.manual_seed(0)
    stages = [Lazy(lazy), nn.ReLU(), nn.Linear(64, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CPUTimingWarning)
        data = profile_dict(stages, torch.randn(32, 64), passes=1, warmup=1, isolated=isolated)
    assert set(stages[0].store) == {"fwd", "bwd"}  # the buffers were made, and kept
    return data["stages"]


@pytest.mark.parametrize("isolated", [False, True], ids=["whole", "stage_by_stage"])
def test_kept_first_call_buffers_are_in_no_reading(isolated):
    plain, lazy = _readings(False, isolated), _readings(True, isolated)
    for a, b in zip(plain, lazy, strict=True):
        for key in ("x", "xbar", "fwd_peak_nograd", "fwd_peak_grad", "bwd_peak", "bwd_delta"):
            assert a[key] == b[key], (a["name"], key, a[key], b[key])


def test_without_warmup_the_buffers_are_read():
    """warmup=0 asks for a cold reading: the buffers are there to see (the test above can fail)."""
    torch.manual_seed(0)
    stages = [Lazy(True), nn.ReLU(), nn.Linear(64, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CPUTimingWarning)
        cold = profile_dict(stages, torch.randn(32, 64), passes=1, warmup=0, isolated=False)["stages"]
    warm = _readings(False, False)
    assert cold[0]["x"] >= warm[0]["x"] + KEPT



def test_no_cyclic_collection_inside_the_memory_pass():
    """The meter reads every allocation and free of the process, so a cyclic collection freeing garbage made
    earlier in the pass inside a stage's window read as that stage's: a test's MLP, profiled after other
    tests, read an output of 0 bytes for a Tanh stage (then fused as if it aliased its input), once the
    profiler made more Python objects and the collector ran there. The memory pass (the first calls with
    ``warmup=0``) runs with the collector off, after one collection; it is on again afterwards."""
    import gc
    seen = []

    def stage(h):
        seen.append(gc.isenabled())
        return h.tanh()
    assert gc.isenabled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CPUTimingWarning)
        profile_dict([stage, nn.Linear(4, 1)], torch.randn(3, 4), passes=1, warmup=0)
    assert seen[:3] == [False, False, False] and seen[-1] and gc.isenabled()
