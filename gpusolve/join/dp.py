"""The heterogeneous join DP J(s, f, m) (spec ``join-networks.md`` A.2.5) on the CPU with NumPy.

State: s = (s_1..s_k), branch beta's remaining sub-chain is stages s_beta+1..l_beta, its input
a^beta_{s_beta} held *outside* m; f_beta = 1 (only when s_beta = l_beta) when a^beta_{l_beta} is held
by an ancestor as a no-grad checkpoint, which dies at the turn; m = memory in buckets.
J(s, f, m) = least time to run the turn once and every backward of stages s_beta+1..l_beta of every
branch, starting with nothing inside m and ending with exactly {g^beta_{s_beta}} inside m; what runs
after the turn may also use R(f) = sum_beta f_beta * act^beta[l_beta] (Note [Turn inputs]).

With G_beta(s) = grad^beta[s], O_b(s) = sum_{gamma != b} G_gamma(s_gamma) and per branch the arrays of
its chain :class:`~gpusolve.dp.problem.Problem` (sizes rounded up to buckets, thresholds from exact
bytes) and its chain table C^b(i, j, m) (:mod:`gpusolve.dp.cpu`, unchanged):

    base, s = l:  J = t_turn                                   if m >= need_turn
    T_b  (i = s_b < l_b, multi_tape):  t_tape^b[i+1] + J(s + e_b, f, m - tape^b[i+1])
                  if m >= tape_fwd^b[i+1] and m + R(f) >= tape_need^b[i+1] + O_b(s)
    A_b,k (i < k <= l_b):  (sfn^b(i, k) + J(s[b <- k], f', m - act^b[k])) + C^b(i, k, m + R(f) - O_b(s))
                  if m >= nograd_peak^b[i][k];   f' = f with f'_b = 1 iff k = l_b (and the turn frees inputs)

Answer J(0, 0, m) for every m (the curve). In buckets every threshold is the ceiling of its exact
bytes (``tape_need + O`` rounded as one sum), R(f) gives back exactly the buckets the ancestor took,
and C^b is read at m + R(f) - ceil(O_b / bucket): a plan that fits m buckets fits m * bucket bytes.
Ties: the first candidate in the order base, then per branch b = 0..k-1: T_b, A_b,k by increasing k
(:func:`_candidates` is the one statement of the candidates, for the fill and for recovery).

Note [Turn inputs]
    The turn consumes its inputs: a branch output held as a no-grad checkpoint is dead after it
    (spec A.2.5 item 5). The flag f carries "an ancestor holds a^beta_{l_beta} as a checkpoint" down
    to the turn, so that the backward phase below it gets those buckets back (R(f)). Without it the
    DP keeps them through the whole backward phase (``Turn(frees_inputs=False)``: then f is never
    set, the layout has no f rows and R = 0). Along any path from J(0, 0, M), m + R(f) <= M (R(f)
    counts buckets an ancestor subtracted from its own m), so the chain tables need no column past
    M; the read index is clamped to M, which only touches states no plan at m <= M visits.

Note [Hyperplanes]
    J(s, ., .) reads only J(s', ., .) with s' >= s componentwise and |s'| > |s|, and the finished
    chain tables. The table is therefore filled by hyperplanes |s| = d, d = sum(l) down to 0; the
    rows of one hyperplane (every s with |s| = d, every f variant) and all their m columns are
    independent. :func:`fill_join` is a loop over hyperplanes whose body, :func:`_fill_plane`, reads
    the table, the chain tables and the per-row arrays of :class:`JoinProblem` and writes the rows of
    its hyperplane and nothing else: a CUDA kernel replaces the body one launch per hyperplane
    (blocks over the hyperplane's rows, threads over m, the candidate loop of :func:`_candidates` in
    registers, a min-reduction per (row, m)). Every shift is a per-row constant (J rows read at
    m - act^b[k] or m - tape^b[i+1], C^b rows at m + R(f) - O_b(s)), so the reads stay coalesced
    without the pre-shifted copies the NumPy chain backend keeps. The chain tables are independent
    of each other and of J: they are filled first (one per non-empty branch).

Table layout: one row of M+1 values (float32 by default, as in every backend) per state (s, f).
A coordinate u_beta in 0..l_beta+1 stands for s_beta = min(u_beta, l_beta), f_beta = (u_beta = l_beta+1)
(the value l_beta+1 only for non-empty branches and when the turn frees its inputs); rows are the
mixed-radix numbers of u, so the top state is row 0 and a sub-state is a row plus a multiple of a
stride. ``planes[d]`` lists the rows of hyperplane d.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..dp import cpu
from ..dp.minpeak import checkpoint_peak, min_peak_tables, tape_peak
from ..dp.problem import Problem, ceil_div
from ..dp.recover import recover_policy, table_lookup, walk_policy
from .network import BranchCheckpoint, BranchTape, JoinNet, JoinPolicy

INF = np.inf


@dataclass
class JoinProblem:
    """The bucketed arrays of one join instance: the branch Problems and the J state layout."""

    net: JoinNet
    bucket_bytes: int
    buckets: int                       # M: columns 0..M
    dtype: type
    problems: list                     # Problem per branch (None for an empty branch)
    radix: np.ndarray                  # int64[k]: values of u_beta
    stride: np.ndarray                 # int64[k]
    u: np.ndarray                      # int64[rows, k]
    s: np.ndarray                      # int64[rows, k]: start positions
    release: np.ndarray                # int64[rows]: R(f) in buckets
    release_bytes: np.ndarray          # int64[rows]: R(f) in bytes (the bucket-free DP)
    others: np.ndarray                 # int64[rows, k]: O_b(s) in bytes
    planes: list                       # planes[d]: int64 rows with |s| = d
    turn_need: int                     # bytes (reserve included)
    t_turn: float

    @classmethod
    def build(cls, net: JoinNet, bucket_bytes: int, buckets: int, dtype=np.float32) -> "JoinProblem":
        dtype = np.dtype(dtype).type
        lengths = np.array(net.lengths, dtype=np.int64)
        k = net.k
        frees = net.turn.frees_inputs
        problems = []
        for beta in range(k):
            chain = net.dp_chain(beta)
            problems.append(None if chain is None else Problem.build(chain, bucket_bytes, buckets, dtype=dtype))
        radix = np.where((lengths > 0) & frees, lengths + 2, lengths + 1)
        stride = np.ones(k, dtype=np.int64)
        for beta in range(k - 2, -1, -1):
            stride[beta] = stride[beta + 1] * radix[beta + 1]
        rows = int(np.prod(radix))
        index = np.arange(rows, dtype=np.int64)
        u = (index[:, None] // stride[None, :]) % radix[None, :]
        s = np.minimum(u, lengths[None, :])
        flag = u > lengths[None, :]
        out_act = np.array([int(net.padded(beta)["act_bytes"][length]) for beta, length in enumerate(net.lengths)],
                           dtype=np.int64)
        out_act_b = np.array([0 if p is None else int(p.act_b[length])
                              for p, length in zip(problems, net.lengths, strict=True)], dtype=np.int64)
        grads = [net.padded(beta)["grad_bytes"].astype(np.int64) for beta in range(k)]
        held = np.stack([grads[beta][s[:, beta]] for beta in range(k)], axis=1)
        others = held.sum(axis=1, keepdims=True) - held
        level = s.sum(axis=1)
        planes = [np.flatnonzero(level == d).astype(np.int64) for d in range(int(lengths.sum()) + 1)]
        return cls(net=net, bucket_bytes=int(bucket_bytes), buckets=int(buckets), dtype=dtype, problems=problems,
                   radix=radix, stride=stride, u=u, s=s, release=(flag * out_act_b[None, :]).sum(axis=1),
                   release_bytes=(flag * out_act[None, :]).sum(axis=1), others=others, planes=planes,
                   turn_need=net.turn_need_bytes(), t_turn=net.turn.time_ms)

    @property
    def rows(self) -> int:
        return len(self.u)

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.net.lengths

    def table_bytes(self) -> int:
        """Bytes of the J table: rows x (M+1) x itemsize."""
        return self.rows * (self.buckets + 1) * np.dtype(self.dtype).itemsize

    def sub_row(self, rows, b: int, k):
        """Rows of s[b <- k] (with f_b = 1 when k = l_b and the turn frees its inputs)."""
        length = self.lengths[b]
        target = np.where((np.asarray(k) == length) & (self.radix[b] == length + 2), length + 1, k)
        return np.asarray(rows) + (target - self.u[np.asarray(rows), b]) * self.stride[b]


def host_bytes(jp: JoinProblem) -> int:
    """Bytes the CPU fill allocates: the J table and the chain tables (with their shifted copies)."""
    return jp.table_bytes() + sum(cpu.host_bytes(p) for p in jp.problems if p is not None)


def host_bytes_for(net: JoinNet, buckets: int, itemsize: int = 4) -> int:
    """:func:`host_bytes` of ``net`` at ``buckets`` without building anything."""
    rows = 1
    for length in net.lengths:
        rows *= length + 2 if length > 0 and net.turn.frees_inputs else length + 1
    chains = sum(cpu.host_bytes_for(length, buckets, itemsize) for length in net.lengths if length > 0)
    return rows * (buckets + 1) * itemsize + chains


# ---------------------------------------------------------------------------- the candidates

def _at_turn(jp: JoinProblem, s: np.ndarray) -> np.ndarray:
    """Indices of the states (rows of ``s``) whose every branch is done: only the turn is left."""
    return np.flatnonzero((s == np.array(jp.lengths)[None, :]).all(axis=1))


def _open_branches(jp: JoinProblem, s: np.ndarray, rows: np.ndarray):
    """Per non-empty branch b with stages left in some of the states ``rows`` (starts ``s``): yields
    ``(b, length, problem, sel, here, i)``: ``sel`` indexes those states, ``here = rows[sel]``,
    ``i`` their start positions in b. The state walk of both DPs over one hyperplane."""
    for b, length in enumerate(jp.lengths):
        problem = jp.problems[b]
        if problem is None:
            continue
        sel = np.flatnonzero(s[:, b] < length)
        if len(sel):
            yield b, length, problem, sel, rows[sel], s[sel, b]


def _candidates(jp: JoinProblem, table: np.ndarray, ctables: list, rows: np.ndarray, m: np.ndarray):
    """Yield ``(label, sel, values)`` for the states ``rows``: ``values[q, m]`` is the candidate's
    time at column m for state ``rows[sel[q]]`` (+inf where not allowed). Labels, in tie-break
    order: ``("turn",)``, ``("tape", b)``, ``("ckpt", b, r)`` (checkpoint k = s_b + r). The one
    statement of the recurrence; reads only rows of higher hyperplanes (Note [Hyperplanes])."""
    dtype, bucket, top = jp.dtype, jp.bucket_bytes, jp.buckets
    inf = dtype(INF)
    s = jp.s[rows]
    at_turn = _at_turn(jp, s)
    if len(at_turn):
        need = int(ceil_div(jp.turn_need, bucket))
        vals = np.where(m[None, :] >= need, dtype(jp.t_turn), inf).astype(dtype)
        yield ("turn",), at_turn, np.repeat(vals, len(at_turn), axis=0)
    for b, length, problem, sel, here, i in _open_branches(jp, s, rows):
        release = jp.release[here][:, None]
        others = jp.others[here, b]
        if problem.multi_tape:
            sub = here + jp.stride[b]
            shift = problem.tape_b[i + 1].astype(np.int64)
            vals = problem.t_tape[i + 1][:, None] + cpu._shift_rows(table[sub], shift, m, inf)
            thr_fwd = ceil_div(problem.tape_fwd[i + 1], bucket)[:, None]
            thr_bwd = ceil_div(problem.tape_need[i + 1] + others, bucket)[:, None]
            np.copyto(vals, inf, where=(m[None, :] < thr_fwd) | (m[None, :] + release < thr_bwd))
            yield ("tape", b), sel, vals
        col = m[None, :] + release - ceil_div(others, bucket)[:, None]
        np.minimum(col, top, out=col)  # Note [Turn inputs]: only states no plan visits reach past M
        ctab = ctables[b]
        for r in range(1, length - int(i.min()) + 1):
            q = np.flatnonzero(i + r <= length)
            iq = i[q]
            kq = iq + r
            sub = jp.sub_row(here[q], b, kq)
            right = cpu._shift_rows(table[sub], problem.act_b[kq].astype(np.int64), m, inf)
            cq = col[q]
            left = np.take_along_axis(ctab[problem.row(iq, kq)], np.maximum(cq, 0), axis=1)
            vals = problem.sfn(iq, kq)[:, None] + right
            vals += left
            thr = ceil_div(problem.nograd_peak[iq, kq], bucket)[:, None]
            np.copyto(vals, inf, where=(m[None, :] < thr) | (cq < 0))
            yield ("ckpt", b, r), sel[q], vals


def _fill_plane(jp: JoinProblem, table: np.ndarray, ctables: list, rows: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The values of the states ``rows`` (one hyperplane): the min over :func:`_candidates`."""
    best = np.full((len(rows), len(m)), jp.dtype(INF), dtype=jp.dtype)
    for _label, sel, vals in _candidates(jp, table, ctables, rows, m):
        best[sel] = np.minimum(best[sel], vals)
    return best


