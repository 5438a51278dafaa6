"""The combined recompute + offload DP on the CPU: C(i, j, m, sigma) with the ``Swap k`` action
(spec ``offload.md`` B.4.1), NumPy, on the chain DP's :class:`~gpusolve.dp.problem.Problem`.

State (i, j, m, sigma): as the chain DP's (i, j, m), and sigma = 1 iff a_i is a plain checkpoint (so
it may be moved to the host); the top state is (0, N, M, 0). Two planes of the chain DP's table
layout (``table[sigma][row(i, j), m]``)::

  Tape          t_tape[i+1] + C(i+1, j, m - tape_b[i+1], 0)                        m >= thr_tape(i, j)
  Checkpoint k  (sfn(i, k) + C(k, j, m - act_b[k], 1)) + C(i, k, m, sigma)         m >= thr_ckpt(i, j, k)
  Swap k        (((w_off(i, k) + C(k, j, min(M, m - act_b[k] + act_b[i]), 1))
                  + e_pre(i, k, m)) + C(i, k, m, 1))                               sigma = 1, m >= thr_ckpt(i, j, k)

  w_off(i, k)    = max(sfn(i, k), tau_d2h(act[i]))          (= sfn + e_off of the spec, with no rounding)
  e_pre(i, k, m) = max(0, tau_h2d(act[i]) - t_bwd[k+1])     if m - act_b[k] >= pre_b[k+1]   (overlap)
                 = tau_h2d(act[i])                          otherwise                        (no room)
  pre_b[s]       = ceil(max(tape_need[s], tape[s] + grad[s] + reserved) / bucket)

Float order (what the CUDA kernels must follow to agree bit for bit): the plain candidates exactly as
:mod:`gpusolve.dp.cpu` ((sfn + right) + left, in the table dtype); the Swap candidate as written above,
left to right, in the table dtype; w_off, e_pre's two values and tau are computed in float64 from the
exact bytes (tau of a_i's true size, not its bucket) and rounded once to the table dtype
(:class:`SwapArrays`). Ties: Tape, then the smallest checkpoint k, then the smallest swap k.

Why pre_b and not the spec's tape_need[k+1]: ``prefetch(i)`` is issued (and a_i's block held) before
bwd(k+1) starts, when the right part still holds the whole tape of k+1 and the gradient of a_{k+1}:
tape[k+1] + grad[k+1] + reserved, which exceeds tape_need[k+1] when the part of the tape released at
the start of the backward (tape - bwd_tape) is more than grad[k] + bwd_extra[k+1]. The spec's
condition then emits a schedule over budget (tests: ``test_spec_prefetch_condition_counterexample``).

The right read of Swap is clamped to M: states (i, j, m, 1) with m + act_b[i] > M are unreachable
from the top (every parent subtracted act_b[i] from a column <= M), and no reachable state reads
them, so the clamp never changes a plan; it keeps every value an upper bound of a real plan.

Memory: three tables (plane 0, plane 1 and plane 1 pre-shifted by act_b[k] for the Checkpoint
right read, as in :mod:`gpusolve.dp.cpu`); the Swap right read shifts by act_b[k] - act_b[i] and
is a gather.

Note [Any-window bound]
~~~~~~~~~~~~~~~~~~~~~~~
``Swap k`` copies a_i out during the no-grad forwards sfn(i, k) and back during the one backward
bwd(k+1) (the windows the DP can price exactly). Wider windows (spec phase 2: prefetch over more of the
right part's tail) need a look-ahead state. Before building that, :func:`window_bound` measures what it
could give: ``solve_tables(..., windows="any")`` replaces the Swap candidate by

  max(sfn(i, k) + C(k, j, m - act_b[k] + act_b[i], 1), tau_d2h(act[i]) + tau_h2d(act[i])) + C(i, k, m, 1)

i.e. both copies may overlap the forwards *and the whole right part*, a_i's block is not charged while
they run, and nested copies do not compete for the channel. Every real schedule of the class "a_i on the
host while the right part runs" costs at least that (the right part ends with bwd(k+1), so right >=
t_bwd[k+1] and the bound is <= the exact candidate term by term), so the bound table is <= the exact
one everywhere, equal to it over a free link and to the chain DP's over a useless one. It is a bound,
not a plan: nothing is recovered from it.

Note [Inner window]
~~~~~~~~~~~~~~~~~~~
The bound leaves most room where it matters (ResNet-50 at 25 % over 50 GB/s: 10 ms under Swap k), but it
neither charges a_i's block while it is copied nor serialises the copies. One wider window the DP
*can* price exactly without a new state: a_i on the host only while the right part's right part runs.
``solve_tables(..., windows="inner", recompute=R)`` (R: the chain DP's table, the same problem) adds,
for i < k < k2 < j on plane 1,

  ((w_off(i, k2) + C(k2, j, min(M, m - act_b[k] - act_b[k2] + act_b[i]), 1))
   + max(tau_h2d(act[i]), R(k, k2, m - act_b[k]))) + C(i, k, m, 1)
  allowed where m >= thr_ckpt(i, j, k) and m - act_b[k] >= thr_ckpt(k, j, k2)

emitted as ``offload(i), fwd_nograd(i+1, keep) .. (k), fwd_nograd(k+1, keep) .. (k2), release(i),
<(k2, j)>, free(k2), prefetch(i), <(k, k2), recompute only>, free(k), acquire(i), <(i, k)>``: the
device-to-host copy overlaps every no-grad forward from a_i to a_k2 (a_i stays in (i, j)'s frame, which
does not count it, until ``release``), the host-to-device copy the whole recompute-only solve of (k, k2)
with a_i's block charged (so (k, k2) gets m - act_b[k], exactly what it had without the swap). The copy
channel is idle at both issues: every transfer in (k2, j) was acquired inside it, and R makes none.
``tests/test_offload_windows.py`` checks that formula against the simulator on composed schedules.
It is a measuring instrument (O(N^4 M), no recovery, CPU only), like the bound; ``bench/offload_windows.py``
records what it gains (``bench/results/offload_windows_cpu.md``): at most 0.57 ms of a 103 ms step on
resnet50_b128 and densenet121_b64, too little for an O(N^4 M) fill, a CUDA kernel and a new IR node, so Swap k stays the
solver's only swap.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..chain import Chain
from ..dp.cpu import _shift_rows, _tape_candidates, diagonal_blocks
from ..dp.minpeak import NO_PEAK, PeakRecurrences, checkpoint_peak
from ..dp.problem import Problem, ceil_div
from ..dp.recover import walk_states
from ..schedule import Checkpoint, Policy, Swap, Tape
from .link import Link

TAPE, CHECKPOINT, SWAP = 0, 1, 2
TABLES = 3  # float tables the CPU fill allocates per (i, j, m) (two planes and one shifted copy)


@dataclass
class SwapArrays:
    """Per-instance transfer terms of the Swap candidate, in the table dtype (module docstring)."""

    w_off: np.ndarray     # [N+1, N+1]: max(sfn(i, k), tau_d2h(act[i]))
    e_overlap: np.ndarray  # [N+1, N+1]: max(0, tau_h2d(act[i]) - t_bwd[k+1])  (k < N)
    e_full: np.ndarray    # [N+1]: tau_h2d(act[i])
    pre_b: np.ndarray     # int64[N+2]: buckets the right part needs at bwd(s) with a_i prefetched
    pre_bytes: np.ndarray  # int64[N+1]: the same in bytes
    tau_both: np.ndarray | None = None  # [N+1]: tau_d2h(act[i]) + tau_h2d(act[i]) (Note [Any-window bound])

    @classmethod
    def build(cls, problem: Problem, chain: Chain, link: Link) -> "SwapArrays":
        a = chain.padded()
        n, dtype = problem.n, problem.dtype
        act = a["act_bytes"]
        tau_d2h = np.array([link.d2h_ms(x) for x in act], dtype=np.float64)
        tau_h2d = np.array([link.h2d_ms(x) for x in act], dtype=np.float64)
        sfn64 = problem.fwd_prefix[None, :] - problem.fwd_prefix[:, None]  # [i, k]
        w_off = np.maximum(sfn64, tau_d2h[:, None]).astype(dtype)
        never = ~chain.swappable()  # a_i shares a storage with another output: never swapped
        w_off[never] = np.inf
        tau_both = tau_d2h + tau_h2d
        tau_both[never] = np.inf
        t_bwd_next = np.zeros(n + 1)
        t_bwd_next[:n] = a["t_bwd"][1:]  # t_bwd[k+1] at index k
        e_overlap = np.maximum(0.0, tau_h2d[:, None] - t_bwd_next[None, :]).astype(dtype)
        pre = _prefetch_bytes(chain, problem)
        pre_b = ceil_div(pre, problem.bucket_bytes)
        pre = pre[:n + 1]
        return cls(w_off=w_off, e_overlap=e_overlap, e_full=tau_h2d.astype(dtype), pre_b=pre_b, pre_bytes=pre,
                   tau_both=tau_both.astype(dtype))


@dataclass
class Block:
    """One block of the fill (:func:`~gpusolve.dp.cpu.diagonal_blocks`), as an experimental action's
    candidates see it: pairs (i, j = i + d) for i = start..stop-1, the buckets ``m``, both planes (every
    lower diagonal filled) and the block's running minimums ``best0``, ``best1`` ([pairs, M+1])."""

    d: int
    start: int
    stop: int
    i: np.ndarray
    j: np.ndarray
    m: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    best0: np.ndarray
    best1: np.ndarray


