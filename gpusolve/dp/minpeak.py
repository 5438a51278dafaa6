"""Exact least peak memory (bytes) of any policy: the minimum feasible budget, without buckets.

P(i, j) = min over the same actions as the time DP of the worst memory they need:
- Tape: max(thr_tape bytes, tape[i+1] + P(i+1, j)) (the recursion only when j > i+1);
- Checkpoint k: max(grad[j] + nograd_peak(i, k), act[k] + P(k, j), P(i, k)).
O(N^3) in total, vectorised over i and k per diagonal.
"""
from __future__ import annotations

import numpy as np

from ..chain import Chain
from .problem import Problem


def min_feasible_bytes(chain: Chain) -> int:
    """Least budget (bytes, beyond the input a_0) under which some policy runs the whole chain."""
    problem = Problem.build(chain, bucket_bytes=1, buckets=0)
    n = problem.n
    act = chain.padded()["act_bytes"]
    tape = chain.padded()["tape_bytes"]
    big = np.iinfo(np.int64).max // 4
    peak = np.full((n + 1, n + 1), big, dtype=np.int64)
    for d in range(1, n + 1):
        i = np.arange(0, n + 1 - d, dtype=np.int64)
        j = i + d
        thr = np.maximum(problem.grad_bytes[j] + problem.tape_fwd[i + 1], problem.tape_need[i + 1])
        if d == 1:
            peak[i, j] = thr
            continue
        best = np.maximum(thr, tape[i + 1] + peak[i + 1, j]) if chain.multi_tape else np.full(len(i), big)
        k = i[:, None] + np.arange(1, d, dtype=np.int64)[None, :]
        jj = j[:, None]
        cand = np.maximum(problem.grad_bytes[jj] + problem.nograd_peak[i[:, None], k],
                          np.maximum(act[k] + peak[k, jj], peak[i[:, None], k]))
        peak[i, j] = np.minimum(best, cand.min(axis=1))
    return int(peak[0, n])
