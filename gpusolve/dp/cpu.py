"""CPU reference backend: NumPy, vectorised over memory buckets and over i, by diagonal.

For a diagonal d and an offset r = k - i, the pairs (i, i + r) (left sub-problems) and
(i + r, i + d) (right sub-problems) are consecutive rows of the table for consecutive i, so each
candidate block is a pair of slices. The right sub-problem is read at m - act_b[k], a shift that
depends only on the row's own first index k; a second table holds every row pre-shifted by it
(written once, when its diagonal is done), which turns the inner loop into slices without gathers.
Memory: 2 x 4 bytes per state on the CPU (the GPU backend keeps 4).
"""
from __future__ import annotations

import time

import numpy as np

from .problem import Problem
from .recover import recover_policy, table_lookup

# Elements per working block (float32: 16 MiB): large enough to amortise NumPy call overhead.
BLOCK_ELEMENTS = 1 << 22


def host_bytes(problem: Problem) -> int:
    """Bytes this backend allocates: the table and its shifted copy."""
    return 2 * problem.table_bytes()


def host_bytes_for(n: int, buckets: int, itemsize: int = 4) -> int:
    """:func:`host_bytes` of an ``n``-stage problem with ``buckets`` (float32 unless ``itemsize``)."""
    return 2 * (n * (n + 1) // 2) * (buckets + 1) * itemsize


def diagonal_blocks(problem: Problem):
    """The fill's order, shared with the offload DP's fill (:mod:`gpusolve.offload.dp`): diagonal by
    diagonal (d = 1..N), in blocks of consecutive i of at most :data:`BLOCK_ELEMENTS` table elements;
    yields ``(d, start, stop, i, j)`` with ``i = start..stop-1`` (int64) and ``j = i + d``."""
    n, width = problem.n, problem.buckets + 1
    block = max(1, BLOCK_ELEMENTS // width)
    for d in range(1, n + 1):
        count = n + 1 - d
        for start in range(0, count, block):
            stop = min(count, start + block)
            i = np.arange(start, stop, dtype=np.int64)
            yield d, start, stop, i, i + d


def solve_table(problem: Problem, progress=None) -> np.ndarray:
    """Fill the whole table (rows x (M+1), ``problem.dtype``) diagonal by diagonal.

    ``progress``, if given, is called with the number of (i, j) pairs finished after each block.
    """
    width = problem.buckets + 1
    dtype = problem.dtype
    inf = dtype(np.inf)
    table = np.empty((problem.pairs, width), dtype=dtype)
    shifted = np.empty_like(table)  # shifted[row(k, j), m] = C(k, j, m - act_b[k])
    m = np.arange(width, dtype=np.int64)
    offsets = problem.diag_offset
    for d, start, stop, i, j in diagonal_blocks(problem):
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


def run(problem: Problem, m_top: int, progress=None, timings: dict | None = None):
    """Solve on the CPU: returns (curve [M+1] = C(0, N, m), policy at ``m_top`` or None).

    ``timings``, if given, receives the seconds of table fill (``"dp"``) and recovery (``"recover"``).
    """
    table = fill(problem, progress, timings)
    return table.curve, table.policy(m_top)


class HostTable:
    """A filled table: its curve C(0, N, m) and policies recovered on demand (:meth:`policy`)."""

    def __init__(self, problem: Problem, table: np.ndarray, timings: dict | None):
        self.problem, self.table, self._timings = problem, table, timings
        self.curve = table[problem.row(0, problem.n)].copy()

    def policy(self, m: int):
        """The optimal policy at ``m`` buckets, or None where the curve is infinite."""
        if not (0 <= m < len(self.curve) and np.isfinite(self.curve[m])):
            return None
        started = time.perf_counter()
        policy = recover_policy(self.problem, table_lookup(self.table), int(m))
        if self._timings is not None:
            self._timings["recover"] = self._timings.get("recover", 0.0) + time.perf_counter() - started
        return policy


def fill(problem: Problem, progress=None, timings: dict | None = None) -> HostTable:
    """Fill the whole table (``timings["dp"]``) and return it as a :class:`HostTable`."""
    started = time.perf_counter()
    table = solve_table(problem, progress)
    if timings is not None:
        timings["dp"] = timings.get("dp", 0.0) + time.perf_counter() - started
    return HostTable(problem, table, timings)
