"""The discretised DP instance that every backend solves: the one statement of the recurrences.

State (i, j, m), 0 <= i < j <= N, m = 0..M buckets: a_i is held outside m, the gradient of a_j
is held inside m; C(i, j, m) is the least time (ms) to produce the gradient of a_i within m.

- Tape (T): record stage i+1, solve (i+1, j) in m - tapeB[i+1] (when j > i+1), run its backward.
  Cost ``t_tape[i+1] + C(i+1, j, m - tapeB[i+1])``; allowed when m >= thr_tape(i, j). Without
  ``multi_tape`` (thesis mode) only j = i+1 may tape.
- Checkpoint (A), i < k < j: no-grad forwards i+1..k keeping only a_k, solve (k, j) in
  m - actB[k], drop a_k, solve (i, k) in m. Cost ``(sfn(i, k) + C(k, j, m - actB[k])) + C(i, k, m)``
  (float32, in this order); allowed when m >= thr_ckpt(i, j, k).

Sizes are rounded *up* to buckets, each threshold from the exact bytes of what is held at that
moment, so a plan that fits in m buckets fits in m * bucket bytes (``thr_*_bytes`` are those exact
bytes: the bucket-free DPs and the exact-byte checks use them). ``chain.reserved_bytes`` (held
through the whole step) is part of every moment: it is added to the byte arrays each threshold
reads (``tape_fwd``, ``tape_need``, ``nograd_peak``), so every backend counts it without knowing of
it. Every threshold is at least the size subtracted for the sub-problem it guards, so shifted
indices are never negative where allowed.

Table layout (shared with the CUDA kernels): one float32 row of M+1 buckets per pair, pairs
ordered by diagonal d = j - i, then by i: ``row(i, j) = diag_offset[d] + i``. Infeasible is +inf.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..chain import Chain

BYTES_PER_STATE = 4  # one float32 time per (i, j, m); choices are recomputed, never stored
INF = np.float32(np.inf)


def tape_threshold(grad_j, tape_fwd, tape_need, larger=np.maximum):
    """Bytes Tape at (i, j) needs at its worst moment, from ``grad_bytes[j]``, ``tape_fwd[i+1]`` and
    ``tape_need[i+1]``: the recording forward (with the gradient of a_j held) or the backward. ``larger`` is
    ``np.maximum`` on arrays and the builtin ``max`` in the walks over plain ints (Note [One set of least-peak
    recurrences] in :mod:`gpusolve.dp.minpeak`)."""
    return larger(grad_j + tape_fwd, tape_need)


def checkpoint_threshold(grad_j, nograd_peak):
    """Bytes Checkpoint k at (i, j) needs for its no-grad forwards i+1..k, from ``grad_bytes[j]`` and
    ``nograd_peak[i, k]`` (arrays or plain ints)."""
    return grad_j + nograd_peak


def ceil_div(num, den: int):
    """Ceiling of num / den for non-negative integers (scalars or int64 arrays)."""
    return -(-np.asarray(num, dtype=np.int64) // np.int64(den))


@dataclass
class Problem:
    """Bucketed arrays of one instance; all indices are stages 0..N (0 = the input)."""

    n: int
    buckets: int               # M: columns are m = 0..M
    bucket_bytes: int
    multi_tape: bool
    t_tape: np.ndarray          # dtype[N+1]: t_fwd + t_bwd of stage s (index 0 unused)
    fwd_prefix: np.ndarray      # float64[N+1]: prefix sums of t_fwd_nograd
    act_b: np.ndarray           # int32[N+1]: ceil(act_bytes / bucket)
    tape_b: np.ndarray          # int32[N+1]: ceil(tape_bytes / bucket)
    grad_bytes: np.ndarray      # int64[N+1]
    tape_need: np.ndarray       # int64[N+1]: bytes the backward of s needs (+ reserved)
    tape_fwd: np.ndarray        # int64[N+1]: tape + forward-with-grad workspace of stage s (+ reserved)
    nograd_peak: np.ndarray     # int64[N+1, N+1]: worst no-grad step of i+1..k, a_i held outside (+ reserved)
    dtype: type = np.float32    # table precision: float32 (4 B/state, every backend) or float64 (CPU)

    @classmethod
    def build(cls, chain: Chain, bucket_bytes: int, buckets: int, dtype=np.float32) -> "Problem":
        """Discretise ``chain`` with ``bucket_bytes`` per bucket and columns 0..``buckets``.

        ``dtype`` float64 doubles the table for exact reference values (thesis mode, CPU only).
        """
        a = chain.padded()
        n = chain.n
        act, grad, tape = a["act_bytes"], a["grad_bytes"], a["tape_bytes"]
        dtype = np.dtype(dtype).type
        t_tape = (a["t_fwd"] + a["t_bwd"]).astype(dtype)
        fwd_prefix = np.cumsum(a["t_fwd_nograd"])
        fwd_prefix[0] = 0.0
        # Backward of stage s holds what is left of its tape, the gradients of a_s and a_{s-1}, workspace.
        reserved = np.int64(chain.reserved_bytes)
        tape_need = np.zeros(n + 1, dtype=np.int64)
        tape_need[1:] = a["bwd_tape_bytes"][1:] + grad[1:] + grad[:-1] + a["bwd_extra"][1:] + reserved
        tape_fwd = tape + a["fwd_grad_extra"] + reserved
        # A no-grad step l holds its input (unless it is a_i, held outside), output and workspace.
        step_first = act + a["fwd_nograd_extra"]
        step_inner = np.zeros(n + 1, dtype=np.int64)
        step_inner[1:] = act[:-1] + act[1:] + a["fwd_nograd_extra"][1:]
        nograd_peak = np.zeros((n + 1, n + 1), dtype=np.int64)
        for i in range(n):
            steps = step_inner[i + 1:].copy()
            steps[0] = step_first[i + 1]
            nograd_peak[i, i + 1:] = np.maximum.accumulate(steps) + reserved
        return cls(n=n, buckets=int(buckets), bucket_bytes=int(bucket_bytes), multi_tape=chain.multi_tape,
                   t_tape=t_tape, fwd_prefix=fwd_prefix,
                   # Sizes past the last column never fit (their thresholds exceed it): clamped there so
                   # that the int32 the kernels read cannot wrap (e.g. 1-byte buckets of GiB tensors).
                   act_b=np.minimum(ceil_div(act, bucket_bytes), buckets + 1).astype(np.int32),
                   tape_b=np.minimum(ceil_div(tape, bucket_bytes), buckets + 1).astype(np.int32),
                   grad_bytes=grad.astype(np.int64), tape_need=tape_need, tape_fwd=tape_fwd,
                   nograd_peak=nograd_peak, dtype=dtype)

    # ------------------------------------------------------------------ layout
    @property
    def pairs(self) -> int:
        return self.n * (self.n + 1) // 2

    @property
    def diag_offset(self) -> np.ndarray:
        """int64[N+2]: first row of diagonal d (d = 1..N); diag_offset[N+1] = number of rows."""
        d = np.arange(self.n + 2, dtype=np.int64)
        # rows before diagonal d: sum_{e=1}^{d-1} (N + 1 - e)
        return np.where(d >= 1, (d - 1) * (self.n + 1) - (d - 1) * d // 2, 0)

    def row(self, i, j):
        """Table row of pair (i, j) (scalars or arrays)."""
        d = np.asarray(j) - np.asarray(i)
        return self.diag_offset[d] + np.asarray(i)

    def table_bytes(self) -> int:
        """Bytes of the full table: pairs x (M+1) x 4."""
        return self.pairs * (self.buckets + 1) * np.dtype(self.dtype).itemsize

    # ------------------------------------------------------------------ thresholds
    def thr_tape_bytes(self, i, j):
        """Bytes the tape at (i, j) needs at its worst moment: the recording forward or the backward."""
        i = np.asarray(i)
        return tape_threshold(self.grad_bytes[np.asarray(j)], self.tape_fwd[i + 1], self.tape_need[i + 1])

    def thr_ckpt_bytes(self, i, j, k):
        """Bytes checkpoint k at (i, j) needs for its no-grad forwards i+1..k."""
        return checkpoint_threshold(self.grad_bytes[np.asarray(j)], self.nograd_peak[np.asarray(i), np.asarray(k)])

    def thr_tape(self, i, j):
        """Least m (buckets) at which tape at (i, j) is allowed: recording forward and backward fit."""
        return ceil_div(self.thr_tape_bytes(i, j), self.bucket_bytes)

    def thr_ckpt(self, i, j, k):
        """Least m (buckets) at which checkpoint k at (i, j) is allowed (the no-grad forwards fit)."""
        return ceil_div(self.thr_ckpt_bytes(i, j, k), self.bucket_bytes)

    def sfn(self, i, k):
        """Time (table dtype) of the no-grad forwards i+1..k."""
        return (self.fwd_prefix[np.asarray(k)] - self.fwd_prefix[np.asarray(i)]).astype(self.dtype)
