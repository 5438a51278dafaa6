"""The seed paper's join-network model and its optimal dynamic program, exactly.

Paper: Beaumont, Herrmann, Pallez, Shilova, "Optimal Memory-aware Backpropagation of Deep Join
Networks", Inria RR-9273 (2019), written [J] below; restated with its errata in the project's spec
``join-networks.md``, Part A.

The model (slot model, [J] §3, Table 3)
---------------------------------------
A *join* has k branches (chains) of lengths l = (l_1, ..., l_k) that meet at one node, the *turn*
(loss and its gradient). Branch j has forward steps ``F_i^(j): x_i -> x_{i+1}`` and backward steps
``Fbar_i^(j): (x_i, xbar_{i+1}) -> xbar_i`` for 0 <= i < l_j; the turn maps the k values
``x_{l_j}^(j)`` to the k gradients ``xbar_{l_j}^(j)``. Memory is ``c`` slots of one value each; the
k branch inputs ``x_0^(j)`` are in memory at the start and count. Operations, as tuples:

============================  ==========================================  =======
op                            memory                                      cost
============================  ==========================================  =======
``("F", j, i)``               x_i -> x_{i+1} (in place)                   u_f
``("Fbar", j, i)``            {xbar_{i+1}, x_i} -> {xbar_i} (frees one)   u_b
``("Turn",)``                 every x_{l_j}^(j) -> xbar_{l_j}^(j)         u_t
``("S", j, i)``               copy x_i into a free slot ("checkpoint")   0
``("D", j, i)``               discard one copy of x_i                     0
``("Dbar", j)``               discard xbar_0^(j)                          0
============================  ==========================================  =======

Branches are numbered from 0 here. A schedule is valid when every op finds its inputs, at most c
values are held at every instant, no backward step (nor the turn) runs twice, and at the end every
xbar_0^(j) was computed and memory holds exactly {xbar_0^(j) : b_j = 1} (Problem 3,
PROB_b-multi(l, c, b); PROB_multi is b = 0). Its makespan is the sum of its ops' costs
(Definition 6). :func:`simulate` replays a schedule under exactly these rules.

What is computed
----------------
* :func:`opt0_table` -- Theorem 1: Opt_0(l, c), the single-chain building block PROB(l, c)
  (memory {x_0, xbar_{l+1}} -> {xbar_0}, l forward and l + 1 backward steps), with the l = 1 fix
  (Note [Theorem 1 range]).
* :func:`c_min` -- Lemma 4, the least number of slots (Note [Lemma 4 reading]).
* :class:`JoinDP` -- Theorem 3, eq. (5): Opt_b-multi(l, c, b) for every c up to a bound at once,
  and the canonical schedule that attains it (Note [Start positions], Note [Symmetric branches]).
  :func:`opt_bm_eq5` is eq. (5) transcribed literally (memoised recursion on sorted (l_j, b_j)
  pairs), kept as an independent cross-check.
* :class:`EquivChain` -- the paper's EQUIV-CHAIN baseline (§6, Fig. 10a; Note [EQUIV-CHAIN]).

Costs are homogeneous in the paper (u_f, u_b, u_t, scalars). Per-stage forward/backward times (unit
sizes still) are accepted as well -- one sequence per branch -- for the spec's time-heterogeneous
vectors (Note [Per-stage times]); everything below reduces to the paper's formulas for scalars.

NumPy only; no GPU code.
"""
from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

INF = math.inf
# A DP table bigger than this (float64 entries, 8 bytes each) is refused with an error that names
# its size: 50 M entries = 400 MB.
MAX_TABLE_ENTRIES = 50_000_000
_REL_TOL = 1e-9