def solve_tables(problem: Problem, swap: SwapArrays, progress=None, windows: str = "bwd",
                 recompute: np.ndarray | None = None, extra=None) -> tuple[np.ndarray, np.ndarray]:
    """Fill both planes (rows x (M+1), ``problem.dtype``) diagonal by diagonal; returns (plane 0,
    plane 1). ``progress``, if given, is called with the number of pairs finished after each block.
    ``windows``: "bwd" (the Swap k above, exact), "any" (the bound of Note [Any-window bound]) or
    "inner" (Swap k plus the candidate of Note [Inner window], which reads ``recompute``: the chain
    DP's table of ``problem``, :func:`gpusolve.dp.cpu.solve_table`). ``extra``, if given, is called
    with each :class:`Block` after the built-in candidates and may lower ``best0``/``best1``: the
    candidates of an action under study that the solver does not have (``bench/offload_tapes.py``)."""
    if windows not in ("bwd", "any", "inner"):
        raise ValueError(f"windows must be 'bwd', 'any' or 'inner', got {windows!r}")
    if (windows == "inner") != (recompute is not None):
        raise ValueError("windows='inner' needs recompute= (the chain DP's table, gpusolve.dp.cpu.solve_table), "
                         "and only it reads one")
    width, big_m = problem.buckets + 1, problem.buckets
    dtype = problem.dtype
    inf = dtype(np.inf)
    t0 = np.empty((problem.pairs, width), dtype=dtype)
    t1 = np.empty_like(t0)
    shifted1 = np.empty_like(t0)  # shifted1[row(k, j), m] = C(k, j, m - act_b[k], 1)
    m = np.arange(width, dtype=np.int64)
    offsets = problem.diag_offset
    act_b = problem.act_b.astype(np.int64)
    for d, start, stop, i, j in diagonal_blocks(problem):
        best0 = _tape_candidates(problem, t0, m, i, j, d, inf)  # Tape reads plane 0 on both planes
        best1 = best0.copy()
        for r in range(1, d):
            k = i + r
            left0 = t0[offsets[r] + start: offsets[r] + stop]
            left1 = t1[offsets[r] + start: offsets[r] + stop]
            right_rows = slice(offsets[d - r] + start + r, offsets[d - r] + stop + r)
            closed = m[None, :] < problem.thr_ckpt(i, j, k)[:, None]
            base = problem.sfn(i, k)[:, None] + shifted1[right_rows]
            cand = base + left0
            np.copyto(cand, inf, where=closed)
            np.minimum(best0, cand, out=best0)
            cand = base + left1
            np.copyto(cand, inf, where=closed)
            np.minimum(best1, cand, out=best1)
            # Swap k: the right part gets a_i's bucket back; the shift depends on i and k.
            room = m[None, :] - act_b[k][:, None]
            cols = np.clip(room + act_b[i][:, None], 0, big_m)
            right = np.take_along_axis(t1[right_rows], cols, axis=1)
            if windows == "any":
                cand = np.maximum(problem.sfn(i, k)[:, None] + right, swap.tau_both[i][:, None])
            else:
                cand = swap.w_off[i, k][:, None] + right
                cand += np.where(room >= swap.pre_b[k + 1][:, None], swap.e_overlap[i, k][:, None],
                                 swap.e_full[i][:, None])
            cand += left1
            np.copyto(cand, inf, where=closed)
            np.minimum(best1, cand, out=best1)
            if windows == "inner":
                _inner_candidates(problem, swap, recompute, t1, best1, closed, left1, room, d, start, stop, r)
        if extra is not None:
            extra(Block(d, start, stop, i, j, m, t0, t1, best0, best1))
        rows = slice(offsets[d] + start, offsets[d] + stop)
        t0[rows] = best0
        t1[rows] = best1
        shifted1[rows] = _shift_rows(best1, act_b[i], m, inf)
        if progress is not None:
            progress(len(i))
    return t0, t1