# ---------------------------------------------------------------------------- fill and recovery

class JoinTable:
    """A filled J table: ``curve`` = J(0, 0, m), m = 0..M, and policies on demand (:meth:`policy`)."""

    def __init__(self, jp: JoinProblem, table: np.ndarray, chains: list, timings: dict | None):
        self.problem, self.table, self.chains, self._timings = jp, table, chains, timings
        self.ctables = [None if c is None else c.table for c in chains]
        self.curve = table[0].copy()

    def choose(self, row: int, m: int) -> tuple:
        """The label of the first minimal candidate at state (row, m) (the tie-break of the fill)."""
        jp = self.problem
        cols = np.arange(jp.buckets + 1, dtype=np.int64)
        best, label = jp.dtype(INF), None
        for lab, sel, vals in _candidates(jp, self.table, self.ctables, np.array([row], dtype=np.int64), cols):
            if len(sel) and vals[0, m] < best:
                best, label = vals[0, m], lab
        if label is None:
            raise ValueError(f"join state {tuple(int(v) for v in jp.s[row])} (row {row}) is infeasible at m = {m}")
        return label

    def policy(self, m: int) -> JoinPolicy | None:
        """The optimal join policy at ``m`` buckets (None where the curve is infinite)."""
        if not (0 <= m < len(self.curve) and np.isfinite(self.curve[m])):
            return None
        started = time.perf_counter()
        jp = self.problem
        row, mm, actions = 0, int(m), []
        while True:
            label = self.choose(row, mm)
            if label[0] == "turn":
                break
            b = label[1]
            problem = jp.problems[b]
            i = int(jp.s[row, b])
            if label[0] == "tape":
                actions.append(BranchTape(b))
                row, mm = row + int(jp.stride[b]), mm - int(problem.tape_b[i + 1])
                continue
            k = i + label[2]
            col = min(mm + int(jp.release[row]) - int(ceil_div(jp.others[row, b], jp.bucket_bytes)), jp.buckets)
            left = recover_policy(problem, table_lookup(self.ctables[b]), col, i, k)
            actions.append(BranchCheckpoint(b, k, left))
            row, mm = int(jp.sub_row(row, b, k)), mm - int(problem.act_b[k])
        if self._timings is not None:
            self._timings["recover"] = self._timings.get("recover", 0.0) + time.perf_counter() - started
        return tuple(actions)


