"""Exhaustive search over every schedule of the paper's slot model (reference for tests).

Dijkstra over memory states of the model of :mod:`gpusolve.join.paper` (Table 3 of [J]): a state is
the number of copies of every forward value x_i^(j) held, the gradient each branch holds (none yet,
xbar_g^(j), or xbar_0^(j) discarded), and whether the turn has run; edges are the ops F, Fbar, Turn,
S, D, Dbar with their costs (S, D, Dbar cost 0), S only while fewer than c values are held. The
least cost of a goal state (turn done, every xbar_0 computed, memory exactly {xbar_0^(j) : b_j = 1})
is the optimal makespan over *all* valid schedules -- not only the canonical ones eq. (5) builds.

Note [Copies]
-------------
Two reductions shrink the state space without losing any schedule's makespan:

* at most two copies of a value are kept: a copy is consumed only by F (in place), Fbar or the
  turn, each of which takes one copy, so a third copy could always be made later by S into the
  slot it occupied until then, at zero cost;
* after the turn, a forward value x_i^(j) with i >= g (branch j's gradient is xbar_g, so Fbar_i is
  done) can never be an input again (Fbar_i cannot rerun, and F only leads further from the
  gradient); the search discards it at once, as a free D would -- holding it only takes a slot.

Everything else is the model as written; the state space is exponential, so this is for tiny
instances only (lengths up to about 4 per branch for k = 2, 2 for k = 3).
"""
from __future__ import annotations

import heapq
import math

from .paper import _cost, _flags, _lengths, _stage_costs

INF = math.inf
MAX_COPIES = 2  # Note [Copies]
_NOT_YET, _DISCARDED = -2, -1


def _drop_dead(state, base, n_fwd):
    """``state`` without the forward values that can no longer be used (Note [Copies])."""
    counts, grads, turned = state
    if not turned:
        return state
    out = None
    for j, g in enumerate(grads):
        top = base[j] + n_fwd[j]
        first = base[j] + max(g, 0) if g != _DISCARDED else base[j]
        for at in range(first, top + 1):
            if counts[at]:
                if out is None:
                    out = list(counts)
                out[at] = 0
    return state if out is None else (tuple(out), grads, turned)


def _search(n_fwd, n_bwd, counts0, grads0, turned0, keep, c, uf, ub, ut, max_states) -> float:
    """Least cost from the start state to a goal; ``n_fwd[j]``/``n_bwd[j]``: forward/backward
    steps of branch j (values x_0..x_{n_fwd[j]}); ``keep[j]``: b_j."""
    k = len(n_fwd)
    base = [0]
    for j in range(k):
        base.append(base[-1] + n_fwd[j] + 1)
    goal_grads = tuple(0 if keep[j] else _DISCARDED for j in range(k))
    start = (tuple(counts0), tuple(grads0), turned0)
    dist = {start: 0.0}
    heap = [(0.0, 0, start)]
    tick = 0
    while heap:
        d, _, state = heapq.heappop(heap)
        if d > dist[state]:
            continue
        counts, grads, turned = state
        if turned and grads == goal_grads and not any(counts):
            return d
        held = sum(counts) + sum(1 for g in grads if g >= 0)
        moves = []
        for j in range(k):
            for i in range(n_fwd[j] + 1):
                at = base[j] + i
                have = counts[at]
                if not have:
                    continue
                if i < n_fwd[j] and counts[at + 1] < MAX_COPIES:            # F_i: x_i -> x_{i+1}
                    nxt = list(counts)
                    nxt[at] -= 1
                    nxt[at + 1] += 1
                    moves.append((uf[j][i], (tuple(nxt), grads, turned)))
                if have < MAX_COPIES and held < c:                         # S_i: copy x_i
                    nxt = list(counts)
                    nxt[at] += 1
                    moves.append((0.0, (tuple(nxt), grads, turned)))
                nxt = list(counts)                                         # D_i: discard x_i
                nxt[at] -= 1
                moves.append((0.0, (tuple(nxt), grads, turned)))
                if i < n_bwd[j] and grads[j] == i + 1:                     # Fbar_i: (x_i, xbar_{i+1}) -> xbar_i
                    nxt = list(counts)
                    nxt[at] -= 1
                    g = list(grads)
                    g[j] = i
                    moves.append((ub[j][i], (tuple(nxt), tuple(g), turned)))
            if grads[j] == 0:                                              # Dbar: discard xbar_0
                g = list(grads)
                g[j] = _DISCARDED
                moves.append((0.0, (counts, tuple(g), turned)))
        if not turned and all(counts[base[j] + n_fwd[j]] for j in range(k)):  # Turn, in place
            nxt = list(counts)
            for j in range(k):
                nxt[base[j] + n_fwd[j]] -= 1
            moves.append((ut, (tuple(nxt), tuple(n_fwd), True)))
        for cost, nxt in moves:
            nxt = _drop_dead(nxt, base, n_fwd)
            nd = d + cost
            if nd < dist.get(nxt, INF):
                if len(dist) >= max_states:
                    raise MemoryError(f"exhaustive search passed {max_states:,} states; use a smaller instance")
                dist[nxt] = nd
                tick += 1
                heapq.heappush(heap, (nd, tick, nxt))
    return INF


def exhaustive_join(lengths, c: int, b=None, uf=1.0, ub=1.0, ut=1.0, max_states: int = 3_000_000) -> float:
    """Optimal makespan of PROB_b-multi(l, c, b) over every valid schedule (+inf if none)."""
    ls = _lengths(lengths)
    k = len(ls)
    keep = _flags(b, k)
    ufs, ubs = _stage_costs(uf, ls, "uf"), _stage_costs(ub, ls, "ub")
    counts = []
    for n in ls:
        counts += [1] + [0] * n
    if c < k:
        return INF
    return _search(ls, ls, counts, (_NOT_YET,) * k, False, keep, int(c),
                   [list(map(float, a)) for a in ufs], [list(map(float, a)) for a in ubs], _cost(ut, "ut"), max_states)


def exhaustive_chain(l: int, c: int, uf: float = 1.0, ub: float = 1.0, max_states: int = 3_000_000) -> float:
    """Optimal makespan of PROB(l, c) (memory {x_0, xbar_{l+1}} -> {xbar_0}; l forward steps,
    l + 1 backward steps) over every valid schedule: Theorem 1's Opt_0(l, c)."""
    l = int(l)
    if c < 2:
        return INF
    counts = [1] + [0] * l
    return _search((l,), (l + 1,), counts, (l + 1,), True, (1,), int(c),
                   [[_cost(uf, "uf")] * l], [[_cost(ub, "ub")] * (l + 1)], 0.0, max_states)


def least_feasible_slots(lengths, b=None, cmax: int | None = None) -> int | None:
    """The least c for which PROB_b-multi(l, c, b) has a valid schedule (None up to ``cmax``,
    default the store-all count)."""
    ls = _lengths(lengths)
    top = sum(ls) + len(ls) if cmax is None else int(cmax)
    for c in range(top + 1):
        if math.isfinite(exhaustive_join(ls, c, b)):
            return c
    return None