# Note [Theorem 1 range]
# ----------------------
# Eq. (3) of [J] takes the minimum over 1 <= i < l, which is empty for l = 1: read literally it
# gives Opt_0(1, c) = +inf for every c > 3, although S, F_0, Fbar_1, Fbar_0 (u_f + 2 u_b) works
# with 3 slots already, and the error propagates to every entry that uses Opt_0(1, .). The fix
# (spec A.2.1) is the range 1 <= i <= l; i = l means "store x_l itself", after which the right part
# is PROB(0, c - 1) = u_b. ``opt0_table(..., fixed=False)`` keeps the printed range so the erratum
# can be shown (tests count the entries it gets wrong).
#
# Note [Lemma 4 reading]
# ----------------------
# Lemma 4's second case is printed "exists i: l_j = 0 and b_i = 0"; the proof ("we release the
# checkpoints from branches that are finished, i.e. those where l_i = 0 and b_i = 0") shows it means
# l_i. A branch of length 0 that need not keep its gradient frees its slot right after the turn,
# which is what lets the backward phase start without the extra slot.
#
# Note [Start positions]
# ----------------------
# Eq. (5) advances branch m by i steps, stores x_i^(m) and recurses on
# (l[m <- l_m - i], c - 1, b[m <- 1]). From a top-level (l, b0), every sub-problem is therefore fixed
# by the start positions s = (s_1, ..., s_k) reached on each branch (remaining lengths l_j - s_j)
# and b_j = 1 exactly when s_j > 0, else b0_j. :class:`JoinDP` indexes its table by s and c, i.e.
# it evaluates eq. (5) on exactly the sub-problems reachable from the top (the paper's (l, b) key
# with b derived), one NumPy row per state holding every c at once. Keeping the position (not only
# the remaining length) is what per-stage times need; for the paper's homogeneous costs it is the
# same recursion. Sub-states have a larger sum of s, so states are filled by decreasing sum.
#
# Note [Symmetric branches]
# -------------------------
# The paper's Remark after Theorem 3: identical branches are interchangeable, so only one
# representative of each permutation class needs solving (the paper keeps l sorted). Here branches
# with the same length, flag b0_j and stage costs form a group; only states whose positions are
# non-decreasing inside every group are solved, their row is copied to every permutation, and among
# branches of a group at the same position only the first is tried as m (the others give the same
# candidates). SNN (3 equal branches) solves about 1/6 of the states.
#
# Note [Per-stage times]
# -----------------------
# [J] assumes one cost u_f for every forward step and u_b for every backward step. The spec (A.4)
# also gives vectors with per-stage times (unit sizes kept): uf[j][i] is the cost of F_i^(j),
# ub[j][i] that of Fbar_i^(j). Eq. (5) carries over with the state keyed by start positions (Note
# [Start positions]): the i forward steps cost uf[m][s_m..s_m+i-1], and Opt_0(i-1, .) becomes
# Theorem 1's recursion over the very steps it reverses (``_chain_tables``). With constant costs
# every piece is the paper's formula. Whether canonical schedules stay optimal with unequal times
# is not proved in [J]; the spec checked it by exhaustive search on 359 random instances and the
# tests check it again (tests/test_join_paper.py), so treat it as verified, not as a theorem.
#
# Note [Store-all cap]
# --------------------
# With c >= store_all_slots(l) = sum_j (l_j + 1) every value can stay in memory until it is used,
# and the makespan is the lower bound sum(u_f) + sum(u_b) + u_t (every forward and backward step
# once, the turn once): no schedule can do better with more slots. Tables therefore stop at that
# column and answer larger c from it; tests check the value there is the lower bound.


# ---------------------------------------------------------------------------- inputs
def _lengths(lengths) -> tuple[int, ...]:
    try:
        values = list(lengths)
    except TypeError:
        raise ValueError(f"lengths {lengths!r}: expected a sequence of branch lengths, e.g. (10, 50)") from None
    if not values:
        raise ValueError("lengths is empty: a join needs at least one branch, e.g. (10, 50)")
    out = []
    for n, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"branch length {v!r} (branch {n} of {tuple(values)}) is not an integer >= 0; "
                             "a length counts the forward steps of a branch")
        out.append(int(v))
    return tuple(out)


def _flags(b, k: int) -> tuple[int, ...]:
    if b is None:
        return (0,) * k
    flags = tuple(int(x) for x in b)
    if len(flags) != k or any(x not in (0, 1) for x in flags):
        raise ValueError(f"b {tuple(b)!r}: expected {k} flags, each 0 or 1 (1 = keep that branch's xbar_0)")
    return flags


