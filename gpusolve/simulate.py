"""Exact simulation of a schedule under the chain's cost model: time (ms) and peak memory (bytes).

No buckets here: sizes are the chain's bytes. The simulator also checks that the schedule is
executable (every operation finds its inputs), so it doubles as the IR's validator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .chain import Chain
from .schedule import Op, OpKind, policy_to_schedule, tape_chain


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


def simulate(chain: Chain, schedule: list[Op], start: tuple[int, int] | None = None,
             trace: bool = False) -> SimResult:
    """Run ``schedule`` on the cost model of ``chain``.

    ``start = (i, j)`` is the sub-chain the schedule solves (default the whole chain (0, N)):
    a_i is held outside the counted memory, the gradient of a_j is held inside it at the start,
    and at the end exactly the gradient of a_i must remain. Peak bytes count everything held
    inside (``chain.reserved_bytes`` at every moment) plus each operation's transient workspace.
    ``trace`` keeps bytes held after each op.
    """
    n = chain.n
    i, j = (0, n) if start is None else start
    if not 0 <= i < j <= n:
        raise ValueError(f"start {start} is not a sub-chain of a {n}-stage chain")
    arr = chain.padded()
    act, grad, tape = arr["act_bytes"], arr["grad_bytes"], arr["tape_bytes"]
    fng_x, fg_x, bwd_x = arr["fwd_nograd_extra"], arr["fwd_grad_extra"], arr["bwd_extra"]
    bwd_tape = arr["bwd_tape_bytes"]
    t_fwd, t_fng, t_bwd = arr["t_fwd"], arr["t_fwd_nograd"], arr["t_bwd"]

    acts: set[int] = set()     # checkpoints held inside the counted memory
    tapes: set[int] = set()    # stages recorded and not yet back-propagated
    grads: set[int] = {j}
    held = int(grad[j]) + int(chain.reserved_bytes)
    peak, peak_op = held, -1
    time_ms = 0.0
    memory_trace: list[int] = []

    def available(s: int) -> bool:
        return s == i or s in acts or s in tapes

    for index, op in enumerate(schedule):
        s = op.stage
        if not i < s <= j:
            raise ScheduleError(f"op {index} {op}: stage {s} is outside the sub-chain ({i}, {j})")
        if op.kind is OpKind.FWD_NOGRAD:
            if not available(s - 1):
                raise ScheduleError(f"op {index} {op}: input a_{s - 1} is not held")
            if s in acts:
                raise ScheduleError(f"op {index} {op}: a_{s} is already held")
            transient = held + int(act[s]) + int(fng_x[s])
            acts.add(s)
            held += int(act[s])
            if not op.keep_input:
                if s - 1 not in acts:
                    raise ScheduleError(f"op {index} {op}: drops a_{s - 1}, which is not a droppable checkpoint")
                acts.discard(s - 1)
                held -= int(act[s - 1])
            time_ms += float(t_fng[s])
        elif op.kind is OpKind.FWD_TAPE:
            if not available(s - 1):
                raise ScheduleError(f"op {index} {op}: input a_{s - 1} is not held")
            if s in tapes:
                raise ScheduleError(f"op {index} {op}: stage {s} is already recorded")
            transient = held + int(tape[s]) + int(fg_x[s])
            tapes.add(s)
            held += int(tape[s])
            time_ms += float(t_fwd[s])
        elif op.kind is OpKind.BWD:
            if s not in tapes or s not in grads:
                raise ScheduleError(f"op {index} {op}: needs the tape of stage {s} and the gradient of a_{s}")
            held -= int(tape[s]) - int(bwd_tape[s])  # the part of the tape released before the backward
            transient = held + int(grad[s - 1]) + int(bwd_x[s])
            tapes.discard(s)
            grads.discard(s)
            grads.add(s - 1)
            held += int(grad[s - 1]) - int(bwd_tape[s]) - int(grad[s])
            time_ms += float(t_bwd[s])
        elif op.kind is OpKind.FREE:
            if s not in acts:
                raise ScheduleError(f"op {index} {op}: a_{s} is not a held checkpoint")
            acts.discard(s)
            held -= int(act[s])
            transient = held
        else:  # pragma: no cover - OpKind is closed
            raise ScheduleError(f"op {index}: unknown kind {op.kind!r}")
        if transient > peak:
            peak, peak_op = transient, index
        if trace:
            memory_trace.append(held)
    if acts or tapes or grads != {i}:
        raise ScheduleError(
            f"schedule ends with checkpoints {sorted(acts)}, tapes {sorted(tapes)}, gradients {sorted(grads)}; "
            f"expected only the gradient of a_{i}")
    return SimResult(time_ms=time_ms, peak_bytes=int(peak), peak_op=peak_op, ops=len(schedule),
                     memory_trace=memory_trace)


def store_all_schedule(chain: Chain) -> list[Op]:
    """Plain autograd as a schedule: record every stage, then run every backward."""
    return policy_to_schedule(tape_chain(0, chain.n), 0, chain.n)


def store_all_time_ms(chain: Chain) -> float:
    """Time of plain autograd under the model: every forward with recording plus every backward."""
    return float(np.sum(chain.t_fwd) + np.sum(chain.t_bwd))


def store_all_peak_bytes(chain: Chain) -> int:
    """Peak bytes of plain autograd under the model (every stage taped, then every backward)."""
    return simulate(chain, store_all_schedule(chain)).peak_bytes