def _inner_candidates(problem: Problem, swap: SwapArrays, recompute, t1, best1, closed, left1, room, d, start, stop,
                      r) -> None:
    """Note [Inner window]'s candidates of the block's pairs (i, j = i + d) with k = i + r, every k2 in
    (k, j), into ``best1``; ``closed``, ``left1`` and ``room`` (m - act_b[k]) are the Swap k's."""
    big_m, offsets, inf = problem.buckets, problem.diag_offset, problem.dtype(np.inf)
    act_b = problem.act_b.astype(np.int64)
    i = np.arange(start, stop, dtype=np.int64)
    k, j = i + r, i + d
    mid_cols = np.clip(room, 0, big_m)
    for r2 in range(r + 1, d):
        k2 = i + r2
        right_rows = slice(offsets[d - r2] + start + r2, offsets[d - r2] + stop + r2)  # (k2, j)
        mid_rows = slice(offsets[r2 - r] + start + r, offsets[r2 - r] + stop + r)      # (k, k2)
        cols = np.clip(room - act_b[k2][:, None] + act_b[i][:, None], 0, big_m)
        cand = swap.w_off[i, k2][:, None] + np.take_along_axis(t1[right_rows], cols, axis=1)
        cand += np.maximum(swap.e_full[i][:, None], np.take_along_axis(recompute[mid_rows], mid_cols, axis=1))
        cand += left1
        shut = closed | (room < problem.thr_ckpt(k, j, k2)[:, None])
        np.copyto(cand, inf, where=shut)
        np.minimum(best1, cand, out=best1)


