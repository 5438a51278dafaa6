"""Schedule recovery: re-derive the choice at each visited state from the table (no choice table).

Tie-break rule, shared by every backend: among allowed candidates of minimal value, Tape wins,
then the smallest checkpoint k.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..schedule import Checkpoint, Policy, Tape
from .problem import Problem

Lookup = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""lookup(rows, cols) -> float32 values of table[rows, cols] (int64 index arrays)."""


def choose(problem: Problem, lookup: Lookup, i: int, j: int, m: int) -> int:
    """The choice at state (i, j, m): 0 for Tape, k for checkpoint k. Raises if the state is infeasible."""
    if j == i + 1:
        if m < int(problem.thr_tape(i, j)):
            raise ValueError(f"state ({i}, {j}, {m}) is infeasible")
        return 0
    ks = np.arange(i + 1, j, dtype=np.int64)
    allowed = m >= problem.thr_ckpt(i, j, ks)
    ks = ks[allowed]
    m_right_t = m - int(problem.tape_b[i + 1])
    tape_ok = problem.multi_tape and m >= int(problem.thr_tape(i, j))
    rows = np.concatenate([problem.row(ks, j), problem.row(i, ks), problem.row([i + 1], j)[:1] if tape_ok else []])
    cols = np.concatenate([m - problem.act_b[ks].astype(np.int64), np.full(len(ks), m, dtype=np.int64),
                           [m_right_t] if tape_ok else []])
    values = lookup(rows.astype(np.int64), cols.astype(np.int64)).astype(problem.dtype)
    nk = len(ks)
    cand_ckpt = (problem.sfn(i, ks) + values[:nk]) + values[nk:2 * nk]
    best_t = problem.t_tape[i + 1] + values[2 * nk] if tape_ok else problem.dtype(np.inf)
    best_k = np.min(cand_ckpt) if nk else problem.dtype(np.inf)
    if not np.isfinite(min(best_t, best_k)):
        raise ValueError(f"state ({i}, {j}, {m}) is infeasible")
    if best_t <= best_k:
        return 0
    return int(ks[int(np.argmin(cand_ckpt))])


def table_lookup(table: np.ndarray) -> Lookup:
    """Lookup over a host table (rows x (M+1))."""
    flat = table.reshape(-1)
    width = table.shape[1]
    return lambda rows, cols: flat[rows * width + cols]


def recover_policy(problem: Problem, lookup: Lookup, m: int, i: int = 0, j: int | None = None) -> Policy:
    """The optimal policy for the whole chain (or the sub-chain (i, j)) at m buckets, rebuilt from
    table lookups."""
    return walk_policy(lambda lo, hi, mm: choose(problem, lookup, lo, hi, mm), problem.n if j is None else j, m,
                       problem.tape_b, problem.act_b, start=i)


def walk_policy(choose_at, n: int, m: int, tape, act, start: int = 0) -> Policy:
    """The policy from state (start, n, m) down, one choice per state: ``choose_at(i, j, m)`` returns 0
    (Tape: the sub-problem (i+1, j) at m - tape[i+1]) or k (Checkpoint: (k, j) at m - act[k], then
    (i, k) at m). Every recovery walks this way: buckets here, bytes in the exact DP, none (zero
    sizes) for the least-peak policy; ``start`` > 0 for a sub-chain (the join DP's branch segments).
    Explicit stack: chains of thousands of stages nest that deep."""
    order: list[tuple[int, int, int, int]] = []
    stack = [(int(start), n, int(m))]
    while stack:
        i, j, mm = stack.pop()
        k = int(choose_at(i, j, mm))
        order.append((i, j, mm, k))
        if k == 0:
            if j > i + 1:
                stack.append((i + 1, j, mm - int(tape[i + 1])))
        else:
            stack.append((k, j, mm - int(act[k])))
            stack.append((i, k, mm))
    return policy_from_choices(order, tape, act)


def build_policy(problem: Problem, order) -> Policy:
    """Policy tree from (i, j, m, k) choices in visiting order at bucketed sizes (the CUDA
    backend's device-side walk returns the same order)."""
    return policy_from_choices(order, problem.tape_b, problem.act_b)


def policy_from_choices(order, tape, act) -> Policy:
    """Policy tree from (i, j, m, k) choices in visiting order (parents before children; k = 0 is
    Tape), sub-problem sizes ``tape``/``act`` as in :func:`walk_policy`."""
    # plain Python ints throughout (the device walk's quads arrive as an int32 array; NumPy scalars per
    # quad made this 5x slower, and the slack band of gpusolve.solve builds one tree per candidate)
    order = np.asarray(order, dtype=np.int64).reshape(-1, 4).tolist()
    tape, act = np.asarray(tape).tolist(), np.asarray(act).tolist()
    built: dict[tuple[int, int, int], Policy] = {}
    for i, j, mm, k in reversed(order):  # children were visited after their parent
        if k == 0:
            node = Tape(built.pop((i + 1, j, mm - tape[i + 1])) if j > i + 1 else None)
        else:
            node = Checkpoint(k, right=built.pop((k, j, mm - act[k])), left=built.pop((i, k, mm)))
        built[(i, j, mm)] = node
    i, j, mm, _ = order[0]
    return built[(i, j, mm)]


def walk_states(root, expand) -> Policy:
    """A policy tree from a root state, one choice per state, for DPs whose states carry more than
    (i, j, m) (the offload DP's (i, j, m, sigma), :mod:`gpusolve.offload.dp`): ``expand(state)``
    returns (child states in order, make) and the node is ``make(*child nodes)``. Explicit stack,
    like :func:`walk_policy` (which this generalises: its children are fixed by the choice k)."""
    built: dict[int, Policy] = {}
    pending: list[tuple[int, tuple, object]] = []  # (id, child ids, make), parents before children
    stack = [(0, root)]
    counter = 1
    while stack:
        ident, state = stack.pop()
        children, make = expand(state)
        ids = tuple(range(counter, counter + len(children)))
        counter += len(children)
        pending.append((ident, ids, make))
        stack.extend(zip(ids, children, strict=True))
    for ident, ids, make in reversed(pending):  # children were visited after their parent
        built[ident] = make(*(built.pop(c) for c in ids))
    return built[0]
