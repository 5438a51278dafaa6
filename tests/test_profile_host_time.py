"""Note [Host time of a stage] (torch_exec/profiler.py): on CUDA the timing passes read the host's clock beside
every event. Without a GPU, the CUDA profiler's clock methods run on the CPU profiler's passes with
``torch.cuda.Event`` replaced by events of a fake device clock that each stage advances by a known amount while
the host sleeps a known time: the profile's event times must be the device's exactly, and its host times the
sleeps (and never the device's)."""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec.profiler as P  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning")

DEVICE_FWD = (0.25, 3.0, 0.5)   # ms the fake device spends on each stage's forward
DEVICE_BWD = (0.75, 0.125, 2.0)  # and on its backward
HOST_FWD = (0.0, 0.0, 8.0)      # ms the host sleeps while queueing each stage's forward (stage 3: host-bound)
HOST_BWD = (6.0, 0.0, 0.0)      # and its backward (stage 1)


class _DeviceClock:
    now = 0.0


class _FakeEvent:
    def __init__(self, enable_timing=False):
        self.at = None

    def record(self, stream=None):
        self.at = _DeviceClock.now

    def elapsed_time(self, other):
        return other.at - self.at


class _Work(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        ctx.s = s
        _DeviceClock.now += DEVICE_FWD[s]
        time.sleep(HOST_FWD[s] / 1e3)
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        _DeviceClock.now += DEVICE_BWD[ctx.s]
        time.sleep(HOST_BWD[ctx.s] / 1e3)
        return grad * 1.0, None


class _Stage(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return _Work.apply(self.lin(x), self.s)


class _Shift(nn.Module):
    """A first stage no gradient reaches (the input needs none, it has no parameters): no backward."""

    def forward(self, x):
        return x + 1.0


class _HostStamped(P._CpuProfiler):
    """The CPU profiler's passes with the CUDA profiler's clock."""
    host_clock = P._CudaProfiler.host_clock
    mark = P._CudaProfiler.mark
    elapsed = P._CudaProfiler.elapsed
    host_elapsed = P._CudaProfiler.host_elapsed


@pytest.mark.parametrize("isolated", [False, True])
def test_host_times_beside_event_times(monkeypatch, isolated):
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    torch.manual_seed(0)
    fns = [_Shift()] + [_Stage(s) for s in range(3)]
    x = torch.randn(2, 4)
    first, *stages = _HostStamped(fns, x, isolated=isolated).run(passes=3, warmup=1)[0]
    assert first["t_bwd"] == 0.0 and 0.0 <= first["host_bwd_ms"] < 0.5  # every stage has the fields (host_max reads them)
    assert first["host_fwd_ms"] >= 0.0 and first["host_fwd_nograd_ms"] >= 0.0
    for s, stage in enumerate(stages):
        # the event times are the fake device's, to the last bit of these binary fractions
        assert stage["t_fwd"] == DEVICE_FWD[s] and stage["t_fwd_nograd"] == DEVICE_FWD[s]
        assert stage["t_bwd"] == DEVICE_BWD[s]
        # the host times are the host's: at least the sleep, and not the device's figure
        for key, slept in (("host_fwd_ms", HOST_FWD[s]), ("host_fwd_nograd_ms", HOST_FWD[s]),
                           ("host_bwd_ms", HOST_BWD[s])):
            assert slept <= stage[key] < slept + 4.0, (s, key, stage[key])
    assert stages[2]["host_fwd_ms"] > stages[2]["t_fwd"] + 5 and stages[0]["host_bwd_ms"] > stages[0]["t_bwd"] + 4


def test_cpu_profiles_have_no_host_fields():
    """On the CPU the stage times are host times already: no second copy of them."""
    torch.manual_seed(0)
    stages, _ = P._CpuProfiler([_Stage(s) for s in range(3)], torch.randn(2, 4)).run(passes=1, warmup=1)
    assert not any(key.startswith("host_") for stage in stages for key in stage)


def test_the_passes_bookkeeping_is_in_no_stage(monkeypatch):
    """The forward pass's bookkeeping between stages (the input's versions for the backward marks) stays out of
    every stage's span, on the device's clock and on the host's: it costs the device 1 ms and the host 5 ms per
    stage here, and no stage's times may show it (before, each stage after the first read it)."""
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    versions = P._versions

    def costly_versions(state):
        _DeviceClock.now += 1.0
        time.sleep(5e-3)
        return versions(state)
    monkeypatch.setattr(P, "_versions", costly_versions)
    torch.manual_seed(0)
    stages = _HostStamped([_Stage(s) for s in range(3)], torch.randn(2, 4)).run(passes=2, warmup=1)[0]
    for s, stage in enumerate(stages):
        assert stage["t_fwd"] == DEVICE_FWD[s]
        assert HOST_FWD[s] <= stage["host_fwd_ms"] < HOST_FWD[s] + 4.0, (s, stage["host_fwd_ms"])