def choose(problem: Problem, swap: SwapArrays, tables, i: int, j: int, m: int, s: int):
    """The choice at state (i, j, m, s) recomputed with the fill's float operations: (kind, k,
    overlap) with kind TAPE / CHECKPOINT / SWAP. Raises ``ValueError`` if the state is infeasible."""
    t0, t1 = tables
    dtype = problem.dtype
    inf = dtype(np.inf)
    best_t = inf
    if m >= int(problem.thr_tape(i, j)):
        if j == i + 1:
            best_t = problem.t_tape[i + 1]
        elif problem.multi_tape:
            best_t = problem.t_tape[i + 1] + t0[problem.row(i + 1, j), m - int(problem.tape_b[i + 1])]
    ks = np.arange(i + 1, j, dtype=np.int64)
    ks = ks[m >= problem.thr_ckpt(i, j, ks)]
    rights, lefts = problem.row(ks, j), problem.row(i, ks)
    act_b = problem.act_b.astype(np.int64)
    room = m - act_b[ks]
    left = (t1 if s else t0)[lefts, m]
    cand_c = (problem.sfn(i, ks) + t1[rights, room]) + left
    best_c = np.min(cand_c) if len(ks) else inf
    best_s = inf
    if s and len(ks):
        overlap = room >= swap.pre_b[ks + 1]
        cand_s = swap.w_off[i, ks] + t1[rights, np.clip(room + act_b[i], 0, problem.buckets)]
        cand_s = cand_s + np.where(overlap, swap.e_overlap[i, ks], swap.e_full[i])
        cand_s = cand_s + t1[lefts, m]
        best_s = np.min(cand_s)
    if not np.isfinite(min(best_t, best_c, best_s)):
        raise ValueError(f"state ({i}, {j}, {m}, {s}) is infeasible")
    if best_t <= best_c and best_t <= best_s:
        return TAPE, 0, False
    if best_c <= best_s:
        return CHECKPOINT, int(ks[int(np.argmin(cand_c))]), False
    at = int(np.argmin(cand_s))
    return SWAP, int(ks[at]), bool(overlap[at])


def recover(problem: Problem, swap: SwapArrays, tables, m: int, root: tuple[int, int, int] | None = None) -> Policy:
    """The optimal policy from the top state (0, N, m, 0), or from the state ``root`` = (i, j, sigma)
    at m, with Swap nodes carrying their variant."""
    act_b, tape_b, big_m = problem.act_b.astype(np.int64), problem.tape_b.astype(np.int64), problem.buckets

    def expand(state):
        i, j, mm, s = state
        kind, k, overlap = choose(problem, swap, tables, i, j, mm, s)
        if kind == TAPE:
            if j == i + 1:
                return [], lambda: Tape(None)
            return [(i + 1, j, mm - int(tape_b[i + 1]), 0)], lambda right: Tape(right)
        if kind == CHECKPOINT:
            return ([(k, j, mm - int(act_b[k]), 1), (i, k, mm, s)],
                    lambda right, left: Checkpoint(k, right=right, left=left))
        return ([(k, j, min(big_m, mm - int(act_b[k]) + int(act_b[i])), 1), (i, k, mm, 1)],
                lambda right, left: Swap(k, right=right, left=left, overlap=overlap))

    i, j, sigma = (0, problem.n, 0) if root is None else root
    return walk_states((int(i), int(j), int(m), int(sigma)), expand)


