"""CPU reference backend: NumPy, vectorised over memory buckets and over i, by diagonal.

For a diagonal d and an offset r = k - i, the pairs (i, i + r) (left sub-problems) and
(i + r, i + d) (right sub-problems) are consecutive rows of the table for consecutive i, so each
candidate block is a pair of slices. The right sub-problem is read at m - act_b[k], a shift that
depends only on the row's own first index k; a second table holds every row pre-shifted by it
(written once, when its diagonal is done), which turns the inner loop into slices without gathers.
Memory: 2 x 4 bytes per state on the CPU (the GPU backend keeps 4).
"""
from __future__ import annotations

import numpy as np

from .problem import Problem
from .recover import recover_policy, table_lookup

# Elements per working block (float32: 16 MiB): large enough to amortise NumPy call overhead.
BLOCK_ELEMENTS = 1 << 22


def host_bytes(problem: Problem) -> int:
    """Bytes this backend allocates: the table and its shifted copy."""
    return 2 * problem.table_bytes()


def solve_table(problem: Problem, progress=None) -> np.ndarray:
    """Fill the whole table (rows x (M+1), ``problem.dtype``) diagonal by diagonal.

    ``progress``, if given, is called with the number of (i, j) pairs finished after each block.
    """
    n, width = problem.n, problem.buckets + 1
    dtype = problem.dtype
    inf = dtype(np.inf)
    table = np.empty((problem.pairs, width), dtype=dtype)
    shifted = np.empty_like(table)  # shifted[row(k, j), m] = C(k, j, m - act_b[k])
    m = np.arange(width, dtype=np.int64)
    offsets = problem.diag_offset
    block = max(1, BLOCK_ELEMENTS // width)
    for d in range(1, n + 1):
        count = n + 1 - d
        for start in range(0, count, block):
            stop = min(count, start + block)
            i = np.arange(start, stop, dtype=np.int64)
            j = i + d
            best = _tape_candidates(problem, table, m, i, j, d, inf)
            for r in range(1, d):
                k = i + r
                left = table[offsets[r] + start: offsets[r] + stop]
                right = shifted[offsets[d - r] + start + r: offsets[d - r] + stop + r]
                cand = problem.sfn(i, k)[:, None] + right
                cand += left
                np.copyto(cand, inf, where=m[None, :] < problem.thr_ckpt(i, j, k)[:, None])
                np.minimum(best, cand, out=best)
            rows = slice(offsets[d] + start, offsets[d] + stop)
            table[rows] = best
            shifted[rows] = _shift_rows(best, problem.act_b[i].astype(np.int64), m, inf)
            if progress is not None:
                progress(len(i))
    return table


def _shift_rows(rows: np.ndarray, shift: np.ndarray, m: np.ndarray, inf) -> np.ndarray:
    """out[q, m] = rows[q, m - shift[q]], +inf where m < shift[q]."""
    out = np.take_along_axis(rows, np.maximum(m[None, :] - shift[:, None], 0), axis=1)
    np.copyto(out, inf, where=m[None, :] < shift[:, None])
    return out


def _tape_candidates(problem: Problem, table, m, i, j, d, inf) -> np.ndarray:
    thr = problem.thr_tape(i, j)[:, None]
    cost = problem.t_tape[i + 1][:, None]
    if d == 1:
        return np.where(m[None, :] >= thr, cost, inf).astype(problem.dtype)
    if not problem.multi_tape:
        return np.full((len(i), len(m)), inf, dtype=problem.dtype)
    right = table[problem.row(i + 1, j)]
    right = np.take_along_axis(right, np.maximum(m[None, :] - problem.tape_b[i + 1][:, None].astype(np.int64), 0),
                               axis=1)
    return np.where(m[None, :] >= thr, cost + right, inf).astype(problem.dtype)


def run(problem: Problem, m_top: int, progress=None):
    """Solve on the CPU: returns (curve [M+1] = C(0, N, m), policy at ``m_top`` or None)."""
    table = solve_table(problem, progress)
    curve = table[problem.row(0, problem.n)].copy()
    policy = None
    if np.isfinite(curve[m_top]):
        policy = recover_policy(problem, table_lookup(table), m_top)
    return curve, policy
