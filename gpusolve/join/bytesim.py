"""Exact-byte simulation of join schedules: time (ms) and peak (bytes), and their validation.

A join schedule is a list of :class:`~gpusolve.schedule.Op`: branch ops (``branch`` set: the
chain ops of that branch's stages) and one ``TURN`` (:mod:`gpusolve.join.network` says what the turn
reads, holds and leaves). Each branch's ops are accounted by the chain simulator's own per-op rules
(:class:`gpusolve.simulate.Holdings`), so a branch op costs here exactly what it costs in a chain;
the total held is the sum over branches, plus the join's reserve, plus the turn's gradients.

Start: every branch input a^beta_0 held outside the counted memory, nothing inside. End: the turn has
run once and exactly the gradient of every a^beta_0 is held. This module is the module named
``simulate`` in the brief; it is called ``bytesim`` because :mod:`gpusolve.join` exports the slot
model's ``simulate`` function (:mod:`gpusolve.join.paper`), which a submodule of that name would
replace as an attribute of the package.
"""
from __future__ import annotations

from itertools import permutations

from ..schedule import Op, OpKind
from ..simulate import Holdings, ScheduleError, SimResult, Tally
from .network import JoinNet


def simulate_join(net: JoinNet, schedule: list[Op], trace: bool = False) -> SimResult:
    """Run ``schedule`` on ``net``'s byte model; raises :class:`~gpusolve.ScheduleError` when an op
    does not find its inputs, the turn does not run exactly once, or state is left over. ``trace``
    keeps the bytes held after each op."""
    lengths = net.lengths
    states = [Holdings(net.padded(beta), 0) for beta in range(net.k)]
    grads_out = [net.grad_bytes(beta, length) for beta, length in enumerate(lengths)]
    turn = net.turn
    tally = Tally(net.total_reserved_bytes, trace)
    turned = False
    for index, op in enumerate(schedule):
        if op.kind is OpKind.TURN:
            if turned:
                raise ScheduleError(f"op {index} {op}: the turn runs twice")
            missing = [beta for beta, length in enumerate(lengths) if not states[beta].available(length)]
            if missing:
                raise ScheduleError(f"op {index} {op}: the output of branch(es) {missing} is not held "
                                    f"(a_{lengths[missing[0]]} of branch {missing[0]})")
            transient = turn.tape_bytes + max(turn.fwd_extra, sum(grads_out) + turn.bwd_extra)
            change = sum(grads_out)
            for beta, length in enumerate(lengths):
                states[beta].grads.add(length)
            seconds = float(turn.t_fwd) + float(turn.t_bwd)
            turned = True
        else:
            beta = op.branch
            if beta is None or not 0 <= beta < net.k:
                raise ScheduleError(f"op {index} {op}: a join op needs a branch in 0..{net.k - 1}")
            if not 0 < op.stage <= lengths[beta]:
                raise ScheduleError(f"op {index} {op}: stage {op.stage} is not a stage of branch {beta} "
                                    f"({lengths[beta]} stages)")
            transient, change, seconds = states[beta].apply(op, index)
        tally.add(index, transient, change, seconds)
    if not turned:
        raise ScheduleError("the schedule never runs the turn")
    for beta, state in enumerate(states):
        left = state.leftover(0)
        if left is not None:
            raise ScheduleError(f"branch {beta}: schedule ends with {left}")
    return tally.result(len(schedule))


def store_all_join_schedule(net: JoinNet, order=None) -> list[Op]:
    """Plain autograd on the join: record every stage of every branch (branch by branch in the
    reverse of ``order``), the turn, then every backward, branch by branch in ``order`` (default: the
    last branch first). Nested like the join DP's schedules: the branch recorded last goes back first."""
    order = list(range(net.k))[::-1] if order is None else list(order)
    ops = [Op(OpKind.FWD_TAPE, s, branch=beta) for beta in reversed(order) for s in range(1, net.lengths[beta] + 1)]
    ops.append(Op(OpKind.TURN, 0))
    ops += [Op(OpKind.BWD, s, branch=beta) for beta in order for s in range(net.lengths[beta], 0, -1)]
    return ops


def store_all_join_peak_bytes(net: JoinNet) -> int:
    """Least peak of plain autograd over the orders of the branches' backward phases (every order
    for k <= 4, else the default one)."""
    return min(simulate_join(net, store_all_join_schedule(net, order)).peak_bytes for order in backward_orders(net.k))


def backward_orders(k: int):
    """The orders tried for the branches' backward phases: all of them up to k = 4."""
    if k <= 4:
        return list(permutations(range(k)))
    return [tuple(range(k))[::-1]]


__all__ = ["simulate_join", "store_all_join_schedule", "store_all_join_peak_bytes", "backward_orders"]