class OffloadTable:
    """Both filled planes: the curve C(0, N, m, 0) and policies recovered on demand."""

    def __init__(self, problem: Problem, swap: SwapArrays, t0: np.ndarray, t1: np.ndarray):
        self.problem, self.swap, self.planes = problem, swap, (t0, t1)
        self.curve = t0[problem.row(0, problem.n)].copy()

    def value(self, i: int, j: int, m: int, s: int):
        return self.planes[s][self.problem.row(i, j), m]

    def policy(self, m: int) -> Policy | None:
        """The optimal policy at ``m`` buckets, or None where the curve is infinite."""
        if not (0 <= m < len(self.curve) and np.isfinite(self.curve[m])):
            return None
        return recover(self.problem, self.swap, self.planes, int(m))


def fill(problem: Problem, chain: Chain, link: Link, progress=None, timings: dict | None = None) -> OffloadTable:
    """Fill the combined DP for ``chain`` (discretised as ``problem``) over ``link``."""
    started = time.perf_counter()
    swap = SwapArrays.build(problem, chain, link)
    t0, t1 = solve_tables(problem, swap, progress)
    if timings is not None:
        timings["dp"] = timings.get("dp", 0.0) + time.perf_counter() - started
    return OffloadTable(problem, swap, t0, t1)


