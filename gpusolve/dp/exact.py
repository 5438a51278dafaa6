"""Exact DP without buckets: for every sub-chain (i, j) the Pareto front of (peak bytes, time).

The recurrences are those of :mod:`gpusolve.dp.problem` in exact bytes: the thresholds are
``Problem.thr_tape`` / ``Problem.thr_ckpt`` of ``Problem.build(chain, bucket_bytes=1, ...)``, as
:mod:`gpusolve.dp.minpeak` uses them. C(i, j, b), the least time within b bytes, is a
non-increasing step function of b; the front F(i, j) is its list of breakpoints: peaks ascending,
times strictly decreasing, C(i, j, b) = the time of the last point with peak <= b (+inf below the
first).

- Tape, j = i+1: one point (thr_tape, t_tape[i+1]).
- Tape, j > i+1 (``multi_tape`` only): (max(thr_tape, tape[i+1] + p), t_tape[i+1] + t) for (p, t) in
  F(i+1, j).
- Checkpoint k: f_k(b) = (sfn(i, k) + R(b - act[k])) + L(b) for b >= thr_ckpt, R = C(k, j, .),
  L = C(i, k, .). Every breakpoint of f_k is act[k] + r for a peak r of F(k, j) ("right point") or
  a peak l of F(i, k) ("left point"), raised to thr_ckpt: a candidate below the threshold, raised
  to it, carries a value >= f_k(thr), and the largest one carries exactly f_k(thr).

The minimum of non-increasing step functions is the running minimum of all their breakpoints in
order of b. Per pair (i, j), vectorised over every k at once:

1. Row buffer i holds F(i, i+1), F(i, i+2), ... back to back and column buffer j holds F(j-1, j),
   F(j-2, j), ...: when (i, j) is solved these are exactly the left and right fronts of all its
   checkpoints, so nothing is concatenated. Every front sits behind a sentinel point of time +inf,
   and row keys are segment-major (k * span + off + peak, sentinel k * span), so one
   ``searchsorted`` of every right point's key in row key space (k * span + off + act[k] + r)
   lands in its own segment k: on the left point that prices it, or on the sentinel (+inf) when
   F(i, k) has nothing that low. No validity masks.
2. The left points need the right front at l - act[k]: with ``below`` the searchsorted above,
   #{right points <= left key q} = #{right points with below <= q}, a ``bincount`` and ``cumsum``
   (linear, no second search). Ties (act[k] + r = l) are priced exactly by the left point.
3. Prefilter: U = the front of the outermost checkpoints k = i+1, k = j-1 and Tape, an upper
   bound of the result that is usually close to it. A candidate with v >= U(b) is dominated by a
   point of U; U(b) is read through a bucket table (:func:`_step_values`). On densenet121_b64 about
   7 % of the candidates survive.
4. One argsort of U and the survivors by b, ``np.minimum.accumulate``, keep strict decreases, and
   the last point of equal peaks.

Times are float64, accumulated as the DP does: ``(sfn + right) + left`` and ``t_tape + right``,
``sfn = fwd_prefix[k] - fwd_prefix[i]``. They equal the CPU backend run with a float64 table at a
one-byte bucket bit for bit; the bucketed tables of the default backends are float32. Two
policies of the same true time summed in different orders can differ in the last ulp, so a front
may keep a "step" of one ulp (never seen on the bundled profiles; the tests compare to
enumeration modulo such steps).

Cost: S = sum over pairs of sum_k |F(k, j)| + |F(i, k)| candidates, each a constant number of
NumPy passes and one binary search (45-65 ns per candidate on the shared 2-CPU bench machine,
bench/results/exact_speed.md). With fronts of at
most P points: O(N^3 P log P) time, O(N^2 P) memory (every point stored in its row and its
column: :data:`POINT_BYTES`). ``max_bytes`` drops points above it: exact for budgets up to it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..chain import Chain
from ..schedule import Policy
from .buckets import HOST_MEMORY_FRACTION, available_host_bytes
from .recover import walk_policy
from .problem import Problem

# Stored bytes per front point: row copy (key, peak, time, prefix: 8 B each) and column copy
# (the same and a needle), plus one sentinel per front.
POINT_BYTES = 72
# The fronts may take HOST_MEMORY_FRACTION of the available host memory (gpusolve.dp.buckets).


class _Buffer:
    """Fronts stored back to back in growable arrays, each behind a sentinel point of time +inf.

    ``key``: the sorted search key; ``b``: the point's candidate budget before the threshold;
    ``t``: its time; ``pk``: fwd_prefix[k] of its segment k (so sfn(i, k) = pk - fwd_prefix[i]);
    ``needle`` (column buffers only): the point's key in row key space (see module docstring).
    """

    __slots__ = ("size", "key", "needle", "b", "t", "pk", "fields")

    def __init__(self, needle: bool, capacity: int = 64):
        self.size = 0
        self.fields = ("key", "b", "t", "pk") + (("needle",) if needle else ())
        self.key = np.empty(capacity, dtype=np.int64)
        self.needle = np.empty(capacity, dtype=np.int64) if needle else None
        self.b = np.empty(capacity, dtype=np.int64)
        self.t = np.empty(capacity, dtype=np.float64)
        self.pk = np.empty(capacity, dtype=np.float64)

    def append(self, base: int, off: int, peaks, b0: int, times, pk: float, needle_base: int = 0) -> tuple[int, int]:
        """Append a sentinel (key ``base``, needle ``needle_base``, time +inf) and the front: keys
        ``base + off + peaks``, budgets ``b0 + peaks``, needles ``needle_base + off + b0 + peaks``.
        Returns the points' range (lo, hi)."""
        lo = self.size + 1
        hi = lo + len(peaks)
        if hi > len(self.key):
            capacity = max(hi, 2 * len(self.key))
            for name in self.fields:
                old = getattr(self, name)
                new = np.empty(capacity, dtype=old.dtype)
                new[:self.size] = old[:self.size]
                setattr(self, name, new)
        s = lo - 1
        self.key[s] = base
        self.b[s] = 0
        self.t[s] = np.inf
        np.add(peaks, base + off, out=self.key[lo:hi])
        np.add(peaks, b0, out=self.b[lo:hi])
        self.t[lo:hi] = times
        self.pk[s:hi] = pk
        if self.needle is not None:
            self.needle[s] = needle_base
            np.add(peaks, needle_base + off + b0, out=self.needle[lo:hi])
        self.size = hi
        return lo, hi

    def trim(self) -> None:
        for name in self.fields:
            setattr(self, name, getattr(self, name)[:self.size].copy())

    @property
    def nbytes(self) -> int:
        return len(self.key) * 8 * len(self.fields)


