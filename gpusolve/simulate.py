"""Exact simulation of a schedule under the chain's cost model: time (ms) and peak memory (bytes).

No buckets here: sizes are the chain's bytes. The simulator also checks that the schedule is
executable (every operation finds its inputs), so it doubles as the IR's validator.

Offloading ops (``OFFLOAD``/``RELEASE``/``PREFETCH``/``ACQUIRE``, spec ``offload.md`` B.4.1) run on a
second timeline, one FIFO copy channel (:class:`CopyChannel`, given a link): a transfer starts at
max(its issue time, the channel free) and lasts the link's tau of a_s's bytes; ``RELEASE`` blocks the
compute timeline until the device-to-host copy has ended, then frees a_s; ``PREFETCH`` holds a_s's
bytes from its issue; ``ACQUIRE`` blocks the compute timeline until the host-to-device copy has ended.
The time of a schedule is the compute timeline's end (every copy is waited for by then). A schedule
without these ops simulates exactly as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .chain import Chain
from .schedule import SWAP_OPS, Op, OpKind, policy_to_schedule, tape_chain
from .units import parse_budget


class ScheduleError(ValueError):
    """A schedule that cannot run: an operation's input is missing, or state is left over."""


@dataclass
class SimResult:
    """Simulated figures of a schedule: total time (ms), peak bytes, and the op at the peak."""

    time_ms: float
    peak_bytes: int
    peak_op: int
    ops: int
    memory_trace: list[int] = field(default_factory=list, repr=False)
    op_ms: list[float] = field(default_factory=list, repr=False)  # with trace: each op's time on the compute timeline


class Tally:
    """The running figures of a simulation, the one place they are added up: bytes held (from
    ``held`` at the start), the peak (held plus each op's transient) and the op at it, total time,
    and with ``trace`` the bytes held after each op and each op's time."""

    def __init__(self, held: int, trace: bool):
        self.held = held
        self.peak, self.peak_op = held, -1
        self.time_ms = 0.0
        self.trace: list[int] | None = [] if trace else None
        self.op_ms: list[float] | None = [] if trace else None

    def add(self, index: int, transient: int, change: int, seconds: float) -> None:
        if self.held + transient > self.peak:
            self.peak, self.peak_op = self.held + transient, index
        self.held += change
        self.time_ms += seconds
        if self.trace is not None:
            self.trace.append(self.held)
            self.op_ms.append(seconds)

    def result(self, ops: int) -> SimResult:
        return SimResult(time_ms=self.time_ms, peak_bytes=int(self.peak), peak_op=self.peak_op, ops=ops,
                         memory_trace=self.trace if self.trace is not None else [],
                         op_ms=self.op_ms if self.op_ms is not None else [])


class CopyChannel:
    """One FIFO copy channel between device and host (assumption (A) of [O]: one transfer at a
    time, offloads and prefetches alike). ``link`` has ``d2h_ms(nbytes)`` and ``h2d_ms(nbytes)``
    (:class:`gpusolve.offload.Link`); ``free_at`` is when the last transfer issued ends."""

    def __init__(self, link):
        self.link = link
        self.free_at = 0.0

    def transfer(self, now: float, duration_ms: float) -> float:
        """Issue a transfer of ``duration_ms`` at compute time ``now``; returns its end time."""
        start = max(float(now), self.free_at)
        self.free_at = start + float(duration_ms)
        return self.free_at