def window_bound(chain: Chain, budget_bytes: int, link: Link, bucket_bytes: int | None = None) -> tuple[float, float]:
    """Note [Any-window bound] for ``chain`` within ``budget_bytes`` over ``link``, at ``bucket_bytes``
    (default: the budget over 1024 buckets, as :func:`~gpusolve.offload.solve_offload`): (the DP value
    with Swap k's windows, the least any widening of them could reach), in ms, both from the same
    discretised problem so that their difference is the windows' alone (``inf`` where nothing fits)."""
    bucket_bytes = bucket_bytes or max(1, budget_bytes // 1024)
    problem = Problem.build(chain, bucket_bytes, budget_bytes // bucket_bytes)
    swap = SwapArrays.build(problem, chain, link)
    top = problem.row(0, problem.n), problem.buckets  # the state (0, N, M, 0)
    return tuple(float(solve_tables(problem, swap, windows=w)[0][top]) for w in ("bwd", "any"))


def host_bytes(problem: Problem) -> int:
    """Bytes the CPU fill allocates: three tables."""
    return TABLES * problem.table_bytes()


def min_offload_bytes(chain: Chain) -> int:
    """Least budget (exact bytes, beyond a_0) under which some policy of the combined class runs the
    chain over a link that can move data (any finite tau; a useless link is
    :func:`gpusolve.dp.minpeak.min_feasible_bytes`): :func:`least_peak_tables`'s P(0, N, 0)."""
    return int(least_peak_tables(chain)[0][0, 0, chain.n])


def least_peak_tables(chain: Chain, link: Link | None = None):
    """(peak, time, kind, k) tables [2, N+1, N+1] of the combined class's least peak, in exact bytes
    (no buckets). P(i, j, s) = least peak in the frame of (i, j) (s as the table's sigma):

      Tape          max(thr_tape, tape[i+1] + P(i+1, j, 0))
      Checkpoint k  max(thr_ckpt, act[k] + P(k, j, 1), P(i, k, s))
      Swap k        max(thr_ckpt, act[k] - act[i] + P(k, j, 1), P(i, k, 1))          s = 1, a_i swappable
                    (the variant without overlap; with overlap, also act[k] + pre[k+1]: a_i is back
                    during bwd(k+1), :class:`SwapArrays`)

    Tape, Checkpoint k and the choice among candidates are recompute only's rules
    (:class:`gpusolve.dp.minpeak.PeakRecurrences`, Note [One set of least-peak recurrences]); Swap k's two
    variants are further candidate groups. As :func:`gpusolve.dp.minpeak.min_peak_tables` does for recompute
    only, beside each least peak the time of the action picked is kept (least peak first, then least time;
    Tape, then the smallest checkpoint k, then the smallest swap k, the overlapping variant first), over
    ``link`` (None: the swaps' copies count 0 ms; a least peak that only swaps priced at infinity reach goes
    to the first of them): :func:`min_offload_policy` runs within exactly the least budget, the fastest such
    policy the recurrences meet."""
    problem = Problem.build(chain, bucket_bytes=1, buckets=0, dtype=np.float64)
    rules = PeakRecurrences(chain, problem)  # Tape, Checkpoint k and the tie order: recompute only's rules
    n = problem.n
    act = rules.act_bytes
    swappable = chain.swappable()
    swap = None if link is None else SwapArrays.build(problem, chain, link)
    pre = _prefetch_bytes(chain, problem)
    peak = np.full((2, n + 1, n + 1), NO_PEAK, dtype=np.int64)
    cost = np.full((2, n + 1, n + 1), np.inf)
    kind = np.zeros((2, n + 1, n + 1), dtype=np.int8)  # TAPE, CHECKPOINT, SWAP (SWAP + 1: without overlap)
    choice = np.zeros((2, n + 1, n + 1), dtype=np.int64)
    planes = [(peak[s], cost[s]) for s in (0, 1)]
    for g in rules.diagonals():  # one diagonal at a time, vectorised over i and k
        i, j, ii, jj, k = g.i, g.j, g.ii, g.jj, g.k
        tape = rules.tape(g, *planes[0])
        tape = (tape[0][:, None], tape[1][:, None])
        # Checkpoint k's rule with a_k held in place of a_i, which the swap moves out
        plain = checkpoint_peak(g.thr_ckpt, act[k] - act[ii], peak[1, k, jj], peak[1, ii, k])
        plain[~swappable[i]] = NO_PEAK
        swap_t = cost[1, k, jj] + cost[1, ii, k] + (0.0 if swap is None else swap.w_off[ii, k])
        for s in (0, 1):
            # candidates in tie order: Tape, Checkpoint k, Swap k with overlap, Swap k without (s = 1 only)
            groups = [tape, rules.checkpoint(g, planes[1], planes[s])]
            if s:
                groups += [(np.maximum(plain, act[k] + pre[k + 1]),
                            swap_t + (0.0 if swap is None else swap.e_overlap[ii, k])),
                           (plain, swap_t + (0.0 if swap is None else swap.e_full[ii]))]
            least_p, least_t, group, at = rules.least(groups)
            peak[s, i, j] = least_p
            cost[s, i, j] = least_t
            kind[s, i, j] = group  # TAPE, CHECKPOINT, SWAP, SWAP + 1
            choice[s, i, j] = np.where(group == TAPE, 0, i + 1 + at)
    return peak, cost, kind, choice


def min_offload_policy(chain: Chain, link: Link) -> Policy:
    """A policy of the combined class whose peak is exactly :func:`min_offload_bytes` over ``link``, the
    fastest :func:`least_peak_tables` meets: the plan :func:`gpusolve.offload.solve_offload` falls back to
    where bucket rounding leaves no plan at a budget the class fits (as :func:`gpusolve.dp.minpeak.min_peak_policy`
    is recompute only's)."""
    _peak, _cost, kind, choice = least_peak_tables(chain, link)

    def expand(state):
        i, j, s = state
        what, k = int(kind[s, i, j]), int(choice[s, i, j])
        if what == TAPE:
            if j == i + 1:
                return [], lambda: Tape(None)
            return [(i + 1, j, 0)], lambda right: Tape(right)
        if what == CHECKPOINT:
            return [(k, j, 1), (i, k, s)], lambda right, left: Checkpoint(k, right=right, left=left)
        return [(k, j, 1), (i, k, 1)], lambda right, left: Swap(k, right=right, left=left, overlap=what == SWAP)

    return walk_states((0, chain.n, 0), expand)


def _prefetch_bytes(chain: Chain, problem: Problem) -> np.ndarray:
    """int64[N+2]: bytes the right part of ``Swap k`` holds at bwd(s) with a_i prefetched (pre[k+1]; 0 past N)."""
    a = chain.padded()
    pre = np.zeros(problem.n + 2, dtype=np.int64)
    pre[1:problem.n + 1] = np.maximum(problem.tape_need[1:], a["tape_bytes"][1:] + a["grad_bytes"][1:]
                                      + chain.reserved_bytes)
    return pre