def fill_join(jp: JoinProblem, progress=None, timings: dict | None = None) -> JoinTable:
    """Fill the chain tables, then J hyperplane by hyperplane (Note [Hyperplanes]).
    ``progress(rows)`` is called after each hyperplane; ``timings["dp"]`` gets the seconds."""
    started = time.perf_counter()
    chains = [None if p is None else cpu.fill(p) for p in jp.problems]
    ctables = [None if c is None else c.table for c in chains]
    m = np.arange(jp.buckets + 1, dtype=np.int64)
    table = np.full((jp.rows, jp.buckets + 1), jp.dtype(INF), dtype=jp.dtype)
    for d in range(len(jp.planes) - 1, -1, -1):
        rows = jp.planes[d]
        table[rows] = _fill_plane(jp, table, ctables, rows, m)
        if progress is not None:
            progress(len(rows))
    if timings is not None:
        timings["dp"] = timings.get("dp", 0.0) + time.perf_counter() - started
    return JoinTable(jp, table, chains, timings)


# ---------------------------------------------------------------------------- the exact minimum

@dataclass
class MinPeak:
    """The bucket-free least-peak DP over the same actions: ``peak[row]`` (bytes), the time of the
    policy picked (least peak, then least time, then the candidate order) and its choice."""

    problem: JoinProblem
    peak: np.ndarray
    time: np.ndarray
    choice: list
    chain_tables: list

    @property
    def min_bytes(self) -> int:
        """The least budget at which the join DP has a plan (exact bytes)."""
        return int(self.peak[0])

    def policy(self) -> JoinPolicy:
        """A join policy whose peak is exactly :attr:`min_bytes`."""
        jp, row, actions = self.problem, 0, []
        while self.choice[row][0] != "turn":
            label = self.choice[row]
            b = label[1]
            if label[0] == "tape":
                actions.append(BranchTape(b))
                row += int(jp.stride[b])
                continue
            i, k = int(jp.s[row, b]), int(label[2])
            choice = self.chain_tables[b][2]
            zeros = np.zeros(jp.lengths[b] + 1, dtype=np.int64)
            left = walk_policy(lambda lo, hi, _m, choice=choice: int(choice[lo, hi]), k, 0, zeros, zeros, start=i)
            actions.append(BranchCheckpoint(b, k, left))
            row = int(jp.sub_row(row, b, k))
        return tuple(actions)