class Holdings:
    """What one chain (or one branch of a join) holds while a schedule runs, and the per-op
    accounting of the byte model: the one statement of what each operation needs, holds and frees,
    shared by :func:`simulate` and the join simulator (:mod:`gpusolve.join.simulate`).

    ``arrays`` is ``chain.padded()``; ``lo`` is the index of the input held outside the counted
    memory (a_lo); ``grads`` the gradients held at the start. Sizes are exact bytes. ``channel`` (a
    :class:`CopyChannel`) is needed by the offloading ops only.
    """

    def __init__(self, arrays: dict, lo: int, grads=(), channel: CopyChannel | None = None):
        self.arrays, self.lo = arrays, int(lo)
        self.acts: set[int] = set()     # checkpoints held inside the counted memory
        self.tapes: set[int] = set()    # stages recorded and not yet back-propagated
        self.grads: set[int] = set(grads)
        self.channel = channel
        self.d2h: dict[int, float] = {}  # checkpoints being offloaded (still held): end of their copy
        self.host: set[int] = set()      # checkpoints released to the host (not held on the device)
        self.h2d: dict[int, float] = {}  # checkpoints being prefetched (held): end of their copy

    def available(self, s: int) -> bool:
        """Whether a_s can be read: the held input, a checkpoint or part of a live tape."""
        return s == self.lo or s in self.acts or s in self.tapes

    def apply(self, op: Op, index: int, now: float = 0.0) -> tuple[int, int, float]:
        """Run FWD_NOGRAD, FWD_TAPE, BWD or FREE (or an offloading op, at compute time ``now``) on
        these holdings: returns (transient, change, time): bytes held at the op's worst moment and
        after it, both relative to what was held before it, and its time (ms; for RELEASE and
        ACQUIRE the compute timeline's wait for the copy). Raises :class:`ScheduleError` when an
        input is missing."""
        arr, s = self.arrays, op.stage
        if op.kind in SWAP_OPS:
            return self._apply_swap(op, index, now)
        if self.d2h:  # a checkpoint being offloaded is dropped only by its RELEASE
            dropped = s if op.kind is OpKind.FREE else s - 1 if op.kind is OpKind.FWD_NOGRAD and not op.keep_input else None
            if dropped in self.d2h:
                raise ScheduleError(f"op {index} {op}: drops a_{dropped} while its offload is in flight")
        act, grad, tape, bwd_tape = arr["act_bytes"], arr["grad_bytes"], arr["tape_bytes"], arr["bwd_tape_bytes"]
        if op.kind is OpKind.FWD_NOGRAD:
            if not self.available(s - 1):
                raise ScheduleError(f"op {index} {op}: input a_{s - 1} is not held")
            if s in self.acts:
                raise ScheduleError(f"op {index} {op}: a_{s} is already held")
            transient = int(act[s]) + int(arr["fwd_nograd_extra"][s])
            self.acts.add(s)
            change = int(act[s])
            if not op.keep_input:
                if s - 1 not in self.acts:
                    raise ScheduleError(f"op {index} {op}: drops a_{s - 1}, which is not a droppable checkpoint")
                self._check_drop(op, index, s - 1)
                self.acts.discard(s - 1)
                change -= int(act[s - 1])
            return transient, change, float(arr["t_fwd_nograd"][s])
        if op.kind is OpKind.FWD_TAPE:
            if not self.available(s - 1):
                raise ScheduleError(f"op {index} {op}: input a_{s - 1} is not held")
            if s in self.tapes:
                raise ScheduleError(f"op {index} {op}: stage {s} is already recorded")
            self.tapes.add(s)
            return int(tape[s]) + int(arr["fwd_grad_extra"][s]), int(tape[s]), float(arr["t_fwd"][s])
        if op.kind is OpKind.BWD:
            if s not in self.tapes or s not in self.grads:
                raise ScheduleError(f"op {index} {op}: needs the tape of stage {s} and the gradient of a_{s}")
            # The part of the tape not kept for the backward is released before it starts.
            transient = -(int(tape[s]) - int(bwd_tape[s])) + int(grad[s - 1]) + int(arr["bwd_extra"][s])
            self.tapes.discard(s)
            self.grads.discard(s)
            self.grads.add(s - 1)
            return transient, int(grad[s - 1]) - int(tape[s]) - int(grad[s]), float(arr["t_bwd"][s])
        if op.kind is OpKind.FREE:
            if s not in self.acts:
                raise ScheduleError(f"op {index} {op}: a_{s} is not a held checkpoint")
            self._check_drop(op, index, s)
            self.acts.discard(s)
            return -int(act[s]), -int(act[s]), 0.0
        raise ScheduleError(f"op {index} {op}: not an operation on a chain's stage")

    def _check_drop(self, op: Op, index: int, k: int) -> None:
        """a_k leaves the counted memory: not while it is the input of stage k + 1's tape (recorded, not yet
        back-propagated). A tape counts what its recording forward allocated, not its input, which the model holds
        until the tape's backward (every DP keeps a checkpoint until the sub-chain after it is done); a schedule
        that dropped it was counted below what runs, where the stage saved it (a review: simulate accepted a
        2-stage schedule at 18 B against the chain's least budget of 21 B,
        bench/repros/rv19c_simulate_frees_input_of_live_tape.py)."""
        if k + 1 in self.tapes and k not in self.tapes:
            raise ScheduleError(f"op {index} {op}: drops a_{k}, the input of stage {k + 1}'s tape, before bwd({k + 1}); "
                                f"a tape is counted without its input, which stays held until the tape's backward")

    def _apply_swap(self, op: Op, index: int, now: float) -> tuple[int, int, float]:
        """OFFLOAD, RELEASE, PREFETCH, ACQUIRE of the plain checkpoint a_s (module docstring)."""
        s = op.stage
        size = int(self.arrays["act_bytes"][s])
        if self.channel is None:
            raise ScheduleError(f"op {index} {op}: an offloading op needs a link (simulate(..., link=...))")
        if op.kind is OpKind.OFFLOAD:
            if s not in self.acts or s in self.tapes:
                raise ScheduleError(f"op {index} {op}: a_{s} is not held as a plain checkpoint (only those are offloaded)")
            if s in self.d2h or s in self.h2d:
                raise ScheduleError(f"op {index} {op}: a_{s} is already being copied")
            self.d2h[s] = self.channel.transfer(now, self.channel.link.d2h_ms(size))
            return 0, 0, 0.0
        if op.kind is OpKind.RELEASE:
            if s not in self.d2h:
                raise ScheduleError(f"op {index} {op}: a_{s} was not offloaded")
            self._check_drop(op, index, s)
            end = self.d2h.pop(s)
            self.acts.discard(s)
            self.host.add(s)
            return 0, -size, max(0.0, end - float(now))
        if op.kind is OpKind.PREFETCH:
            if s not in self.host:
                raise ScheduleError(f"op {index} {op}: a_{s} is not on the host (offload and release it first)")
            self.host.discard(s)
            self.h2d[s] = self.channel.transfer(now, self.channel.link.h2d_ms(size))
            return size, size, 0.0
        if s not in self.h2d:  # ACQUIRE
            raise ScheduleError(f"op {index} {op}: a_{s} was not prefetched")
        if s in self.acts:
            raise ScheduleError(f"op {index} {op}: a_{s} is already held")
        end = self.h2d.pop(s)
        self.acts.add(s)
        return 0, 0, max(0.0, end - float(now))

    def leftover(self, expected_grad: int) -> str | None:
        """None when exactly the gradient of a_``expected_grad`` is left, else what is left over."""
        if self.acts or self.tapes or self.grads != {expected_grad}:
            return (f"checkpoints {sorted(self.acts)}, tapes {sorted(self.tapes)}, gradients {sorted(self.grads)}; "
                    f"expected only the gradient of a_{expected_grad}")
        if self.d2h or self.host or self.h2d:
            return (f"offloads in flight {sorted(self.d2h)}, on the host {sorted(self.host)}, prefetches not "
                    f"acquired {sorted(self.h2d)}")
        return None