def _cost(value, what: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{what} = {value!r}: costs must be finite and >= 0")
    return v


def _is_scalar(u) -> bool:
    return np.isscalar(u) or (isinstance(u, np.ndarray) and u.ndim == 0)


def _stage_costs(u, lengths: tuple[int, ...], what: str) -> list[np.ndarray]:
    """One array per branch (length l_j) of per-step costs: ``u`` is a scalar (the paper) or one
    sequence per branch (Note [Per-stage times])."""
    if _is_scalar(u):
        v = _cost(u, what)
        return [np.full(n, v) for n in lengths]
    rows = list(u)
    if len(rows) != len(lengths):
        raise ValueError(f"{what}: {len(rows)} per-branch cost lists for {len(lengths)} branches; give one "
                         "list per branch or a scalar")
    out = []
    for j, (row, n) in enumerate(zip(rows, lengths, strict=True)):
        arr = np.array([_cost(x, f"{what}[{j}]") for x in row], dtype=np.float64)
        if arr.shape != (n,):
            raise ValueError(f"{what}[{j}] has {arr.size} costs for a branch of length {n}; give one per step")
        out.append(arr)
    return out


def _uniform(arrays: list[np.ndarray]) -> float | None:
    """The common value of every entry of ``arrays``, or None when they differ."""
    flat = np.concatenate([a for a in arrays if a.size] or [np.zeros(0)])
    if flat.size == 0:
        return 0.0
    return float(flat[0]) if np.all(flat == flat[0]) else None


def _close(a: float, b: float) -> bool:
    """Equal up to float summation noise (two infinities are not a match: they are no choice)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= _REL_TOL * max(1.0, abs(a), abs(b))


def _shift(row: np.ndarray, by: int) -> np.ndarray:
    """``out[..., c] = row[..., c - by]`` (+inf where c < by)."""
    out = np.full_like(row, INF)
    if by < row.shape[-1]:
        out[..., by:] = row[..., :row.shape[-1] - by]
    return out


# ---------------------------------------------------------------------------- closed quantities
def c_min(lengths, b=None) -> int:
    """Lemma 4: the least number of slots for PROB_b-multi(l, c, b) (Note [Lemma 4 reading]).

    k if l = 0; else L = k + #{j : l_j != 0} when some l_j = 1 or some branch has l_j = 0 and
    b_j = 0; else L + 1."""
    ls = _lengths(lengths)
    bs = _flags(b, len(ls))
    k = len(ls)
    if not any(ls):
        return k
    big_l = k + sum(1 for n in ls if n)
    if any(n == 1 for n in ls) or any(n == 0 and f == 0 for n, f in zip(ls, bs, strict=True)):
        return big_l
    return big_l + 1


def store_all_slots(lengths) -> int:
    """Slots to keep every forward value until it is used: sum_j (l_j + 1) (Note [Store-all cap])."""
    ls = _lengths(lengths)
    return sum(ls) + len(ls)


def lower_bound(lengths, uf=1.0, ub=1.0, ut=1.0) -> float:
    """Makespan with unlimited memory: each forward step, each backward step and the turn once."""
    ls = _lengths(lengths)
    return float(sum(a.sum() for a in _stage_costs(uf, ls, "uf")) + sum(a.sum() for a in _stage_costs(ub, ls, "ub"))
                 + _cost(ut, "ut"))


# ---------------------------------------------------------------------------- Theorem 1
def opt0_table(lmax: int, cmax: int, uf: float = 1.0, ub: float = 1.0, *, fixed: bool = True) -> np.ndarray:
    """Theorem 1 ([J], from Aupy et al. 2016): ``T[l, c] = Opt_0(l, c)`` for 0 <= l <= lmax,
    0 <= c <= cmax, +inf where infeasible.

    (1) Opt_0(0, c) = u_b for c >= 2; (2) Opt_0(l, 3) = l(l+1)/2 u_f + (l+1) u_b for l > 0;
    (3) Opt_0(l, c) = min_i { i u_f + Opt_0(l-i, c-1) + Opt_0(i-1, c) } for l > 0, c > 3, over
    1 <= i <= l (``fixed=True``) or the printed 1 <= i < l (``fixed=False``; Note [Theorem 1 range]).
    """
    lmax, cmax = int(lmax), int(cmax)
    if lmax < 0 or cmax < 0:
        raise ValueError(f"opt0_table({lmax}, {cmax}): both bounds must be >= 0")
    uf, ub = _cost(uf, "uf"), _cost(ub, "ub")
    t = np.full((lmax + 1, cmax + 1), INF)
    if cmax >= 2:
        t[0, 2:] = ub                                                       # (1)
    for l in range(1, lmax + 1):
        if cmax >= 3:
            t[l, 3] = l * (l + 1) / 2 * uf + (l + 1) * ub                   # (2)
        top = l if fixed else l - 1
        if cmax >= 4 and top >= 1:                                          # (3), every c > 3 at once
            i = np.arange(1, top + 1)
            cand = i[:, None] * uf + t[l - i, 3:cmax] + t[i - 1, 4:cmax + 1]
            t[l, 4:] = cand.min(axis=0)
    return t


def opt0(l: int, c: int, uf: float = 1.0, ub: float = 1.0) -> float:
    """Opt_0(l, c) (Theorem 1 with the l = 1 fix); +inf when infeasible."""
    if c < 0:
        return INF
    return float(opt0_table(l, c, uf, ub)[l, c])


def _chain_tables(uf: np.ndarray, ub: np.ndarray, cmax: int) -> list[np.ndarray]:
    """``H[s][l, c]``: optimal makespan of PROB(l, c) on the steps s..s+l of one branch (forward
    steps F_s..F_{s+l-1}, backward steps Fbar_s..Fbar_{s+l}), for 0 <= s < n, 0 <= l < n - s.

    Homogeneous costs: every ``H[s]`` is a view of :func:`opt0_table`. Per-stage costs: Theorem 1's
    recursion with the costs of the steps it covers (Note [Per-stage times])."""
    n = uf.size
    if n == 0:
        return []
    fu, bu = _uniform([uf]), _uniform([ub])
    if fu is not None and bu is not None:
        t0 = opt0_table(n - 1, cmax, fu, bu)
        return [t0[:n - s] for s in range(n)]
    prefix = np.concatenate(([0.0], np.cumsum(uf)))
    h: list[np.ndarray] = [np.zeros(0)] * n
    for s in range(n - 1, -1, -1):
        a = np.full((n - s, cmax + 1), INF)
        if cmax >= 2:
            a[0, 2:] = ub[s]
        for l in range(1, n - s):
            if cmax < 3:
                break
            # c = 3 included: there only i = l is finite (c - 1 = 2 holds PROB(0, .) only), which is (2).
            rows = np.stack([h[s + i][l - i, 2:cmax] for i in range(1, l + 1)])
            fwd = prefix[s + 1:s + l + 1] - prefix[s]
            a[l, 3:] = (fwd[:, None] + rows + a[:l, 3:cmax + 1]).min(axis=0)
        h[s] = a
    return h


# ---------------------------------------------------------------------------- Theorem 3, eq. (5)
class JoinDP:
    """Opt_b-multi(l, c, b) of Theorem 3 for every c in 0..cmax, and its canonical schedules.

    Eq. (5) on the sub-problems reachable from (l, b) (Note [Start positions]), base cases
    Opt(0, c, b) = u_t for c >= k and Opt(e_i, c, b) = u_f + u_t + u_b for c >= k + 1, and
    +inf below c_min (Lemma 4). ``uf``/``ub``: scalars, or one per-step sequence per branch.
    """

    def __init__(self, lengths, cmax: int, b=None, uf=1.0, ub=1.0, ut=1.0):
        self.lengths = _lengths(lengths)
        self.k = len(self.lengths)
        self.b = _flags(b, self.k)
        if isinstance(cmax, bool) or not isinstance(cmax, (int, np.integer)) or cmax < 0:
            raise ValueError(f"cmax = {cmax!r}: the largest slot count must be an integer >= 0")
        self.cmax = int(cmax)
        self.uf = _stage_costs(uf, self.lengths, "uf")
        self.ub = _stage_costs(ub, self.lengths, "ub")
        self.ut = _cost(ut, "ut")
        self.c_store = store_all_slots(self.lengths)
        self.columns = min(self.cmax, self.c_store)  # Note [Store-all cap]
        shape = tuple(n + 1 for n in self.lengths) + (self.columns + 1,)
        entries = math.prod(shape)
        if entries > MAX_TABLE_ENTRIES:
            raise ValueError(
                f"lengths {self.lengths} with up to {self.columns} slots need a DP table of {entries:,} entries "
                f"({entries * 8 / 2**20:.0f} MiB), above the limit of {MAX_TABLE_ENTRIES:,}; use shorter or fewer "
                f"branches, or fewer slots (slots above {self.c_store}, the store-all count, change nothing)")
        self._prefix = [np.concatenate(([0.0], np.cumsum(u))) for u in self.uf]
        self._chain = [_chain_tables(self.uf[j], self.ub[j], self.columns) for j in range(self.k)]
        self._groups = self._group_branches()
        self.table = np.full(shape, INF)
        self.states_solved = 0
        self._fill()

    # -- structure
    def _group_branches(self) -> list[list[int]]:
        """Branches that are interchangeable (Note [Symmetric branches]), each group in index order."""
        keys: dict[tuple, list[int]] = {}
        for j in range(self.k):
            key = (self.lengths[j], self.b[j], self.uf[j].tobytes(), self.ub[j].tobytes())
            keys.setdefault(key, []).append(j)
        return list(keys.values())

    def _states(self) -> list[tuple[int, ...]]:
        """Canonical start-position vectors (non-decreasing inside each group), by decreasing sum."""
        per_group = [list(itertools.combinations_with_replacement(range(self.lengths[g[0]] + 1), len(g)))
                     for g in self._groups]
        out = []
        for combo in itertools.product(*per_group):
            s = [0] * self.k
            for g, values in zip(self._groups, combo, strict=True):
                for j, v in zip(g, values, strict=True):
                    s[j] = v
            out.append(tuple(s))
        out.sort(key=lambda s: -sum(s))
        return out

    def _images(self, s: tuple[int, ...]) -> set[tuple[int, ...]]:
        """Every state equal to ``s`` up to a permutation inside groups."""
        options = [set(itertools.permutations([s[j] for j in g])) for g in self._groups]
        out = set()
        for combo in itertools.product(*options):
            t = list(s)
            for g, values in zip(self._groups, combo, strict=True):
                for j, v in zip(g, values, strict=True):
                    t[j] = v
            out.add(tuple(t))
        return out

    def _moves(self, s: tuple[int, ...]) -> list[int]:
        """Branches m worth trying in eq. (5) at ``s``: not finished, and the first of their group
        at that position (Note [Symmetric branches])."""
        out = []
        for g in self._groups:
            seen = set()
            for j in g:
                if s[j] < self.lengths[j] and s[j] not in seen:
                    seen.add(s[j])
                    out.append(j)
        return out

    def flags(self, s: tuple[int, ...]) -> tuple[int, ...]:
        """b of the sub-problem at start positions ``s`` (Note [Start positions])."""
        return tuple(1 if s[j] > 0 else self.b[j] for j in range(self.k))

    def _candidates(self, s: tuple[int, ...], flags: tuple[int, ...], m: int) -> np.ndarray:
        """Eq. (5)'s terms for branch m at ``s``: row i - 1 holds, for every c,
        (forward steps s_m..s_m+i-1) + Opt(s + i e_m, c - 1) + Opt_0(i - 1, c - sum_{j != m} b_j)."""
        sm, n = s[m], self.lengths[m] - s[m]
        cols = self.columns + 1
        index = s[:m] + (slice(sm + 1, self.lengths[m] + 1),) + s[m + 1:]
        sub = self.table[index]                                   # (n, cols): Opt(s + i e_m, .)
        fwd = self._prefix[m][sm + 1:sm + n + 1] - self._prefix[m][sm]
        chain = self._chain[m][sm]                                # (n, cols): PROB(i - 1, .) from x_{s_m}
        kept = sum(flags) - flags[m]
        out = np.full((n, cols), INF)
        lo = max(1, kept)
        if lo < cols:
            out[:, lo:] = fwd[:, None] + sub[:, lo - 1:cols - 1] + chain[:, lo - kept:cols - kept]
        return out

    def _fill(self) -> None:
        cols = np.arange(self.columns + 1)
        for s in self._states():
            flags = self.flags(s)
            rest = tuple(n - p for n, p in zip(self.lengths, s, strict=True))
            low = c_min(rest, flags)
            if low > self.columns:
                continue  # infeasible for every c of the table (already +inf)
            if sum(rest) == 0:
                row = np.where(cols >= self.k, self.ut, INF)
            elif sum(rest) == 1:
                j = rest.index(1)
                row = np.where(cols >= self.k + 1, self.uf[j][s[j]] + self.ut + self.ub[j][s[j]], INF)
            else:
                row = np.full(self.columns + 1, INF)
                for m in self._moves(s):
                    row = np.minimum(row, self._candidates(s, flags, m).min(axis=0))
            row[:low] = INF
            self.states_solved += 1
            for t in self._images(s):
                self.table[t] = row

    # -- answers
    def _column(self, c: int) -> int:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise ValueError(f"c = {c!r}: a slot count is an integer")
        if c > self.cmax:
            raise ValueError(f"c = {c} is above cmax = {self.cmax} of this table; build JoinDP with cmax >= {c}")
        return min(int(c), self.columns)

    def makespan(self, c: int, s=None) -> float:
        """Opt_b-multi at ``c`` slots (+inf when infeasible); ``s``: a sub-problem's start positions."""
        if c < 0:
            return INF
        s = (0,) * self.k if s is None else tuple(s)
        return float(self.table[s + (self._column(c),)])

    def curve(self, slots) -> list[float]:
        return [self.makespan(int(c)) for c in slots]

    def choices(self, c: int, s=None) -> list[tuple[int, int, float]]:
        """Every finite term of eq. (5) at ``c`` (and start positions ``s``): (branch m, steps i,
        value), sorted by value; the optimum is the first value. Empty at a base case."""
        s = (0,) * self.k if s is None else tuple(s)
        col = self._column(c)
        flags = self.flags(s)
        out = []
        for m in range(self.k):
            if s[m] < self.lengths[m]:
                values = self._candidates(s, flags, m)[:, col]
                out += [(m, i + 1, float(v)) for i, v in enumerate(values) if math.isfinite(v)]
        return sorted(out, key=lambda t: (t[2], t[0], t[1]))

    def schedule(self, c: int, first: tuple[int, int] | None = None) -> list[tuple] | None:
        """The canonical schedule of Definition 8 that attains :meth:`makespan` (None when
        infeasible). ``first = (m, i)`` forces the top-level choice of eq. (5) instead of an
        optimal one (to replay a narrated, non-optimal choice)."""
        col = self._column(c) if c >= 0 else -1
        if col < 0 or not math.isfinite(self.table[(0,) * self.k + (col,)]):
            return None
        ops: list[tuple] = []
        self._emit_join((0,) * self.k, col, ops, first)
        return ops

    def _emit_join(self, s, c, ops, first=None) -> None:
        while True:
            flags = self.flags(s)
            if all(p == n for p, n in zip(s, self.lengths, strict=True)):
                ops.append(("Turn",))
                ops += [("Dbar", j) for j in range(self.k) if flags[j] == 0]
                return
            if first is not None:
                m, i = first
                if not (0 <= m < self.k and 1 <= i <= self.lengths[m] - s[m]):
                    raise ValueError(f"first = {first}: branch {m} has {self.lengths[m] - s[m]} steps to choose from")
                first = None
            else:
                target = float(self.table[s + (c,)])
                m, i = next((m, i + 1) for m in range(self.k) if s[m] < self.lengths[m]
                            for i, v in enumerate(self._candidates(s, flags, m)[:, c]) if _close(float(v), target))
            sm = s[m]
            kept = sum(flags) - flags[m]
            ops.append(("S", m, sm))
            ops += [("F", m, p) for p in range(sm, sm + i)]
            inner = s[:m] + (sm + i,) + s[m + 1:]
            self._emit_join(inner, c - 1, ops)
            self._emit_chain(m, sm, i - 1, c - kept, ops)
            if flags[m] == 0:
                ops.append(("Dbar", m))
            return

    def _emit_chain(self, j: int, s: int, l: int, c: int, ops: list) -> None:
        """PROB(l, c) on branch j from x_s with xbar_{s+l+1} (Theorem 1's recursion, replayed)."""
        h, prefix = self._chain[j], self._prefix[j]
        while l > 0:
            target = float(h[s][l, c])
            i = next(i for i in range(1, l + 1) if _close(
                prefix[s + i] - prefix[s] + float(h[s + i][l - i, c - 1]) + float(h[s][i - 1, c]), target))
            ops.append(("S", j, s))
            ops += [("F", j, p) for p in range(s, s + i)]
            self._emit_chain(j, s + i, l - i, c - 1, ops)
            l = i - 1  # then PROB(i - 1, c) from x_s with xbar_{s+i} (eq. (3)'s last term)
        ops.append(("Fbar", j, s))


def opt_bm(lengths, c: int, b=None, uf=1.0, ub=1.0, ut=1.0) -> float:
    """Opt_b-multi(l, c, b) (Theorem 3); +inf when infeasible."""
    if c < 0:
        return INF
    return JoinDP(lengths, int(c), b, uf, ub, ut).makespan(int(c))


def opt_bm_eq5(lengths, c: int, b=None, uf: float = 1.0, ub: float = 1.0, ut: float = 1.0) -> float:
    """Eq. (5) transcribed literally (homogeneous costs): memoised recursion on the sorted pairs
    (l_j, b_j) as in the paper's Remark, the c_min test first, then the two base cases, then the
    minimum over m and 0 < i <= l_m. Independent of :class:`JoinDP` (used to cross-check it)."""
    ls = _lengths(lengths)
    bs = _flags(b, len(ls))
    uf, ub, ut = _cost(uf, "uf"), _cost(ub, "ub"), _cost(ut, "ut")
    c = int(c)
    if c < 0:
        return INF
    t0 = opt0_table(max(ls), c, uf, ub)

    @functools.lru_cache(maxsize=None)
    def opt(state: tuple[tuple[int, int], ...], c: int) -> float:
        rest = tuple(n for n, _ in state)
        flags = tuple(f for _, f in state)
        if c < c_min(rest, flags):
            return INF
        if not any(rest):
            return ut                                      # c >= k by the test above
        if sum(rest) == 1:
            return uf + ut + ub                            # c >= k + 1 by the test above
        best, previous = INF, None
        for m, (lm, bm) in enumerate(state):
            if lm == 0 or (lm, bm) == previous:
                continue
            previous = (lm, bm)
            kept = sum(flags) - bm
            for i in range(1, lm + 1):
                sub = tuple(sorted(state[:m] + ((lm - i, 1),) + state[m + 1:]))
                chain = t0[i - 1, c - kept] if c - kept >= 0 else INF
                best = min(best, i * uf + opt(sub, c - 1) + chain)
        return best

    return float(opt(tuple(sorted(zip(ls, bs, strict=True))), c))


# ---------------------------------------------------------------------------- EQUIV-CHAIN
# Note [EQUIV-CHAIN]
# ------------------
# [J] §6, Fig. 10a: "group together operations that are at the same distance of the turn": a join
# of k branches of length n becomes a chain of n + 1 levels (level d holds the k values at distance
# n - d from the turn), whose forward step costs k u_f, backward step k u_b, and whose checkpoint
# takes k slots; the turn keeps its cost u_t. The chain is then solved optimally (the paper runs
# REV; here the k = 1 case of :class:`JoinDP`, which is optimal in this slot model) with
# floor(c / k) level slots. The definition needs every level to hold k values, so it applies to
# balanced joins (all lengths equal) only -- the paper uses it on SNN only -- and
# :class:`EquivChain` refuses others. Its schedule, each level op expanded into the k branch ops,
# is a valid join schedule (tests replay it), so EQUIV-CHAIN >= Opt_multi.

class EquivChain:
    """The EQUIV-CHAIN heuristic of [J] §6 (Note [EQUIV-CHAIN]) for every c in 0..cmax."""

    def __init__(self, lengths, cmax: int, uf: float = 1.0, ub: float = 1.0, ut: float = 1.0):
        self.lengths = _lengths(lengths)
        self.k = len(self.lengths)
        if len(set(self.lengths)) != 1:
            raise ValueError(f"EQUIV-CHAIN needs a balanced join (all branch lengths equal), got lengths "
                             f"{','.join(map(str, self.lengths))}; the paper defines it for balanced graphs only "
                             "(use the optimal method)")
        if not (_is_scalar(uf) and _is_scalar(ub)):
            raise ValueError("EQUIV-CHAIN takes scalar costs u_f, u_b, u_t (the paper's homogeneous model)")
        self.cmax = int(cmax)
        self.chain = JoinDP((self.lengths[0],), self.cmax // self.k, uf=self.k * _cost(uf, "uf"),
                            ub=self.k * _cost(ub, "ub"), ut=ut)

    def makespan(self, c: int) -> float:
        if c > self.cmax:
            raise ValueError(f"c = {c} is above cmax = {self.cmax}; build EquivChain with cmax >= {c}")
        return self.chain.makespan(int(c) // self.k) if c >= 0 else INF

    def curve(self, slots) -> list[float]:
        return [self.makespan(int(c)) for c in slots]

    def schedule(self, c: int) -> list[tuple] | None:
        """The level schedule expanded into branch ops (every level op becomes k ops)."""
        ops = self.chain.schedule(int(c) // self.k) if c >= 0 else None
        if ops is None:
            return None
        out: list[tuple] = []
        for op in ops:
            if op[0] == "Turn":
                out.append(op)
            else:
                out += [(op[0], j) + tuple(op[2:]) for j in range(self.k)]
        return out


def solver(method: str, lengths, cmax: int, uf=1.0, ub=1.0, ut=1.0):
    """:class:`JoinDP` (``"optimal"``) or :class:`EquivChain` (``"equiv-chain"``)."""
    if method == "optimal":
        return JoinDP(lengths, cmax, None, uf, ub, ut)
    if method == "equiv-chain":
        return EquivChain(lengths, cmax, uf, ub, ut)
    raise ValueError(f"method {method!r}: expected 'optimal' or 'equiv-chain'")


def makespan_curve(lengths, slots, method: str = "optimal", uf=1.0, ub=1.0, ut=1.0) -> list[float]:
    """PROB_multi makespans at every slot count of ``slots`` (+inf where infeasible), one DP."""
    slots = [int(c) for c in slots]
    return solver(method, lengths, max(slots + [0]), uf, ub, ut).curve(slots)


# ---------------------------------------------------------------------------- simulator
class ScheduleError(ValueError):
    """A schedule breaks a rule of the slot model (the message names the op and the rule)."""


@dataclass(frozen=True)
class Replay:
    """What :func:`simulate` measured."""
    makespan: float
    peak: int
    forwards: int
    backwards: int
    turns: int


def simulate(ops, lengths, c: int, b=None, uf=1.0, ub=1.0, ut=1.0) -> Replay:
    """Replay ``ops`` in the slot model of Table 3 (module docstring) with ``c`` slots; raise
    :class:`ScheduleError` at the first broken rule, else return the makespan and the peak."""
    ls = _lengths(lengths)
    k = len(ls)
    bs = _flags(b, k)
    ufs, ubs, ut = _stage_costs(uf, ls, "uf"), _stage_costs(ub, ls, "ub"), _cost(ut, "ut")
    memory: Counter = Counter(("x", j, 0) for j in range(k))
    held = k
    if held > c:
        raise ScheduleError(f"the {k} branch inputs do not fit in c = {c} slots")
    peak, time = held, 0.0
    forwards = backwards = turns = 0
    done: set[tuple[int, int]] = set()

    def take(n, op, value):
        if memory[value] < 1:
            raise ScheduleError(f"op {n} {op}: its input {value} is not in memory")
        memory[value] -= 1
        if not memory[value]:
            del memory[value]

    def where(n, op, j, i, top):
        if not (isinstance(j, int) and 0 <= j < k and isinstance(i, int) and 0 <= i < top):
            raise ScheduleError(f"op {n} {op}: no such step for lengths {ls}")

    for n, op in enumerate(ops):
        kind = op[0]
        if kind == "F":
            _, j, i = op
            where(n, op, j, i, ls[j] if 0 <= j < k else 0)
            take(n, op, ("x", j, i))
            memory[("x", j, i + 1)] += 1
            time += ufs[j][i]
            forwards += 1
        elif kind == "Fbar":
            _, j, i = op
            where(n, op, j, i, ls[j] if 0 <= j < k else 0)
            if (j, i) in done:
                raise ScheduleError(f"op {n} {op}: backward steps cannot be recomputed")
            take(n, op, ("xbar", j, i + 1))
            take(n, op, ("x", j, i))
            memory[("xbar", j, i)] += 1
            done.add((j, i))
            held -= 1
            time += ubs[j][i]
            backwards += 1
        elif kind == "Turn":
            if turns:
                raise ScheduleError(f"op {n} {op}: the turn cannot run twice")
            for j in range(k):
                take(n, op, ("x", j, ls[j]))
            for j in range(k):
                memory[("xbar", j, ls[j])] += 1
            time += ut
            turns += 1
        elif kind == "S":
            _, j, i = op
            where(n, op, j, i, ls[j] + 1 if 0 <= j < k else 0)
            if memory[("x", j, i)] < 1:
                raise ScheduleError(f"op {n} {op}: its input {('x', j, i)} is not in memory")
            memory[("x", j, i)] += 1
            held += 1
        elif kind == "D":
            _, j, i = op
            take(n, op, ("x", j, i))
            held -= 1
        elif kind == "Dbar":
            _, j = op
            take(n, op, ("xbar", j, 0))
            held -= 1
        else:
            raise ScheduleError(f"op {n} {op}: unknown operation (expected F, Fbar, Turn, S, D, Dbar)")
        if held > c:
            raise ScheduleError(f"op {n} {op}: {held} values held, above c = {c} slots")
        peak = max(peak, held)
    if not turns:
        raise ScheduleError("the schedule never runs the turn")
    for j in range(k):
        if ls[j] and (j, 0) not in done:
            raise ScheduleError(f"xbar_0 of branch {j} is never computed")
    final = Counter({("xbar", j, 0): 1 for j in range(k) if bs[j]})
    if +memory != final:
        raise ScheduleError(f"final memory {dict(+memory)} is not {dict(final)} (b = {bs})")
    return Replay(makespan=time, peak=peak, forwards=forwards, backwards=backwards, turns=turns)
