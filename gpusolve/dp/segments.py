"""Segment policies evaluated in exact bytes, fast: the candidates users already have.

A segment policy keeps checkpoints a_c at cuts 0 < c_1 < ... < c_k < N during the forward and
tapes each segment on the way back (``torch.utils.checkpoint.checkpoint_sequential``, Chen et al.'s
greedy). In the DP's terms it is Checkpoint(c_1) whose right part is the segment policy of the
remaining cuts and whose left part tapes (0, c_1). So, with the same rules as
:mod:`gpusolve.dp.minpeak`:

- time = store-all time + the no-grad forwards of stages 1..c_k (every stage is taped exactly
  once, and the no-grad forward runs up to the last cut);
- peak, folded from the last cut: P_k = T(c_k, N), and
  P_m = max(grad[N] + nograd_peak(c_m, c_{m+1}), act[c_{m+1}] + P_{m+1}, T(c_m, c_{m+1}))
  with c_0 = 0, where T(i, j) is the peak of taping (i, j) whole (columns computed on demand).

So a candidate costs O(cuts) (and a column of T the first time), against a simulation of O(N) ops.
"""
from __future__ import annotations

import numpy as np

from ..chain import Chain
from .minpeak import checkpoint_peak
from .problem import Problem


class SegmentEvaluator:
    """Exact time and peak of segment policies of one chain (see the module docstring).

    T(i, j) is :func:`~gpusolve.dp.minpeak.tape_peak` applied from l = j - 1 down to i, which unrolls to max
    over l in [i, j) of thr_tape(l, j) + tape[i+1..l], i.e. with P the prefix sums of the tape bytes, (suffix
    maximum over l >= i of thr_tape(l, j) + P[l]) - P[i]: one column T(., j) in three array operations,
    computed for the columns the candidates touch (tests/test_segments.py checks it against the rule).
    """

    def __init__(self, chain: Chain, problem: Problem):
        n = chain.n
        self.n = n
        a = chain.padded()
        self.act = a["act_bytes"]
        self.tape_prefix = np.cumsum(a["tape_bytes"])  # P[l] = tape[1] + ... + tape[l]
        self.base_time = float(np.sum(chain.t_fwd) + np.sum(chain.t_bwd))
        self.prefix = problem.fwd_prefix.astype(np.float64)
        self._problem = problem
        self._columns: dict[int, np.ndarray] = {}

    def tape_peak(self, i: int, j: int) -> int:
        """T(i, j): the peak of taping (i, j) whole (plain autograd on the sub-chain)."""
        column = self._columns.get(j)
        if column is None:
            l = np.arange(j, dtype=np.int64)  # noqa: E741
            thr = self._problem.thr_tape_bytes(l, j)
            column = np.maximum.accumulate((thr + self.tape_prefix[l])[::-1])[::-1] - self.tape_prefix[l]
            self._columns[j] = column
        return int(column[i])

    def evaluate(self, cuts) -> tuple[float, int]:
        """(time ms, peak bytes) of the segment policy with these cuts (sorted, in (0, N))."""
        cuts = [int(c) for c in cuts]
        n = self.n
        if not cuts:
            return self.base_time, self.tape_peak(0, n)
        peak = self.tape_peak(cuts[-1], n)
        for m in range(len(cuts) - 1, -1, -1):
            lo = cuts[m - 1] if m > 0 else 0
            c = cuts[m]
            peak = checkpoint_peak(int(self._problem.thr_ckpt_bytes(lo, n, c)), int(self.act[c]), peak,
                                   self.tape_peak(lo, c), max)
        return self.base_time + float(self.prefix[cuts[-1]] - self.prefix[0]), peak

    def fastest_fitting(self, cut_sets, budget_bytes: int):
        """(time, peak, cuts) of the fastest cut set whose peak fits ``budget_bytes``, or None."""
        best = None
        for cuts in cut_sets:
            time_ms, peak = self.evaluate(cuts)
            if peak <= budget_bytes and (best is None or time_ms < best[0]):
                best = (time_ms, peak, tuple(cuts))
        return best
