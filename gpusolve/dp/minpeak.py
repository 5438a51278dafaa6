"""Exact least peak memory (bytes) of any policy: the minimum feasible budget, without buckets.

P(i, j) = min over the same actions as the time DP of the worst memory they need:
- Tape: max(thr_tape bytes, tape[i+1] + P(i+1, j)) (the recursion only when j > i+1);
- Checkpoint k: max(grad[j] + nograd_peak(i, k), act[k] + P(k, j), P(i, k)).
O(N^3) in total, vectorised over i and k per diagonal.

Alongside each least peak the DP keeps the time of the action it picked (least peak first, then
least time among the actions reaching it, Tape before the smallest k), so :func:`min_peak_policy`
returns a policy that runs within exactly the minimum budget: the plan :func:`gpusolve.solve`
falls back to when bucket rounding leaves no plan at a feasible budget.
"""
from __future__ import annotations

import numpy as np

from ..chain import Chain
from ..schedule import Policy, Tape
from .problem import Problem
from .recover import walk_policy


def min_peak_tables(chain: Chain):
    """(peak, time, choice) tables [N+1, N+1]: least peak (bytes), the time of the policy picked,
    and its first action (0: Tape, k: checkpoint k)."""
    problem = Problem.build(chain, bucket_bytes=1, buckets=0)
    n = problem.n
    a = chain.padded()
    act, tape = a["act_bytes"], a["tape_bytes"]
    t_tape = (a["t_fwd"] + a["t_bwd"]).astype(np.float64)
    big = np.iinfo(np.int64).max // 4
    peak = np.full((n + 1, n + 1), big, dtype=np.int64)
    cost = np.full((n + 1, n + 1), np.inf)
    choice = np.zeros((n + 1, n + 1), dtype=np.int64)
    for d in range(1, n + 1):
        i = np.arange(0, n + 1 - d, dtype=np.int64)
        j = i + d
        thr = problem.thr_tape_bytes(i, j)
        if d == 1:
            peak[i, j] = thr
            cost[i, j] = t_tape[i + 1]
            continue
        if chain.multi_tape:
            best_p = np.maximum(thr, tape[i + 1] + peak[i + 1, j])
            best_t = t_tape[i + 1] + cost[i + 1, j]
        else:
            best_p = np.full(len(i), big)
            best_t = np.full(len(i), np.inf)
        k = i[:, None] + np.arange(1, d, dtype=np.int64)[None, :]
        jj = j[:, None]
        ii = i[:, None]
        cand_p = np.maximum(problem.thr_ckpt_bytes(ii, jj, k), np.maximum(act[k] + peak[k, jj], peak[ii, k]))
        cand_t = (problem.fwd_prefix[k] - problem.fwd_prefix[ii]) + cost[k, jj] + cost[ii, k]
        # Lexicographic (peak, time): the smallest k wins ties (argmin takes the first).
        least = cand_p.min(axis=1)
        cand_t = np.where(cand_p == least[:, None], cand_t, np.inf)
        arg = np.argmin(cand_t, axis=1)
        rows = np.arange(len(i))
        ck_p, ck_t = least, cand_t[rows, arg]
        take_k = (ck_p < best_p) | ((ck_p == best_p) & (ck_t < best_t))
        peak[i, j] = np.where(take_k, ck_p, best_p)
        cost[i, j] = np.where(take_k, ck_t, best_t)
        choice[i, j] = np.where(take_k, k[rows, arg], 0)
    return peak, cost, choice


def min_feasible_bytes(chain: Chain) -> int:
    """Least budget (bytes, beyond the input a_0) under which some policy runs the whole chain."""
    return int(min_peak_tables(chain)[0][0, chain.n])


def min_peak_policy(chain: Chain) -> Policy:
    """A policy whose peak is exactly :func:`min_feasible_bytes` (the fastest the DP met among them)."""
    _peak, _cost, choice = min_peak_tables(chain)
    zeros = np.zeros(chain.n + 1, dtype=np.int64)  # no memory coordinate: one state per (i, j)
    return walk_policy(lambda i, j, _m: int(choice[i, j]), chain.n, 0, zeros, zeros)


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
            peak = max(grad[hi] + tape_fwd[lo + 1], need[lo + 1])  # thr_tape_bytes
            if node.right is not None:
                peak = max(peak, tape[lo + 1] + done.pop())
        else:
            k = node.k
            if not ready:
                stack += [(node, lo, hi, True), (node.right, k, hi, False), (node.left, lo, k, False)]
                continue
            right = done.pop()
            peak = max(grad[hi] + nograd(lo, k), act[k] + right, done.pop())  # thr_ckpt_bytes, right, left
        done.append(peak)
    return done[0]