@dataclass
class ExactFronts:
    """Every front F(i, j) of one chain, with lookups and policy recovery.

    ``max_bytes``: points above it were dropped (None: complete fronts); values and policies are
    exact for budgets up to it. ``sizes[i, j]`` = number of points of F(i, j).
    """

    chain: Chain
    problem: Problem
    max_bytes: int | None
    span: int                   # keys: segment * span + off + peak (sentinels at segment * span)
    off: int
    bound: int                  # every peak of every policy is at most this (sum of all sizes)
    rows: list
    cols: list
    row_range: np.ndarray       # int64[N+1, N+1, 2]: F(i, j) = rows[i][lo:hi]
    sizes: np.ndarray           # int64[N+1, N+1]
    act: np.ndarray             # int64[N+1]: act_bytes by stage (0 = input)
    tape: np.ndarray            # int64[N+1]: tape_bytes by stage
    seconds: float = 0.0
    candidates: int = 0         # breakpoint candidates evaluated (the work measure)
    stats: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ fronts and values
    def front(self, i: int = 0, j: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """F(i, j) (default (0, N)) as (peaks int64 bytes ascending, times float64 ms strictly decreasing)."""
        j = self.problem.n if j is None else j
        if not 0 <= i < j <= self.problem.n:
            raise ValueError(f"({i}, {j}) is not a sub-chain of a {self.problem.n}-stage chain")
        lo, hi = self.row_range[i, j]
        buf = self.rows[i]
        return buf.b[lo:hi].copy(), buf.t[lo:hi].copy()

    def value(self, budget_bytes: int, i: int = 0, j: int | None = None) -> float:
        """C(i, j, budget) in ms (+inf when nothing fits); exact for budgets up to ``max_bytes``."""
        budget = self._check_budget(budget_bytes)
        peaks, times = self.front(i, j)
        at = int(np.searchsorted(peaks, budget, side="right")) - 1
        return float(times[at]) if at >= 0 else float("inf")

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(budget_bytes, time_ms) of the whole chain: the breakpoints of its optimal time."""
        return self.front()

    def _check_budget(self, budget_bytes) -> int:
        budget = _whole_bytes(budget_bytes, "budget_bytes")
        if self.max_bytes is not None and budget > self.max_bytes:
            raise ValueError(f"budget {budget} B is above max_bytes = {self.max_bytes} B of these fronts (points above "
                             f"it were dropped); solve again with max_bytes >= {budget} or max_bytes=None")
        return budget

    # ------------------------------------------------------------------ recovery
    def _lookup_right(self, j: int, ks: np.ndarray, b: np.ndarray) -> np.ndarray:
        """C(k, j, b) for each k (b may be negative: +inf there)."""
        buf = self.cols[j]
        n = self.problem.n
        at = np.searchsorted(buf.key, (n - ks) * self.span + self.off + b, side="right") - 1
        return buf.t[at]

    def _lookup_left(self, i: int, ks: np.ndarray, b: int) -> np.ndarray:
        """C(i, k, b) for each k."""
        buf = self.rows[i]
        at = np.searchsorted(buf.key, ks * self.span + self.off + b, side="right") - 1
        return buf.t[at]

    def choose(self, i: int, j: int, budget: int) -> tuple[int, float]:
        """(choice, value) at state (i, j, budget bytes): 0 for Tape, else checkpoint k.

        Same candidates and float order as the fronts; among candidates of minimal value Tape
        wins, then the smallest k (the rule of :mod:`gpusolve.dp.recover`).
        """
        p = self.problem
        b = min(int(budget), self.bound)
        if j == i + 1:
            if b < int(p.thr_tape(i, j)):
                raise ValueError(f"state ({i}, {j}, {budget} B) is infeasible")
            return 0, float(p.t_tape[i + 1])
        best_t = np.inf
        if p.multi_tape and b >= int(p.thr_tape(i, j)):
            best_t = p.t_tape[i + 1] + self._lookup_right(j, np.array([i + 1]), np.array([b - self.tape[i + 1]]))[0]
        ks = np.arange(i + 1, j, dtype=np.int64)
        ks = ks[b >= p.thr_ckpt(i, j, ks)]
        best_k, k = np.inf, 0
        if len(ks):
            cand = (p.sfn(i, ks) + self._lookup_right(j, ks, b - self.act[ks])) + self._lookup_left(i, ks, b)
            at = int(np.argmin(cand))
            best_k, k = cand[at], int(ks[at])
        if not np.isfinite(min(best_t, best_k)):
            raise ValueError(f"state ({i}, {j}, {budget} B) is infeasible")
        if best_t <= best_k:
            return 0, float(best_t)
        return k, float(best_k)

    def policy(self, budget_bytes: int) -> Policy:
        """The optimal policy of the whole chain within ``budget_bytes`` (ValueError if none fits)."""
        budget = self._check_budget(budget_bytes)
        n = self.problem.n
        peaks, _ = self.front()
        if not len(peaks) or budget < peaks[0]:
            least = (f"the least feasible budget is {int(peaks[0])} B" if len(peaks)
                     else "no policy fits up to max_bytes")
            raise ValueError(f"budget {budget} B is infeasible: {least}")
        return walk_policy(lambda i, j, b: self.choose(i, j, b)[0], n, budget, self.tape, self.act)


def _whole_bytes(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} = {value!r}: it must be a whole number of bytes (int), e.g. 6 * 2**30")
    if value < 0:
        raise ValueError(f"{name} = {value} B is negative; it must be >= 0 bytes")
    return int(value)


def solve_fronts(chain: Chain, max_bytes: int | None = None, progress=None,
                 memory_limit_bytes: int | None = None, on_diagonal=None) -> ExactFronts:
    """Every front F(i, j) of ``chain``, diagonal by diagonal.

    ``max_bytes``: drop points above it (exact for budgets up to it; far fewer points at low
    budgets). ``progress(pairs)`` is called after every pair with 1; ``on_diagonal(d, candidates,
    points)`` after every diagonal d (pairs (i, i + d)) with its candidates evaluated and front
    points kept (for time predictions, see bench/exact_speed.py). ``memory_limit_bytes``
    (default 60 % of available host memory) bounds the stored fronts: ``MemoryError`` as soon as
    they exceed it, or when the smallest plausible total (the pairs left, each at the mean size of
    the last diagonal) would.
    """
    if not isinstance(chain, Chain):
        raise TypeError(f"solve_fronts() needs a gpusolve.Chain, got {type(chain).__name__}")
    if max_bytes is not None:
        max_bytes = _whole_bytes(max_bytes, "max_bytes")
    if memory_limit_bytes is None:
        available = available_host_bytes()
        memory_limit_bytes = int(HOST_MEMORY_FRACTION * available) if available else None
    started = time.perf_counter()
    problem = Problem.build(chain, bucket_bytes=1, buckets=0, dtype=np.float64)
    n = problem.n
    padded = chain.padded()
    act, tape = padded["act_bytes"], padded["tape_bytes"]
    # Every peak of every policy is at most what all tensors take together plus the worst transient
    # (each threshold array holds one step's workspace and whatever the chain reserves), so every
    # looked-up budget lies in [-bound, 2 bound] and keys stay inside their segment.
    bound = int(np.sum(act) + np.sum(tape) + np.sum(problem.grad_bytes)
                + max(int(problem.tape_need.max()), int(problem.tape_fwd.max()), int(problem.nograd_peak.max())))
    off = 1 << int(2 * bound + 2).bit_length()
    span = 2 * off
    if (n + 2) * span >= 1 << 62:
        raise ValueError(f"sizes sum to {bound} B over {n} stages: too large for 64-bit segment keys "
                         f"((N + 2) x {span} >= 2^62); express sizes in coarser units")
    prefix = problem.fwd_prefix
    rows = [_Buffer(needle=False) for _ in range(n + 1)]
    cols = [_Buffer(needle=True) for _ in range(n + 1)]
    row_range = np.zeros((n + 1, n + 1, 2), dtype=np.int64)
    sizes = np.zeros((n + 1, n + 1), dtype=np.int64)
    cap = max_bytes
    candidates = 0
    for d in range(1, n + 1):
        diag_points = 0
        diag_candidates = candidates
        for i in range(0, n + 1 - d):
            j = i + d
            thr_t = int(problem.thr_tape(i, j))
            if d == 1:
                keep = cap is None or thr_t <= cap
                peaks = np.array([thr_t] if keep else [], dtype=np.int64)
                times = np.array([problem.t_tape[i + 1]] if keep else [], dtype=np.float64)
            else:
                peaks, times, count = _pair_front(problem, rows[i], cols[j], sizes, i, j, thr_t, cap, act, tape)
                candidates += count
            size = len(peaks)
            sizes[i, j] = size
            # Row i, segment j: the left front of (i, j') for j' > j.
            row_range[i, j] = rows[i].append(j * span, off, peaks, 0, times, prefix[j])
            # Column j, segment i: the right front of (i', j) for i' < i; its needles look up
            # F(i', i) at act[i] + r in row i' (key i * span + off + act[i] + r).
            cols[j].append((n - i) * span, off, peaks, act[i], times, prefix[i], needle_base=i * span)
            diag_points += size
            if progress is not None:
                progress(1)
        if on_diagonal is not None:
            on_diagonal(d, candidates - diag_candidates, diag_points)
        if memory_limit_bytes:
            held = sum(buf.nbytes for buf in rows) + sum(buf.nbytes for buf in cols)
            remaining = (n - d) * (n + 1 - d) // 2
            floor = held + remaining * (diag_points / (n + 1 - d) + 1) * POINT_BYTES
            if floor > memory_limit_bytes:
                raise MemoryError(
                    f"exact fronts need more than {floor / 2**30:.2f} GiB ({held / 2**30:.2f} GiB held after diagonal "
                    f"{d} of {n}, mean front {diag_points / (n + 1 - d):.0f} points, {POINT_BYTES} B/point) but the "
                    f"limit is {memory_limit_bytes / 2**30:.2f} GiB; pass max_bytes=<budget> (points above the budget "
                    f"are dropped) or use the bucketed backend (backend='cpu')")
    for buf in rows + cols:
        buf.trim()
    upper = np.triu_indices(n + 1, 1)
    front_sizes = sizes[upper]
    result = ExactFronts(chain=chain, problem=problem, max_bytes=max_bytes, span=span, off=off, bound=bound,
                         rows=rows, cols=cols, row_range=row_range, sizes=sizes, act=act, tape=tape,
                         seconds=time.perf_counter() - started, candidates=int(candidates))
    result.stats = {"pairs": int(len(front_sizes)), "points": int(front_sizes.sum()),
                    "max_front": int(front_sizes.max()), "mean_front": float(front_sizes.mean()),
                    "front_0N": int(sizes[0, n]), "candidates": int(candidates),
                    "stored_bytes": int(sum(b.nbytes for b in rows + cols)), "seconds": result.seconds}
    return result


def _pair_front(problem: Problem, row: _Buffer, col: _Buffer, sizes, i: int, j: int, thr_t: int, cap, act, tape):
    """F(i, j), j > i + 1, from row buffer i (F(i, k), k < j) and column buffer j (F(k, j), k > i).

    Returns (peaks, times, number of candidates evaluated).
    """
    ks = np.arange(i + 1, j, dtype=np.int64)
    thr_k = problem.thr_ckpt(i, j, ks)
    p_i = problem.fwd_prefix[i]
    nr, nl = col.size, row.size
    nt = int(sizes[i + 1, j]) if problem.multi_tape else 0
    total = nr + nl + nt
    b = np.empty(total, dtype=np.int64)
    v = np.empty(total, dtype=np.float64)
    # Right points (column j holds k = j-1 .. i+1): b = act[k] + r, left time looked up in row i:
    # the last row key strictly below the needle (a tie b = act[k] + r = l is evaluated exactly by
    # the left point l, below, at the same b).
    br, vr = b[:nr], v[:nr]
    below = np.searchsorted(row.key[:nl], col.needle[:nr], side="left")
    np.subtract(col.pk[:nr], p_i, out=vr)
    vr += col.t[:nr]
    vr += row.t[:nl][below - 1]
    size_r = sizes[ks, j] + 1  # column segments (sentinel included), by ascending k
    np.maximum(col.b[:nr], np.repeat(thr_k[::-1], size_r[::-1]), out=br)
    # Left points (row i holds k = i+1 .. j-1): b = l, right time of the last right point with
    # act[k] + r <= l. Row key q has #{needles <= key q} = #{needles with below <= q}; in ascending
    # key order segment k's needles follow those of k' < k, in the column they sit at col_start(k).
    bl, vl = b[nr:nr + nl], v[nr:nr + nl]
    count = np.cumsum(np.bincount(below, minlength=nl + 1)[:nl])
    before = np.cumsum(size_r) - size_r        # needles of the segments k' < k
    col_start = nr - before - size_r            # the column stores the largest k first
    count += np.repeat(col_start - before - 1, sizes[i, ks] + 1)
    np.subtract(row.pk[:nl], p_i, out=vl)
    vl += col.t[count]
    vl += row.t[:nl]
    np.maximum(row.b[:nl], np.repeat(thr_k, sizes[i, ks] + 1), out=bl)
    if nt:  # Tape: F(i+1, j) is the last front of column j
        lo = nr - nt
        bt = b[nr + nl:]
        np.subtract(col.b[lo:nr], act[i + 1] - tape[i + 1], out=bt)
        np.maximum(bt, thr_t, out=bt)
        np.add(problem.t_tape[i + 1], col.t[lo:nr], out=v[nr + nl:])
    if total > 4 * (nt + 1 + sizes[j - 1, j] + sizes[i, i + 1] + sizes[i, j - 1] + 4):
        # Prefilter: U = the envelope of the outermost checkpoints (k = i+1, k = j-1) and Tape, an
        # upper bound of the result that is usually close to it. A candidate with v >= U(b) is
        # dominated by a point of U (kept below), so only v < U(b) goes on to the sort.
        n_first_col, n_first_row = int(sizes[j - 1, j]) + 1, int(sizes[i, i + 1]) + 1
        n_last_col, n_last_row = int(sizes[i + 1, j]) + 1, int(sizes[i, j - 1]) + 1
        parts = (slice(0, n_first_col), slice(nr - n_last_col, nr), slice(nr, nr + n_first_row),
                 slice(nr + nl - n_last_row, total))
        ub, uv = _envelope(np.concatenate([b[p] for p in parts]), np.concatenate([v[p] for p in parts]), cap)
        keep = v < _step_values(ub, uv, b)
        if cap is not None:
            keep &= b <= cap
        return (*_envelope(np.concatenate([ub, b[keep]]), np.concatenate([uv, v[keep]]), None), total)
    return (*_envelope(b, v, cap), total)


# Buckets per point of the step function in _step_values, and the most points one bucket may hold
# before it falls back to a binary search.
STEP_BUCKETS_PER_POINT = 16
STEP_MAX_PER_BUCKET = 6


def _step_values(peaks: np.ndarray, times: np.ndarray, b: np.ndarray) -> np.ndarray:
    """times[last peak <= b] for each b (+inf below the first peak): a front evaluated at b.

    Same result as ``searchsorted(peaks, b, 'right')`` and a gather, about 2x faster for many b
    and a short front: b is mapped to one of G uniform buckets over the front's range by a
    monotone float formula (so every point of an earlier bucket is <= b and every point of a later
    one > b), the number of points before its bucket is read from a table, and the at most c points
    inside the bucket are stepped over with c vectorised compares (binary search when c is large).
    """
    count = len(peaks)
    ext = np.empty(count + 1, dtype=np.float64)
    ext[0] = np.inf
    ext[1:] = times
    if count < 2:
        return ext[(b >= peaks[0]).astype(np.int64)] if count else np.full(len(b), np.inf)
    lo = int(peaks[0])
    buckets = STEP_BUCKETS_PER_POINT * count
    scale = buckets / float(int(peaks[-1]) - lo + 1)
    per = np.bincount(((peaks - lo) * scale).astype(np.int64), minlength=buckets + 1)
    steps = int(per.max())
    if steps > STEP_MAX_PER_BUCKET:
        return ext[np.searchsorted(peaks, b, side="right")]
    first = np.empty(buckets + 1, dtype=np.int64)
    first[0] = 0
    np.cumsum(per[:-1], out=first[1:])
    at = ((b - lo) * scale).astype(np.int64)
    np.clip(at, 0, buckets, out=at)
    at = first[at]
    bounded = np.empty(count + 1, dtype=np.int64)
    bounded[:count] = peaks
    bounded[count] = np.iinfo(np.int64).max
    for _ in range(steps):
        at += bounded[at] <= b
    return ext[at]


def _envelope(b: np.ndarray, v: np.ndarray, cap):
    """Pareto front (peaks ascending, times strictly decreasing) of candidate points (b, v)."""
    keep = v < np.inf
    if cap is not None:
        keep &= b <= cap
    b, v = b[keep], v[keep]
    if not len(b):
        return b, v
    order = np.argsort(b, kind="stable")
    b = b[order]
    run = np.minimum.accumulate(v[order])
    keep = np.empty(len(b), dtype=bool)
    keep[0] = True
    np.less(run[1:], run[:-1], out=keep[1:])
    b, run = b[keep], run[keep]
    keep = np.empty(len(b), dtype=bool)
    keep[-1] = True
    np.not_equal(b[1:], b[:-1], out=keep[:-1])
    return b[keep], run[keep]


def run(chain: Chain, budget_bytes: int, progress=None, full_front: bool = False,
        memory_limit_bytes: int | None = None):
    """Backend entry: ((peaks, times) of F(0, N), optimal policy at ``budget_bytes`` or None).

    Fronts are cut at ``budget_bytes`` unless ``full_front`` (the curve then covers every budget).
    ``peaks``/``times`` are the exact budgets (bytes) at which the optimal time drops and the
    times (ms, float64) from there on: a ``Curve(peaks, times)``. The policy is None when no
    policy fits the budget. ``progress(1)`` after every pair (``N (N + 1) / 2`` pairs).
    """
    budget = _whole_bytes(budget_bytes, "budget_bytes")
    fronts = solve_fronts(chain, max_bytes=None if full_front else budget, progress=progress,
                          memory_limit_bytes=memory_limit_bytes)
    peaks, times = fronts.front()
    policy = fronts.policy(budget) if len(peaks) and peaks[0] <= budget else None
    return (peaks, times), policy


def curve_time_at(peaks: np.ndarray, times: np.ndarray, budgets) -> np.ndarray:
    """Optimal time (ms) at each budget (bytes) from a front: +inf below its first peak."""
    ext = np.concatenate([[np.inf], np.asarray(times, dtype=np.float64)])
    return ext[np.searchsorted(np.asarray(peaks, dtype=np.int64), np.asarray(budgets, dtype=np.int64), side="right")]
