"""Per-op times of the schedule interpreter, for diagnosis: where a measured step parts from its
prediction (``bench/offload_executor.py --op-times``).

``with OpClock(device) as clock: step()`` makes :func:`torch_exec.executor.interpret` mark the end of every op
it runs (and the start of each program it runs: a step's forward, then its backward); ``clock.ops()``
then gives each op's time, the interval between its mark and the one before it, twice: on the device
and on the host. On CUDA the device marks are timing events on the stream current at the op (the
compute stream), so an op's device time is what that stream spent on it: its kernels, its waits for a
copy (``release``, ``acquire``) and any idle time while the host had not queued its kernels yet; its
host time is what the host spent queueing it (``time.perf_counter``). Where the host times exceed the
device times the stream starves (the step is launch-bound). On the CPU both are the host's. The marks
cost one event record per op; nothing is recorded when no clock is active (one ``None`` test per op).

One clock at a time, process-wide (not per thread: autograd runs a CUDA backward on a thread of its
own); a program run inside another (a checkpointed module used as a stage) gets a list of its own.
Not for use inside a compiled region.
"""
from __future__ import annotations

import time

import torch

ACTIVE: "OpClock | None" = None  # read by the interpreter at the start of each program


class OpClock:
    """Marks of the interpreter's ops while active (module docstring)."""

    def __init__(self, device="cpu"):
        """``device``: where the timed model runs; on a CUDA device the marks are events on its current
        stream, elsewhere host readings only."""
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.cuda = self.device.type == "cuda"
        self.programs: list[list] = []  # per program: [start mark, (code, stage, branch, mark), ...]

    def __enter__(self) -> "OpClock":
        global ACTIVE
        if ACTIVE is not None:
            raise RuntimeError("an OpClock is already active: time one thing at a time")
        ACTIVE = self
        return self

    def __exit__(self, *exc) -> None:
        global ACTIVE
        ACTIVE = None

    def _now(self) -> tuple:
        """(device mark, host time)."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event, time.perf_counter()
        now = time.perf_counter()
        return now, now

    def begin(self) -> list:
        """A program starts (the interpreter's first statement): returns its list of marks."""
        program = [self._now()]
        self.programs.append(program)
        return program

    def mark(self, program: list, code: int, stage: int, branch) -> None:
        """The op ``(code, stage, branch)`` of ``program`` (:meth:`begin`'s) has been run (queued, on CUDA)."""
        program.append((code, stage, branch, self._now()))

    def ops(self) -> list[tuple[int, int, object, float, float]]:
        """``(code, stage, branch, device ms, host ms)`` of every op marked, in order (programs one after
        the other); on CUDA waits for the marks to complete first."""
        if self.cuda:
            torch.cuda.synchronize()
        out = []
        for program in self.programs:
            (device, host) = program[0]
            for code, stage, branch, (device_at, host_at) in program[1:]:
                ms = device.elapsed_time(device_at) if self.cuda else (device_at - device) * 1e3
                out.append((code, stage, branch, float(ms), (host_at - host) * 1e3))
                device, host = device_at, host_at
        return out
