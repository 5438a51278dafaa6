"""Exact least peak memory (bytes) of any policy: the minimum feasible budget, without buckets.

P(i, j) = min over the same actions as the time DP of the worst memory they need:
- Tape: max(thr_tape bytes, tape[i+1] + P(i+1, j)) (the recursion only when j > i+1);
- Checkpoint k: max(grad[j] + nograd_peak(i, k), act[k] + P(k, j), P(i, k)).
O(N^3) in total, vectorised over i and k per diagonal.

Alongside each least peak the DP keeps the time of the action it picked (least peak first, then
least time among the actions reaching it, Tape before the smallest k), so :func:`min_peak_policy`
returns a policy that runs within exactly the minimum budget: the plan :func:`gpusolve.solve`
falls back to when bucket rounding leaves no plan at a feasible budget.

Note [One set of least-peak recurrences]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The peak of each action is written once: the thresholds in :func:`gpusolve.dp.problem.tape_threshold` and
:func:`~gpusolve.dp.problem.checkpoint_threshold`, the rest in :func:`tape_peak` and :func:`checkpoint_peak`,
which take the ``larger`` of two values as an argument so that the same line serves arrays (``np.maximum``)
and the walks over plain ints (builtin ``max``): :func:`policy_peak_bytes` (0.20 to 0.22 ms a call with the
call per node, densenet121_fine_b32, bench/results/least_peak_rules_cpu.md) and the segment policies'
evaluator (:mod:`gpusolve.dp.segments`, whose columns of Tape peaks unroll :func:`tape_peak`); the join DP's
least peak (:func:`gpusolve.join.dp.min_peak_join`) combines its own thresholds (what the other branches hold)
with the same two. The Tape and
Checkpoint k candidates (peak and time) and the tie order that picks among candidates live
in :class:`PeakRecurrences` only; :func:`min_peak_tables` and the combined recompute + offload DP
(:func:`gpusolve.offload.dp.least_peak_tables`, which adds its Swap k candidates as further groups) both
fill their tables with it, so a change to one rule reaches both. They keep their own loops: recompute only
has one plane, and taking it as the combined DP's plane 0 with nothing swappable (equal, table for table)
computes a second plane and the swaps' terms for nothing: 2.9x min_peak_tables' time on densenet121_fine_b32,
which is on :func:`gpusolve.solve`'s path. ``bench/repros/rv14_minpeak_shared_check.py`` compares both
functions with the tree before the move (every table, exactly) and times them side by side.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..chain import Chain
from ..schedule import Policy, Tape
from .problem import Problem, checkpoint_threshold, tape_threshold
from .recover import walk_policy

NO_PEAK = np.iinfo(np.int64).max // 4  # the peak of an action that cannot run (sums of sizes stay far below it)


def tape_peak(thr, tape_next, right, larger=np.maximum):
    """Peak of Tape at (i, j) over more than one stage: its threshold ``thr`` (the recording forward or the
    backward), or stage i+1's tape ``tape_next`` held over the sub-problem (i+1, j) of peak ``right``. A stage
    alone (j = i+1) is ``thr``. ``larger``: ``np.maximum`` on arrays, the builtin ``max`` on plain ints."""
    return larger(thr, tape_next + right)


def checkpoint_peak(thr, act_k, right, left, larger=np.maximum):
    """Peak of Checkpoint k at (i, j): its threshold ``thr`` (the no-grad forwards i+1..k), a_k (``act_k``) held
    over the right part (k, j) of peak ``right``, or the left part (i, k) of peak ``left``."""
    return larger(larger(thr, act_k + right), left)


class PeakDiagonal(NamedTuple):
    """The pairs (i, j = i + d) of one diagonal, their split points k = i+1..j-1 ([pairs, d - 1]) and the
    terms every Checkpoint-like candidate at (i, j, k) shares: ``thr_ckpt`` (bytes) and ``sfn`` (ms, float64)."""

    d: int
    i: np.ndarray      # int64[pairs]
    j: np.ndarray      # int64[pairs]
    ii: np.ndarray     # i[:, None]
    jj: np.ndarray     # j[:, None]
    k: np.ndarray      # int64[pairs, d - 1]
    thr_ckpt: np.ndarray  # int64[pairs, d - 1]: grad[j] + nograd_peak(i, k)
    sfn: np.ndarray    # float64[pairs, d - 1]: the no-grad forwards i+1..k
    right_at: np.ndarray  # int64[pairs, d - 1]: flat index of (k, j) in an [N+1, N+1] table
    left_at: np.ndarray   # int64[pairs, d - 1]: flat index of (i, k)


class PeakRecurrences:
    """The least-peak rules, exact bytes (Note [One set of least-peak recurrences]): per diagonal, the
    Tape candidate, the Checkpoint k candidates and the choice among candidate groups. Tables are
    [N+1, N+1] (one plane): ``peak`` int64 bytes, ``cost`` float64 ms of the policy picked."""

    def __init__(self, chain: Chain, problem: Problem):
        a = chain.padded()
        self.problem, self.multi_tape = problem, chain.multi_tape
        self.act_bytes, self.tape_bytes = a["act_bytes"], a["tape_bytes"]
        self.t_tape = (a["t_fwd"] + a["t_bwd"]).astype(np.float64)

    def diagonals(self):
        """:class:`PeakDiagonal` for d = 1..N, in the order a fill must visit them."""
        problem = self.problem
        n = problem.n
        for d in range(1, n + 1):
            i = np.arange(0, n + 1 - d, dtype=np.int64)
            j = i + d
            ii, jj = i[:, None], j[:, None]
            k = ii + np.arange(1, d, dtype=np.int64)[None, :]
            yield PeakDiagonal(d, i, j, ii, jj, k, problem.thr_ckpt_bytes(ii, jj, k),
                               problem.fwd_prefix[k] - problem.fwd_prefix[ii], k * (n + 1) + jj, ii * (n + 1) + k)

    def tape(self, g: PeakDiagonal, peak: np.ndarray, cost: np.ndarray):
        """Tape's (peak, time), [pairs] each: max(thr_tape, tape[i+1] + P(i+1, j)) and
        t_tape[i+1] + C(i+1, j), read from ``peak``/``cost`` (the plane a Tape leaves to: nothing of
        a_i is kept); a stage alone (d = 1) is thr_tape and t_tape[i+1]; without ``multi_tape`` a
        Tape over more than one stage cannot run (``NO_PEAK``, infinite time)."""
        i, j = g.i, g.j
        thr = self.problem.thr_tape_bytes(i, j)
        if g.d == 1:
            return thr, self.t_tape[i + 1]
        if not self.multi_tape:
            return np.full(len(i), NO_PEAK), np.full(len(i), np.inf)
        return tape_peak(thr, self.tape_bytes[i + 1], peak[i + 1, j]), self.t_tape[i + 1] + cost[i + 1, j]

    def checkpoint(self, g: PeakDiagonal, right: tuple[np.ndarray, np.ndarray], left: tuple[np.ndarray, np.ndarray]):
        """Checkpoint k's (peak, time), [pairs, d - 1] each: max(thr_ckpt, act[k] + P_right(k, j),
        P_left(i, k)) and (sfn(i, k) + C_right(k, j)) + C_left(i, k); ``right``, ``left``: the (peak,
        cost) tables the right part (k, j) and the left part (i, k) are read from."""
        (right_p, right_t), (left_p, left_t) = right, left
        r, l = g.right_at, g.left_at  # flat indices: one gather each (2-D fancy indexing was 2.3x the time)
        return (checkpoint_peak(g.thr_ckpt, self.act_bytes[g.k], right_p.take(r), left_p.take(l)),
                g.sfn + right_t.take(r) + left_t.take(l))

    @staticmethod
    def least(groups):
        """The choice among candidate groups, per pair: ``groups`` is [(peak, time)] in tie order, each
        [pairs, width] (width 0: no candidate). Least peak first, then least time among the candidates
        reaching it, then the first (earliest group, then smallest index); where no candidate at the
        least peak has a finite time (swaps over a useless link), the first candidate reaching it.
        Returns (peak, time, group, at), [pairs] each, ``at`` the index within the group; a least peak
        of ``NO_PEAK`` or more (nothing can run) gives ``NO_PEAK`` and infinite time."""
        best = None
        for group, (p, t) in enumerate(groups):
            if p.shape[1] == 0:
                continue
            if p.shape[1] == 1:  # a single candidate (Tape): nothing to choose within the group
                least, time, at = p[:, 0], t[:, 0], np.zeros(len(p), dtype=np.int64)
            else:
                least = p.min(axis=1)
                reaching = p == least[:, None]
                timed = np.where(reaching, t, np.inf)
                at = np.argmin(timed, axis=1)
                time = timed[np.arange(len(at)), at]
                timeless = ~np.isfinite(time)
                if timeless.any():
                    at[timeless] = np.argmax(reaching[timeless], axis=1)
                    time[timeless] = t[timeless, at[timeless]]
            if best is None:
                best = [least, time, np.full(len(least), group, dtype=np.int64), at]
                continue
            take = (least < best[0]) | ((least == best[0]) & (time < best[1]))
            for slot, value in enumerate((least, time, group, at)):
                best[slot] = np.where(take, value, best[slot])
        peak, time, group, at = best
        return np.minimum(peak, NO_PEAK), np.where(peak < NO_PEAK, time, np.inf), group, at


def min_peak_tables(chain: Chain):
    """(peak, time, choice) tables [N+1, N+1]: least peak (bytes), the time of the policy picked,
    and its first action (0: Tape, k: checkpoint k)."""
    problem = Problem.build(chain, bucket_bytes=1, buckets=0)
    rules = PeakRecurrences(chain, problem)
    n = problem.n
    peak = np.full((n + 1, n + 1), NO_PEAK, dtype=np.int64)
    cost = np.full((n + 1, n + 1), np.inf)
    choice = np.zeros((n + 1, n + 1), dtype=np.int64)
    tables = (peak, cost)
    for g in rules.diagonals():
        tape_p, tape_t = rules.tape(g, peak, cost)
        ckpt_p, ckpt_t = rules.checkpoint(g, tables, tables)
        least_p, least_t, group, at = rules.least([(tape_p[:, None], tape_t[:, None]), (ckpt_p, ckpt_t)])
        peak[g.i, g.j] = least_p
        cost[g.i, g.j] = least_t
        choice[g.i, g.j] = np.where(group == 0, 0, g.i + 1 + at)
    return peak, cost, choice


class LeastPeak(NamedTuple):
    """The least budget of a chain (``min_bytes``) and a policy running within exactly it (``policy``), from
    one fill of :func:`min_peak_tables` (a solve near the least needs both: two fills cost it 2 x 0.29 s on
    densenet121_fine_b32, CPU)."""

    min_bytes: int
    policy: Policy


def least_peak(chain: Chain) -> LeastPeak:
    """:func:`min_feasible_bytes` and :func:`min_peak_policy` of ``chain`` from one table fill."""
    peak, _cost, choice = min_peak_tables(chain)
    zeros = np.zeros(chain.n + 1, dtype=np.int64)  # no memory coordinate: one state per (i, j)
    return LeastPeak(int(peak[0, chain.n]), walk_policy(lambda i, j, _m: int(choice[i, j]), chain.n, 0, zeros, zeros))


def min_feasible_bytes(chain: Chain) -> int:
    """Least budget (bytes, beyond the input a_0) under which some policy runs the whole chain."""
    return int(min_peak_tables(chain)[0][0, chain.n])


def min_peak_policy(chain: Chain) -> Policy:
    """A policy whose peak is exactly :func:`min_feasible_bytes` (the fastest the DP met among them)."""
    return least_peak(chain).policy


def policy_peak_bytes(problem: Problem, act: np.ndarray, tape: np.ndarray, policy: Policy, i: int = 0,
                      j: int | None = None) -> int:
    """Exact peak (bytes) of ``policy`` over (i, j), by the rules of :func:`min_peak_tables`
    (``problem``'s byte arrays: any bucket; ``act``/``tape`` from ``chain.padded()``). Equal to
    :func:`gpusolve.simulate` 's peak of the policy's schedule, in O(nodes) without building it.

    Post-order without recursion (a chain of tapes nests N deep); plain Python ints throughout: the
    slack band of :func:`gpusolve.solve` calls this once per candidate, on the whole solve's path
    (1.2 ms a call with NumPy scalars per node, 0.13 ms so, densenet121_fine_b32)."""
    j = problem.n if j is None else j
    grad, tape_fwd, need = problem.grad_bytes.tolist(), problem.tape_fwd.tolist(), problem.tape_need.tolist()
    act, tape, nograd = np.asarray(act).tolist(), np.asarray(tape).tolist(), problem.nograd_peak.item
    done: list[int] = []  # peaks of the finished subtrees: a checkpoint's left one, then its right one
    stack = [(policy, i, j, False)]
    while stack:
        node, lo, hi, ready = stack.pop()
        if isinstance(node, Tape):
            if node.right is not None and not ready:
                stack += [(node, lo, hi, True), (node.right, lo + 1, hi, False)]
                continue
            peak = tape_threshold(grad[hi], tape_fwd[lo + 1], need[lo + 1], max)
            if node.right is not None:
                peak = tape_peak(peak, tape[lo + 1], done.pop(), max)
        else:
            k = node.k
            if not ready:
                stack += [(node, lo, hi, True), (node.right, k, hi, False), (node.left, lo, k, False)]
                continue
            right = done.pop()
            peak = checkpoint_peak(checkpoint_threshold(grad[hi], nograd(lo, k)), act[k], right, done.pop(), max)
        done.append(peak)
    return done[0]