def simulate(chain: Chain, schedule: list[Op], start: tuple[int, int] | None = None,
             trace: bool = False, link=None) -> SimResult:
    """Run ``schedule`` on the cost model of ``chain``.

    ``start = (i, j)`` is the sub-chain the schedule solves (default the whole chain (0, N)):
    a_i is held outside the counted memory, the gradient of a_j is held inside it at the start,
    and at the end exactly the gradient of a_i must remain. Peak bytes count everything held
    inside (``chain.reserved_bytes`` at every moment) plus each operation's transient workspace.
    ``trace`` keeps bytes held after each op. ``link`` (:class:`gpusolve.offload.Link`) is needed
    by schedules with offloading ops: they run on one FIFO copy channel (module docstring).
    """
    n = chain.n
    i, j = (0, n) if start is None else start
    if not 0 <= i < j <= n:
        raise ValueError(f"start {start} is not a sub-chain of a {n}-stage chain")
    arr = chain.padded()
    state = Holdings(arr, i, grads=(j,), channel=None if link is None else CopyChannel(link))
    tally = Tally(int(arr["grad_bytes"][j]) + int(chain.reserved_bytes), trace)
    for index, op in enumerate(schedule):
        if not isinstance(op, Op):
            raise TypeError(f"schedule[{index}] = {op!r} is not a gpusolve.schedule.Op: a schedule is a list of Ops "
                            f"(gpusolve.schedule.policy_to_schedule makes one from a policy)")
        if op.kind is OpKind.TURN or op.branch is not None:
            raise ScheduleError(f"op {index} {op}: a join operation in a chain schedule (use gpusolve.join.simulate)")
        if not i < op.stage <= j:
            raise ScheduleError(f"op {index} {op}: stage {op.stage} is outside the sub-chain ({i}, {j})")
        tally.add(index, *state.apply(op, index, tally.time_ms))
    left = state.leftover(i)
    if left is not None:
        raise ScheduleError(f"schedule ends with {left}")
    return tally.result(len(schedule))


def store_all_schedule(chain: Chain) -> list[Op]:
    """Plain autograd as a schedule: record every stage, then run every backward."""
    return policy_to_schedule(tape_chain(0, chain.n), 0, chain.n)


def store_all_time_ms(chain: Chain) -> float:
    """Time of plain autograd under the model: every forward with recording plus every backward."""
    return float(np.sum(chain.t_fwd) + np.sum(chain.t_bwd))


def overhead(time_ms: float, store_all_ms: float) -> float:
    """A step's time over plain autograd's, minus 1 (0.16 = 16 % slower); 0 when there is no base time."""
    return time_ms / store_all_ms - 1.0 if store_all_ms else 0.0


def store_all_peak_bytes(chain: Chain) -> int:
    """Peak bytes of plain autograd under the model (every stage taped, then every backward)."""
    return simulate(chain, store_all_schedule(chain)).peak_bytes


def budget_bytes_of(chain: Chain, budget, what: str = "budget") -> int:
    """``budget`` in bytes for ``chain``: bytes, a size string (``"6GiB"``) or a percentage of the
    chain's store-all peak (``"50%"``), by the one rule of :func:`gpusolve.units.parse_budget`."""
    return parse_budget(budget, lambda: store_all_peak_bytes(chain), what)