def min_peak_join(net: JoinNet) -> MinPeak:
    """Least peak (exact bytes) of the join DP's policies: the recurrence of the module docstring
    with max instead of + (every constraint is m >= a bound, sub-problems shift m)."""
    jp = JoinProblem.build(net, 1, 0, dtype=np.float64)
    big = np.iinfo(np.int64).max // 4
    peak = np.full(jp.rows, big, dtype=np.int64)
    cost = np.full(jp.rows, INF)
    choice: list = [None] * jp.rows
    chain_tables = [None if net.dp_chain(b) is None else min_peak_tables(net.dp_chain(b)) for b in range(net.k)]
    for d in range(len(jp.planes) - 1, -1, -1):
        rows = jp.planes[d]
        s = jp.s[rows]
        best_p = np.full(len(rows), big, dtype=np.int64)
        best_t = np.full(len(rows), INF)
        best_l: list = [None] * len(rows)
        best = (best_p, best_t, best_l)

        at_turn = _at_turn(jp, s)
        _offer(best, at_turn, np.full(len(at_turn), jp.turn_need), np.full(len(at_turn), jp.t_turn),
               lambda q: ("turn",))
        for b, length, problem, sel, here, i in _open_branches(jp, s, rows):
            reach = jp.others[here, b] - jp.release_bytes[here]
            a = net.padded(b)
            if problem.multi_tape:
                sub = here + jp.stride[b]
                p = tape_peak(np.maximum(problem.tape_fwd[i + 1], problem.tape_need[i + 1] + reach),
                              a["tape_bytes"][i + 1], peak[sub])
                _offer(best, sel, p, problem.t_tape[i + 1] + cost[sub], lambda q, b=b: ("tape", b))
            cpeak, ccost, _ = chain_tables[b]
            for kk in range(1, length + 1):
                q = np.flatnonzero(i < kk)
                if not len(q):
                    continue
                iq = i[q]
                sub = jp.sub_row(here[q], b, kk)
                p = checkpoint_peak(problem.nograd_peak[iq, kk], a["act_bytes"][kk], peak[sub],
                                    cpeak[iq, kk] + reach[q])
                t = (problem.fwd_prefix[kk] - problem.fwd_prefix[iq]) + cost[sub] + ccost[iq, kk]
                _offer(best, sel[q], p, t, lambda q2, b=b, kk=kk: ("ckpt", b, kk))
        peak[rows], cost[rows] = best_p, best_t
        for q, row in enumerate(rows):
            choice[row] = best_l[q]
    return MinPeak(jp, np.maximum(peak, 0), cost, choice, chain_tables)


def _offer(best, sel, peak, cost, label) -> None:
    """Keep, for the rows ``sel`` of a hyperplane, each candidate of lower (peak, time)."""
    best_p, best_t, best_l = best
    better = (peak < best_p[sel]) | ((peak == best_p[sel]) & (cost < best_t[sel]))
    for q in np.flatnonzero(better):
        best_p[sel[q]], best_t[sel[q]], best_l[sel[q]] = peak[q], cost[q], label(q)


def min_feasible_bytes_join(net: JoinNet) -> int:
    """The least budget (bytes, beyond the k branch inputs) at which the join DP has a plan."""
    return min_peak_join(net).min_bytes
