"""Exhaustive search over every schedule of a tiny join in the byte model (the tests' reference).

Written from the model's statement (docs/cost-model.md, ``gpusolve/join/network.py``), not from
the DP or the simulators: Dijkstra over memory states, one state = per branch the checkpoints held,
the stages recorded and not yet back-propagated, and which gradient is held (none before the turn).
Edges are every op the model allows (no-grad forward keeping or dropping its input, recording
forward, backward, free, turn) whose worst moment fits ``budget`` bytes; the least time to the goal
(turn done, exactly every input gradient held) is the optimum over all valid schedules.

``restricted=True`` adds the chain DP's persistence rule (spec A.2.5 item 6): a checkpoint a_s is
not freed (nor dropped by a no-grad forward) while the tape of stage s+1 is live.
A branch in the thesis model (``multi_tape=False``) records a stage only right before its
backward (one move). Two pruning rules lose nothing: a no-grad forward of a stage whose output is already readable
(held or in a live tape) only adds memory, and a second copy is never needed.
"""
from __future__ import annotations

import heapq
import math


def search(net, budget: int, restricted: bool = True, max_states: int = 2_000_000) -> float:
    """Least time (ms) of a valid schedule of ``net`` (a ``gpusolve.join.JoinNet``) within ``budget``
    bytes; ``math.inf`` when none exists."""
    k = net.k
    lengths = net.lengths
    arr = [net.padded(b) for b in range(k)]
    turn = net.turn
    out_grads = sum(int(arr[b]["grad_bytes"][lengths[b]]) for b in range(k))
    turn_peak = turn.tape_bytes + max(turn.fwd_extra, out_grads + turn.bwd_extra)
    turn_time = float(turn.t_fwd) + float(turn.t_bwd)
    reserved = net.total_reserved_bytes
    if reserved > budget:
        return math.inf
    start = (tuple(0 for _ in range(k)), tuple(0 for _ in range(k)), tuple(-1 for _ in range(k)), reserved)
    dist = {start[:3]: 0.0}
    heap = [(0.0, 0, start)]
    tick = 0
    while heap:
        cost, _, state = heapq.heappop(heap)
        acts, tapes, gpos, held = state
        if cost > dist.get((acts, tapes, gpos), math.inf):
            continue
        if gpos[0] >= 0 and all(g == 0 for g in gpos) and not any(acts) and not any(tapes):
            return cost
        moves = []  # (time, peak of the move, new acts, new tapes, new gpos, new held)
        if gpos[0] < 0 and all(_readable(acts[b], tapes[b], lengths[b]) for b in range(k)):
            moves.append((turn_time, held + turn_peak, acts, tapes, tuple(lengths), held + out_grads))
        for b in range(k):
            a = arr[b]
            act, grad, tape = a["act_bytes"], a["grad_bytes"], a["tape_bytes"]
            A, T, g = acts[b], tapes[b], gpos[b]
            for s in range(1, lengths[b] + 1):
                bit, below = 1 << s, 1 << (s - 1)
                if _readable(A, T, s - 1):
                    if not _readable(A, T, s):                               # no-grad forward
                        peak = held + int(act[s]) + int(a["fwd_nograd_extra"][s])
                        new_held = held + int(act[s])
                        moves.append((float(a["t_fwd_nograd"][s]), peak, _set(acts, b, A | bit), tapes, gpos, new_held))
                        if s > 1 and A & below and not (restricted and T & bit):  # ... dropping its input
                            moves.append((float(a["t_fwd_nograd"][s]), peak, _set(acts, b, (A | bit) & ~below), tapes,
                                          gpos, new_held - int(act[s - 1])))
                    if not T & bit and net.branches[b].multi_tape:            # recording forward
                        moves.append((float(a["t_fwd"][s]), held + int(tape[s]) + int(a["fwd_grad_extra"][s]),
                                      acts, _set(tapes, b, T | bit), gpos, held + int(tape[s])))
                    elif not T & bit and g == s:                  # thesis model: recording, then backward
                        taped = held + int(tape[s])
                        released = taped - (int(tape[s]) - int(a["bwd_tape_bytes"][s]))
                        peak = max(taped + int(a["fwd_grad_extra"][s]),
                                   released + int(grad[s - 1]) + int(a["bwd_extra"][s]))
                        moves.append((float(a["t_fwd"][s]) + float(a["t_bwd"][s]), peak, acts, tapes,
                                      _set(gpos, b, s - 1), held + int(grad[s - 1]) - int(grad[s])))
                if T & bit and g == s:                                        # backward
                    released = held - (int(tape[s]) - int(a["bwd_tape_bytes"][s]))
                    moves.append((float(a["t_bwd"][s]), released + int(grad[s - 1]) + int(a["bwd_extra"][s]),
                                  acts, _set(tapes, b, T & ~bit), _set(gpos, b, s - 1),
                                  held + int(grad[s - 1]) - int(tape[s]) - int(grad[s])))
                if A & bit and not (restricted and T & (bit << 1)):           # free
                    moves.append((0.0, held, _set(acts, b, A & ~bit), tapes, gpos, held - int(act[s])))
        for dt, peak, na, nt, ng, nh in moves:
            if peak > budget:
                continue
            key = (na, nt, ng)
            new_cost = cost + dt
            if new_cost < dist.get(key, math.inf):
                dist[key] = new_cost
                tick += 1
                heapq.heappush(heap, (new_cost, tick, (na, nt, ng, nh)))
        if len(dist) > max_states:
            raise RuntimeError(f"search exceeded {max_states} states")
    return math.inf


def _readable(acts: int, tapes: int, s: int) -> bool:
    return s == 0 or bool((acts | tapes) & (1 << s))


def _set(values: tuple, index: int, value) -> tuple:
    return values[:index] + (value,) + values[index + 1:]


# ---------------------------------------------------------------------------- canonical schedules

def join_policies(net, pos=None) -> list:
    """Every join policy of the DP's family (nested action sequences, any chain policy per segment)."""
    from gpusolve.join import BranchCheckpoint, BranchTape
    from test_dp import all_policies  # every chain policy tree of a sub-chain
    pos = tuple([0] * net.k) if pos is None else pos
    if pos == net.lengths:
        return [()]
    out = []
    for b, (i, length) in enumerate(zip(pos, net.lengths, strict=True)):
        if i == length:
            continue
        multi = net.branches[b].multi_tape
        if multi:
            rest = join_policies(net, pos[:b] + (i + 1,) + pos[b + 1:])
            out += [(BranchTape(b),) + tail for tail in rest]
        for k in range(i + 1, length + 1):
            rest = join_policies(net, pos[:b] + (k,) + pos[b + 1:])
            for left in list(all_policies(i, k, multi)):
                out += [(BranchCheckpoint(b, k, left),) + tail for tail in rest]
    return out
