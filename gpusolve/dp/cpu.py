"""CPU reference backend: NumPy, vectorised over memory buckets and checkpoints, by diagonal."""
from __future__ import annotations

import numpy as np

from .problem import INF, Problem
from .recover import recover_policy

# Elements per working array of one vectorised block (float32: 64 MiB), bounding extra memory.
BLOCK_ELEMENTS = 1 << 24


def solve_table(problem: Problem, progress=None) -> np.ndarray:
    """Fill the whole table (float32, rows x (M+1)) diagonal by diagonal.

    ``progress``, if given, is called with the number of (i, j) pairs finished after each block.
    """
    n, width = problem.n, problem.buckets + 1
    table = np.empty((problem.pairs, width), dtype=problem.dtype)
    flat = table.reshape(-1)
    m = np.arange(width, dtype=np.int64)
    offsets = problem.diag_offset
    for d in range(1, n + 1):
        count = n + 1 - d
        block = max(1, BLOCK_ELEMENTS // (max(d - 1, 1) * width))
        for start in range(0, count, block):
            i = np.arange(start, min(count, start + block), dtype=np.int64)
            j = i + d
            best = _tape_candidates(problem, flat, m, i, j, d)
            if d >= 2:
                np.minimum(best, _checkpoint_candidates(problem, table, flat, m, i, j, d), out=best)
            table[offsets[d] + i] = best
            if progress is not None:
                progress(len(i))
    return table


def _tape_candidates(problem: Problem, flat, m, i, j, d) -> np.ndarray:
    width = len(m)
    thr = problem.thr_tape(i, j)[:, None]
    cost = problem.t_tape[i + 1][:, None]
    if d == 1:
        return np.where(m[None, :] >= thr, cost, INF).astype(problem.dtype)
    if not problem.multi_tape:
        return np.full((len(i), width), INF, dtype=problem.dtype)
    rows = problem.row(i + 1, j)
    cols = np.maximum(m[None, :] - problem.tape_b[i + 1][:, None].astype(np.int64), 0)
    right = flat[rows[:, None] * width + cols]
    return np.where(m[None, :] >= thr, cost + right, INF).astype(problem.dtype)


def _checkpoint_candidates(problem: Problem, table, flat, m, i, j, d) -> np.ndarray:
    width = len(m)
    k = i[:, None] + np.arange(1, d, dtype=np.int64)[None, :]          # (c, d-1)
    jj = j[:, None]
    thr = problem.thr_ckpt(i[:, None], jj, k)                          # (c, d-1)
    sfn = problem.sfn(i[:, None], k)                                   # (c, d-1) float32
    right_rows = problem.row(k, jj)
    cols = np.maximum(m[None, None, :] - problem.act_b[k][..., None].astype(np.int64), 0)
    right = flat[right_rows[..., None] * width + cols]                 # (c, d-1, M+1)
    cand = sfn[..., None] + right
    cand += table[problem.row(i[:, None], k)]
    cand[m[None, None, :] < thr[..., None]] = INF
    return cand.min(axis=1)


def run(problem: Problem, m_top: int, progress=None):
    """Solve on the CPU: returns (curve [M+1] = C(0, N, m), policy at ``m_top`` or None)."""
    table = solve_table(problem, progress)
    curve = table[problem.row(0, problem.n)].copy()
    policy = None
    if np.isfinite(curve[m_top]):
        flat = table.reshape(-1)
        width = problem.buckets + 1
        policy = recover_policy(problem, lambda rows, cols: flat[rows * width + cols], m_top)
    return curve, policy
