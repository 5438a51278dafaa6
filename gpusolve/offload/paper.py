"""The offloading seed paper's model and algorithms, exactly, as baselines.

Paper: Beaumont, Eyraud-Dubois, Shilova, "Optimal GPU-CPU Offloading Strategies for Deep Neural
Network Training", hal-02316266v1 (2019), written [O] below; restated with its errata in the spec
``offload.md``, Part B (B.1-B.3). Self-contained: NumPy only, nothing from the recompute DP.

The model ([O] §3.1)
--------------------
Ops F_0..F_L then B_L..B_0 on one device. F_i: x_i -> x_{i+1}; B_i: (x_i, x_{i+1}, y_{i+1}) -> y_i.
Running F_i holds |x_i| + |x_{i+1}| + ex_i^F; B_i holds |x_i| + |x_{i+1}| + |y_i| + |y_{i+1}| + ex_i^B,
on top of every other x_j kept. Activations x_i may be *offloaded* (after they exist) and *prefetched*
(before B_i) over one channel (A) of rate B (B: transferring x_i takes |x_i| / B, the printed "B|x_i|"
is an erratum), overlapping computation (C); (D) x_i occupies GPU memory during the whole transfer
(offload frees at its end, prefetch reserves at its start). Host memory is unbounded.

Tensor lifetimes used by every simulator here (Note [Lifetimes]): x_0 exists from time 0, x_{k+1}
from the start of F_k; x_k dies at the end of B_{k-1} (x_0 at the end of B_0); y_j is born at the
start of B_j and dies at the end of B_{j-1} (y_{L+1} lives during B_L, y_0 to the end); ex_i^F and
ex_i^B live during their op. An op checks memory at its start (with its output and workspace); a
transfer's memory changes as (D) says, or continuously in the relaxations.

What is here
------------
* :class:`OffloadChain` -- an instance (u_F, u_B, |x_0..x_{L+1}|, |y_0..y_{L+1}|, ex^F, ex^B, M_GPU, B),
  :meth:`OffloadChain.from_chain` maps a gpusolve :class:`~gpusolve.chain.Chain` onto it.
* :func:`simulate` -- the ordered schedule for given offload decisions (offloads by increasing index,
  prefetches by decreasing index): forward no-wait, backward no-wait in reverse time (prefetches as
  late as possible, [O] §5.2.1), joined with the least idle gap that keeps the whole timeline valid
  (checked by :func:`validate`). ``fluid=False``: Problem 1 (integral, (D)); ``fluid=True``: memory
  moves continuously with the transfer (the relaxations of §4 and §5), with partial amounts allowed
  (Theorem 2). Note [The simulated schedule].
* :func:`m_peak`, :func:`m_min`, :func:`lower_bound` (Prop. 3), :func:`greedy` (§4.2),
  :func:`fractional_optimum` (Theorem 2), :func:`dynprog` (Algorithm 1 with eqs. (1)-(10), S slots or
  exact), :func:`relaxed_makespan` (eqs. (1)-(10) along fixed decisions), :func:`vdnn` (§6.1).
* :func:`issue_points` -- a timeline as what an executor issues before each op (Note [Issuing a
  timeline]; ``torch_exec.paper_offload`` runs it), :func:`issued_makespan` -- that program's time.
* :func:`three_partition_instance`, :func:`two_partition_instance` -- the reductions of Theorems 1, 3.

Note [Errata and readings] (spec B.1, B.2; each one is a parameter or a test)
---------------------------------------------------------------------------
1. (B) "B|x_i|" -> |x_i| / B.
2. (6) prints ex_i^F; Algorithm 1's test uses ex_i^B: ex_i^B here.
3. M_{B_i} = |y_i| + Δ⁺_{B_i} + M_{F_i} − Δ⁺_{F_i} (Algorithm 1's clipped form).
4. Algorithm 1's validity test subtracts Δ_{F_i} and Δ_{B_i}; for a negative Δ (idle channel) that
   *adds* |Δ| and rejects states that fit. The text's derivation means "memory once every pending
   transfer is done", i.e. Δ⁺: Δ⁺ by default, ``literal_validity=True`` for the printed form.
5. (9): Av_B = −Δ_{B_{L+1}} is data; as a time it is −Δ_{B_{L+1}}/B (same for Av_F in (10)).
6. (9): R_j = ex_j^B + |y_j| + |y_{j−1}| is printed; B_j holds y_{j+1} and y_j: R_j = ex_j^B + |y_{j+1}| + |y_j|.
7. (10)'s condition "Δ_{F_{L+1}} ≥ 0" must be ≤ 0 (the symmetric case of (9)).
8. §5.2.1 defines Δ_{B_i} as the data "from x_L, ..., x_i" prefetched before B_{i−1} starts; (7)/(8) and
   the identity M_{B_i} − Δ_{B_i} = |y_i| + |x_i| + Σ_{j<i kept} |x_j| only hold for the offloaded x_0..x_{i−1}
   (reverse-time backlog: prefetch of x_{<i} that must happen before B_{i−1} starts). That reading is used.
(9) and (10) themselves are kept as printed (with 5-7): they are conservative -- (9) charges every B_j
before the first prefetch with all of M_{F_{L+1}} although x_{j+2}.. are freed by then, (10) charges
every F_j with M_{B_{L+1}} -- so Algorithm 1's value can exceed the simulated makespan of its own
decisions; the bench reports both.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

INF = math.inf
S_PUBLISHED = 500
# 12.2 GB/s ([O] §6.1, GPU -> RAM with PyTorch on a V100-PCIE), in bytes per millisecond.
B_V100_BYTES_PER_MS = 12.2e9 / 1e3
_TOL = 1e-9


# ---------------------------------------------------------------------------- the instance
def _vec(name, values, n, allow_empty=False):
    arr = np.asarray(values, dtype=object if _is_exact(values) else np.float64).reshape(-1)
    if len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} values, expected {n}")
    for k, v in enumerate(arr):
        fv = float(v)
        if not math.isfinite(fv) or fv < 0:
            raise ValueError(f"{name}[{k}] = {fv:g}; every cost and size must be finite and >= 0")
    return arr


def _is_exact(values) -> bool:
    try:
        return any(isinstance(v, Fraction) for v in values)
    except TypeError:
        return isinstance(values, Fraction)


@dataclass
class OffloadChain:
    """An instance of [O]'s Problem 1 for L + 1 ops F_0..F_L, B_0..B_L.

    ``uF``, ``uB``, ``exF``, ``exB``: L + 1 values (op i); ``x``, ``y``: L + 2 values (x_0..x_{L+1},
    y_0..y_{L+1}); ``M`` = M_GPU; ``B`` = bandwidth (size units per time unit). Any consistent units;
    :meth:`from_chain` gives bytes and milliseconds. Values may be ``Fraction`` (exact arithmetic).
    """

    uF: np.ndarray
    uB: np.ndarray
    x: np.ndarray
    y: np.ndarray
    exF: np.ndarray
    exB: np.ndarray
    M: float
    B: float
    names: list | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        n = len(np.asarray(self.uF).reshape(-1))
        if n == 0:
            raise ValueError("the chain is empty: it needs at least one op")
        self.uF = _vec("uF", self.uF, n)
        self.uB = _vec("uB", self.uB, n)
        self.exF = _vec("exF", self.exF, n)
        self.exB = _vec("exB", self.exB, n)
        self.x = _vec("x", self.x, n + 1)
        self.y = _vec("y", self.y, n + 1)
        for name in ("M", "B"):
            v = getattr(self, name)
            if not isinstance(v, (int, float, Fraction, np.integer, np.floating)) or not math.isfinite(float(v)):
                raise ValueError(f"{name} = {v!r}; it must be a finite number")
        if float(self.B) <= 0:
            raise ValueError(f"B = {self.B!r}; the bandwidth must be > 0")
        if float(self.M) < 0:
            raise ValueError(f"M_GPU = {self.M!r}; it must be >= 0")
        need = m_min(self)
        if float(self.M) < float(need) - _TOL * max(1.0, float(need)):
            raise ValueError(f"M_GPU = {float(self.M):g} is below the minimum memory to run the chain, {float(need):g} "
                             f"(the largest op footprint, everything else offloaded)")

    @property
    def L(self) -> int:
        return len(self.uF) - 1

    def with_memory(self, M) -> "OffloadChain":
        """The same chain with M_GPU = ``M`` (validated)."""
        return OffloadChain(self.uF, self.uB, self.x, self.y, self.exF, self.exB, M, self.B, self.names, dict(self.meta))

    @classmethod
    def from_chain(cls, chain, M_GPU=None, B: float = B_V100_BYTES_PER_MS) -> "OffloadChain":
        """[O]'s instance for a gpusolve chain (bytes, ms); ``M_GPU`` defaults to M_peak (no offload).

        Note [Mapping a gpusolve chain onto the paper's model]
        Stage s = 1..N of the chain is op i = s − 1 (L = N − 1).
        - u_{F_i} = ``t_fwd[s]`` (forward *with* autograd recording: [O] has no recomputation, every
          forward records), u_{B_i} = ``t_bwd[s]``.
        - |x_0| = ``input_bytes`` (counted in M_GPU, as in [O]; our recompute DP leaves it outside the
          budget); |x_{i+1}| = ``tape_bytes[s]``: everything F_i leaves for the backward (its output a_s
          *and* the tensors autograd saved). [O] keeps only x_i per op and assumes B_i needs x_i,
          x_{i+1}, y_{i+1}; its chains are "virtual layers" whose saved intermediates sit inside the layer's
          activation. With |x| = ``act_bytes`` the sum of the x would miss the saved intermediates
          (ResNet-50: tapes 10.2 GiB vs activations 3.6 GiB) and M_peak would be far below what store-all
          really holds; with the tape every byte the forward keeps is one of the x, offloading x_{i+1}
          moves the whole tape of stage s, and Σ|x| + transients is the store-all peak. The price: F_{i+1}
          is charged with the whole tape of s as its input (it is resident anyway in [O]'s model).
        - |y_0| = ``input_grad_bytes``, |y_{i+1}| = ``grad_bytes[s]`` (gradient of a_s).
        - ex_i^F = ``fwd_grad_extra[s]`` (forward-with-grad peak beyond the tensors before it and its tape),
          ex_i^B = ``bwd_extra[s]`` (backward peak beyond held tensors + both gradients) -- the profile's
          transient peaks beyond inputs and outputs, as [O] measured them.
        - ``bwd_tape_bytes`` is not used: [O]'s B_i needs all of x_{i+1}.
        - ``reserved_bytes`` is subtracted from ``M_GPU`` (held through the whole step).
        - B: default 12.2 GB/s = 12.2e9 B/s ([O] §6.1's V100-PCIE GPU->RAM figure, not measured here).
        """
        p = chain.padded()
        uF, uB = p["t_fwd"][1:], p["t_bwd"][1:]
        x = np.concatenate([[chain.input_bytes], p["tape_bytes"][1:]]).astype(np.float64)
        y = np.concatenate([[chain.input_grad_bytes], p["grad_bytes"][1:]]).astype(np.float64)
        exF, exB = p["fwd_grad_extra"][1:].astype(np.float64), p["bwd_extra"][1:].astype(np.float64)
        probe = cls.__new__(cls)
        probe.uF, probe.uB, probe.x, probe.y, probe.exF, probe.exB = uF, uB, x, y, exF, exB
        if M_GPU is None:
            M = float(m_peak(probe))
        else:
            M = float(M_GPU) - float(chain.reserved_bytes)
        return cls(uF, uB, x, y, exF, exB, M, float(B), list(chain.names),
                   {"source": chain.provenance.get("source", ""), "stages": chain.n})


# ---------------------------------------------------------------------------- bounds
def m_fwd(c) -> np.ndarray:
    """m_{F_i} = ex_i^F + Σ_{j ≤ i+1} |x_j| ([O] §3.2)."""
    cs = np.cumsum(c.x)
    return np.array([c.exF[i] + cs[i + 1] for i in range(len(c.uF))], dtype=object if _exact(c) else float)


def m_bwd(c) -> np.ndarray:
    """m_{B_i} = ex_i^B + |y_i| + |y_{i+1}| + Σ_{j ≤ i+1} |x_j|."""
    cs = np.cumsum(c.x)
    return np.array([c.exB[i] + c.y[i] + c.y[i + 1] + cs[i + 1] for i in range(len(c.uF))],
                    dtype=object if _exact(c) else float)


def _exact(c) -> bool:
    return c.x.dtype == object


def m_peak(c):
    """M_peak: the memory store-all needs (Prop. 2: any valid schedule offloads ≥ M_peak − M_GPU)."""
    return max(max(m_fwd(c)), max(m_bwd(c)))


def m_min(c):
    """The least M_GPU that runs the chain at all: the largest single-op footprint (inputs, output,
    workspace), everything else offloaded -- the 0 % point of [O]'s Figs. 5-11."""
    L = len(c.uF) - 1
    f = [c.x[i] + c.x[i + 1] + c.exF[i] for i in range(L + 1)]
    b = [c.x[i] + c.x[i + 1] + c.y[i] + c.y[i + 1] + c.exB[i] for i in range(L + 1)]
    return max(max(f), max(b))


def lower_bound(c):
    """Prop. 3: LB = max(Σ_i (u_{F_i} + u_{B_i}), 2 (M_peak − M_GPU) / B)."""
    return max(sum(c.uF) + sum(c.uB), 2 * (m_peak(c) - c.M) / c.B)


# ---------------------------------------------------------------------------- simulation
# Note [The simulated schedule]
# -----------------------------
# For fixed decisions (which x_i, and in the fluid case how much of each) the transfers are ordered:
# offloads by increasing index, then prefetches by decreasing index, one at a time (A).
# Forward, forward in time: F_i starts once F_{i-1} is done and memory allows (held + ex_i^F + |x_{i+1}|
# <= M); the offload of x_i may start at the start of F_i (it is F_i's input: released earlier, F_i could
# not read it -- and when the channel is idle at the end of F_{i-1} F_i starts right then anyway).
# Backward, in reverse time tau = T - t (as [O] §5.2.1 moves backward ops and prefetches as late as
# possible): (D) is symmetric -- a prefetch reserving at its real start is a "release" at its reverse end
# -- and B_j's memory peak is at its real end (prefetches started during it count), i.e. at its reverse
# start. So the backward is a forward-like pass over B_0, B_1, ..., B_L in which the reverse transfer of
# x_j may start only after B_j's reverse end (its prefetch must be complete before B_j starts).
# Join: B_L starts g >= 0 after F_L ends; g is the least value for which the whole timeline (forward
# offloads spilling into the backward, prefetches reaching into the forward, one channel) passes
# :func:`validate` (monotone in g: binary search, then the candidate's validity is re-checked). This is
# the structure Algorithm 1 optimises over, with the real (integral) memory rule of (D) or, with
# ``fluid=True``, memory moving continuously with the transfer.


@dataclass
class Timeline:
    """A full schedule: op intervals, transfer intervals (kind, index, amount, start, end)."""
    F: list          # (start, end) of F_i
    Bop: list        # (start, end) of B_i
    transfers: list  # ("off"|"pre", i, amount, start, end)
    makespan: float
    gap: float
    peak: float


@dataclass
class SimResult:
    feasible: bool
    makespan: float
    reason: str = ""
    timeline: Timeline | None = None


def _amounts(c, offload, fluid):
    n = len(c.x) - 1  # x_0..x_L may be offloaded (x_{L+1} is used right away by B_L)
    if offload is None:
        offload = ()
    arr = np.asarray(list(offload) if not isinstance(offload, np.ndarray) else offload)
    if arr.dtype == bool or (len(arr) == n and fluid and arr.dtype != np.int64 and arr.dtype != int):
        if arr.dtype == bool:
            return [float(c.x[i]) if arr[i] else 0.0 for i in range(n)]
        a = [float(v) for v in arr]
        for i, v in enumerate(a):
            if v < -_TOL or v > float(c.x[i]) * (1 + 1e-12) + _TOL:
                raise ValueError(f"offload amount of x_{i} = {v!r} is outside [0, |x_{i}| = {c.x[i]}]")
        return [min(max(v, 0.0), float(c.x[i])) for i, v in enumerate(a)]
    out = [0.0] * n
    for i in arr.tolist():
        if not 0 <= int(i) < n:
            raise ValueError(f"offload index {i} is outside 0..{n - 1} (x_0..x_L may be offloaded)")
        out[int(i)] = float(c.x[int(i)])
    return out


def _earliest(held, pending, t, want, fluid):
    """Least t' >= t with held - released(t') <= want (pending: sequential [start, end, amount])."""
    rel = 0.0
    for _s, e, a in pending:
        if e <= t:
            rel += a
    cur = rel
    for s, e, a in pending:
        if s < t < e and fluid:
            cur += a * (t - s) / (e - s)
    if held - cur <= want:
        return t
    for s, e, a in pending:
        if e <= t:
            continue
        if fluid and a > 0:
            lo = max(s, t)
            tt = s + (e - s) * (held - rel - want) / a
            if tt <= e:
                return max(tt, lo)
        rel += a
        if held - rel <= want:
            return e
    return None


def _pass(durations, need, base_x, amounts, enqueue_at_start, M, B, fluid):
    """One phase (forward in time, or the backward in reverse time). Op k needs memory
    ``held + need[k]`` at its start, where held = Σ_{j<k} base_x[j] (+ base_x[k] when
    ``enqueue_at_start``) minus what transfers released. Transfer of x_k (amount[k]) is queued at the
    start (forward) or the end (reverse) of op k. Returns (op intervals, transfers, end, ok, reason)."""
    n = len(durations)
    t = 0.0
    chan = 0.0
    held = 0.0          # bytes counted as held (before releases of queued transfers)
    pending = []        # [start, end, amount] queued transfers not yet fully released, in channel order
    ops, transfers = [], []
    for k in range(n):
        if enqueue_at_start:
            held += base_x[k]
        want = M - need[k] + 1e-12 * max(1.0, M)
        start = _earliest(held, pending, t, want, fluid)
        if start is None:
            return ops, transfers, t, False, f"op {k} cannot get {need[k]:.6g} of memory (held {held:.6g}, M {M:.6g})"
        # drop transfers fully released by start
        while pending and pending[0][1] <= start + 1e-15:
            held -= pending[0][2]
            pending.pop(0)
        if fluid and pending and pending[0][0] < start:
            s, e, a = pending[0]
            done = a * (start - s) / (e - s)
            held -= done
            pending[0] = [start, e, a - done]
        end = start + durations[k]
        ops.append((start, end))
        if amounts[k] > 0:
            ready = start if enqueue_at_start else end
            s = max(chan, ready)
            e = s + amounts[k] / B
            chan = e
            pending.append([s, e, amounts[k]])
            transfers.append((k, amounts[k], s, e))
        if not enqueue_at_start:
            held += base_x[k]
        t = end
    return ops, transfers, t, True, ""


def simulate(c: OffloadChain, offload=(), fluid: bool = False, check: bool = True) -> SimResult:
    """Makespan of the ordered schedule offloading ``offload`` (indices of x_0..x_L, or a boolean mask;
    with ``fluid=True`` also per-x amounts, Theorem 2's partial offloads). Note [The simulated schedule].
    ``fluid=False``: Problem 1 (assumption (D)); ``fluid=True``: memory released / reserved continuously.
    Infeasible decisions give ``feasible=False`` with the reason and makespan inf."""
    L = len(c.uF) - 1
    M, B = float(c.M), float(c.B)
    x = [float(v) for v in c.x]
    y = [float(v) for v in c.y]
    amounts = _amounts(c, offload, fluid)
    # forward: op i holds x_0..x_i (minus released), needs ex_i^F + x_{i+1}
    needF = [float(c.exF[i]) + x[i + 1] for i in range(L + 1)]
    opsF, offs, tF, ok, why = _pass([float(v) for v in c.uF], needF, x[:L + 1], amounts, True, M, B, fluid)
    if not ok:
        return SimResult(False, INF, "forward: " + why)
    # backward, reverse time: op j holds x_0..x_{j-1} (minus released), needs its own footprint
    needB = [float(c.exB[j]) + y[j] + y[j + 1] + x[j] + x[j + 1] for j in range(L + 1)]
    opsR, pres, tR, ok, why = _pass([float(v) for v in c.uB], needB, x[:L + 1], amounts, False, M, B, fluid)
    if not ok:
        return SimResult(False, INF, "backward: " + why)
    spill = max([e for (_, _, _, e) in offs], default=0.0) - tF
    pre_block = max([e for (_, _, _, e) in pres], default=0.0) - tR
    g_hi = max(0.0, spill) + max(0.0, pre_block) + 1e-9 * max(1.0, tF + tR)

    def build(g):
        sB = tF + g
        Bop = [None] * (L + 1)
        for j, (rs, re_) in enumerate(opsR):
            Bop[j] = (sB + tR - re_, sB + tR - rs)
        tr = [("off", k, a, s, e) for (k, a, s, e) in offs]
        tr += [("pre", k, a, sB + tR - e, sB + tR - s) for (k, a, s, e) in pres]
        start = min([0.0] + [s for (_, _, _, s, _) in tr])
        return Timeline(list(opsF), Bop, tr, sB + tR - start, g, 0.0)

    def valid(g):
        tl = build(g)
        ok, peak, _ = validate(c, tl, fluid)
        tl.peak = peak
        return ok, tl

    ok0, tl = valid(0.0)
    if not ok0:
        ok_hi, tl_hi = valid(g_hi)
        if not ok_hi:
            ok2, peak, why = validate(c, tl_hi, fluid)
            return SimResult(False, INF, f"join: no valid gap ({why})")
        lo, hi, tl = 0.0, g_hi, tl_hi
        for _ in range(100):
            mid = (lo + hi) / 2
            okm, tlm = valid(mid)
            if okm:
                hi, tl = mid, tlm
            else:
                lo = mid
            if hi - lo <= 1e-12 * max(1.0, tF + tR):
                break
    return SimResult(True, tl.makespan, "", tl)


def validate(c: OffloadChain, tl: Timeline, fluid: bool = False):
    """Check a full timeline against the model: precedence (ops in order, offload after its data exists,
    prefetch after its offload and done before B_i), one transfer at a time (A), and memory <= M_GPU at
    every instant with (D) (or continuous transfers when ``fluid``). Returns (ok, peak, reason).
    Independent of how the timeline was built (Note [Lifetimes])."""
    L = len(c.uF) - 1
    M = float(c.M)
    x = [float(v) for v in c.x]
    y = [float(v) for v in c.y]
    tol = 1e-9 * max(1.0, tl.makespan)
    seq = [tl.F[i] for i in range(L + 1)] + [tl.Bop[j] for j in range(L, -1, -1)]
    for q in range(1, len(seq)):
        if seq[q][0] < seq[q - 1][1] - tol:
            return False, INF, f"op {q} starts before op {q - 1} ends"
    chan = sorted(tl.transfers, key=lambda r: (r[3], r[4]))
    for a, b in zip(chan, chan[1:], strict=False):
        if b[3] < a[4] - tol:
            return False, INF, f"transfers {a[:2]} and {b[:2]} overlap"
    off = {k: (a, s, e) for (kind, k, a, s, e) in tl.transfers if kind == "off"}
    pre = {k: (a, s, e) for (kind, k, a, s, e) in tl.transfers if kind == "pre"}
    if set(off) != set(pre):
        return False, INF, "offloaded and prefetched sets differ"
    for k, (_a, s, e) in off.items():
        if s < tl.F[k][0] - tol:
            return False, INF, f"x_{k} offloaded before F_{k} starts"
        if pre[k][1] < e - tol:
            return False, INF, f"x_{k} prefetched before its offload ends"
        if pre[k][2] > tl.Bop[k][0] + tol:
            return False, INF, f"x_{k} prefetch ends after B_{k} starts"
    # events: (time, rank, delta). rank: releases first (-2), op events by order 2q / 2q+1, prefetch
    # reservations after op events at the same time (big).
    BIG = 10 ** 9
    ev = []
    lin = []  # fluid: (s, e, amount, sign) linear pieces; sign -1 = release, +1 = reserve

    def rank_start(q):
        return 2 * q

    qF = {i: i for i in range(L + 1)}
    qB = {j: L + 1 + (L - j) for j in range(L + 1)}
    # x_0
    ev.append((0.0, -3, x[0]))
    for i in range(L + 1):
        s, e = tl.F[i]
        ev.append((s, rank_start(qF[i]), x[i + 1] + float(c.exF[i])))
        ev.append((e, rank_start(qF[i]) + 1, -float(c.exF[i])))
    for j in range(L + 1):
        s, e = tl.Bop[j]
        born = float(c.exB[j]) + y[j] + (y[j + 1] if j == L else 0.0)
        ev.append((s, rank_start(qB[j]), born))
        dead = float(c.exB[j]) + x[j + 1] + y[j + 1]
        if j == 0:
            dead += x[0]
        ev.append((e, rank_start(qB[j]) + 1, -dead))
    for a, s, e in off.values():
        if fluid:
            ev.append((e, -2, -a))
            lin.append((s, e, a, -1))
        else:
            ev.append((e, -2, -a))
    for a, s, e in pre.values():
        if fluid:
            ev.append((e, -2, a))
            lin.append((s, e, a, +1))
        else:
            ev.append((s, BIG, a))
    ev.sort(key=lambda r: (r[0], r[1]))
    times = np.array([r[0] for r in ev])
    level = np.cumsum([r[2] for r in ev])
    if fluid and lin:
        for (s, e, a, sign) in lin:
            if e <= s:
                continue
            inside = (times >= s) & (times < e)
            frac = np.clip((times - s) / (e - s), 0.0, 1.0)
            level = level + np.where(inside, sign * a * frac, 0.0)
    peak = float(level.max())
    if peak > M + 1e-9 * max(1.0, M):
        at = int(level.argmax())
        return False, peak, f"memory {peak:.6g} > M_GPU {M:.6g} at t = {times[at]:.6g}"
    return True, peak, ""


# ---------------------------------------------------------------------------- GREEDY, Theorem 2, VDNN
def _movable(c: OffloadChain, movable) -> list[bool]:
    """Which of x_0..x_L may move (Note [What may move]); all of them by default."""
    n = len(c.x) - 1
    if movable is None:
        return [True] * n
    out = [bool(v) for v in movable][:n]
    if len(out) != n:
        raise ValueError(f"movable has {len(out)} values, expected at least {n} (x_0..x_L)")
    return out


# Note [What may move]
#     The paper lets every x_i move. An executor cannot free an activation that something else still
#     holds: a storage a later stage passes on in its own output (Note [Outputs passed through] in
#     gpusolve/chain.py), or a tensor it keeps on the device. ``movable`` (e.g. ``Chain.swappable()``)
#     restricts the decisions: GREEDY takes the movable x_i in index order, DYNPROG offers the "kept"
#     branch only for the others, VDNN ranks only movable ones. With every x_i movable all three are
#     the paper's.
def greedy(c: OffloadChain, movable=None) -> list[int]:
    """§4.2 GREEDY's decisions: x_0..x_k, k the least index with Σ_{i≤k} |x_i| ≥ M_peak − M_GPU
    (nothing when M_peak ≤ M_GPU); only the ``movable`` ones (Note [What may move])."""
    need = m_peak(c) - c.M
    if need <= 0:
        return []
    ok = _movable(c, movable)
    acc, chosen = 0, []
    for k in range(len(c.x) - 1):
        if ok[k]:
            acc += c.x[k]
            chosen.append(k)
            if acc >= need:
                break
    return chosen


def eager_amounts(c: OffloadChain, Q) -> list[float]:
    """The eager offload of a quantity Q: x_0, x_1, ... entirely, the last one partially (§4.1)."""
    out, left = [], float(Q)
    for k in range(len(c.x) - 1):
        a = min(float(c.x[k]), max(0.0, left))
        out.append(a)
        left -= a
    return out


def fractional_optimum(c: OffloadChain) -> SimResult:
    """Theorem 2: the no-wait, eager, ordered schedule offloading exactly M_peak − M_GPU is optimal for
    the fractional relaxation (partial offloads, memory moving with the transfer)."""
    return simulate(c, eager_amounts(c, max(0.0, float(m_peak(c) - c.M))), fluid=True)


def vdnn_candidates(c: OffloadChain, max_thresholds: int | None = None, movable=None) -> list[list[int]]:
    """§6.1's VDNN: ratio u_{F_i} / |x_i| for the x_i that may move; for every threshold the set of
    ratios at or above it, and every other one of that set ("half of them", the every-other-conv
    analogue), in index order. ``max_thresholds`` keeps that many thresholds (quantiles) for long chains."""
    n = len(c.x) - 1
    ok = _movable(c, movable)
    ratio = [(float(c.uF[i]) / float(c.x[i]) if float(c.x[i]) > 0 and ok[i] else -INF) for i in range(n)]
    thr = sorted({r for r in ratio if r > -INF}, reverse=True)
    if max_thresholds and len(thr) > max_thresholds:
        pick = np.unique(np.linspace(0, len(thr) - 1, max_thresholds).round().astype(int))
        thr = [thr[p] for p in pick]
    out = []
    for t in thr:
        chosen = [i for i in range(n) if ratio[i] >= t]
        out.append(chosen)
        out.append(chosen[::2])
    return out


def vdnn(c: OffloadChain, max_thresholds: int | None = None, movable=None):
    """Best (makespan, decisions) over :func:`vdnn_candidates` in the integral model; (inf, None) if none
    is feasible. Offloading nothing is a candidate only when M_peak ≤ M_GPU (VDNN always offloads)."""
    best = (INF, None)
    cands = vdnn_candidates(c, max_thresholds, movable)
    if m_peak(c) <= c.M:
        cands = [[]] + cands
    for d in cands:
        r = simulate(c, d)
        if r.feasible and r.makespan < best[0]:
            best = (r.makespan, d)
    return best


# ---------------------------------------------------------------------------- Algorithm 1
@dataclass
class _Q:
    """Quantities in DP units: sizes in slots (or exact), B in slots per time unit."""
    x: list
    y: list
    exF: list
    exB: list
    uF: list
    uB: list
    M: object
    B: object
    ceil: bool


def _quantise(c: OffloadChain, S):
    if S is None:
        def fr(v):
            if isinstance(v, Fraction):
                return v
            return Fraction(v).limit_denominator(10 ** 12) if isinstance(v, float) else Fraction(int(v))
        return _Q([fr(v) for v in c.x], [fr(v) for v in c.y], [fr(v) for v in c.exF], [fr(v) for v in c.exB],
                  [fr(v) for v in c.uF], [fr(v) for v in c.uB], fr(c.M), fr(c.B), False), 1.0
    slot = float(c.M) / S

    def sl(v):
        return int(math.ceil(float(v) / slot - 1e-9))
    return _Q([sl(v) for v in c.x], [sl(v) for v in c.y], [sl(v) for v in c.exF], [sl(v) for v in c.exB],
              [float(v) for v in c.uF], [float(v) for v in c.uB], S, float(c.B) / slot, True), slot


def _pos(v):
    return v if v > 0 else 0 * v


def _step(q, i, MF, DF, DB, offload, literal):
    """Eqs. (1)-(8) for op i from state (M_{F_i}, Δ_{F_i}, Δ_{B_i}); None if the state is invalid
    (Algorithm 1's test). Returns (eps_F + eps_B, M', Δ_F', Δ_B')."""
    M, B = q.M, q.B
    DFp, DBp = _pos(DF), _pos(DB)
    MB = q.y[i] + DBp + MF - DFp
    dF = DF if literal else DFp
    dB = DB if literal else DBp
    if MF + q.exF[i] - dF + q.x[i + 1] > M or MB + q.exB[i] + q.x[i + 1] + q.y[i + 1] - dB > M:
        return None
    epsF = _pos(MF + q.exF[i] + q.x[i + 1] - M) / B                      # (1)
    epsB = _pos(MB + q.exB[i] + q.x[i + 1] + q.y[i + 1] - M) / B         # (6), ex_i^B (erratum 2)
    wF = (epsF + q.uF[i]) * B
    wB = (epsB + q.uB[i]) * B
    if offload:
        nDF = DFp + q.x[i] - wF                                          # (2)
        nMF = MF + q.x[i + 1] - min(DFp + q.x[i], wF)                    # (3)
        nDB = q.x[i] + _pos(DB - wB)                                     # (7)
    else:
        nDF = DF - wF                                                    # (4)
        nMF = MF + q.x[i + 1] - min(DFp, wF)                             # (5)
        nDB = DB - wB                                                    # (8)
    return epsF + epsB, nMF, nDF, nDB


def _eps_g(q, MF, DF, DB):
    """ε_G, eqs. (9)/(10) with errata 5-7."""
    L = len(q.uF) - 1
    M, B = q.M, q.B
    if DF <= 0 and DB <= 0:
        return 0 * B
    if DF > 0 and DB > 0:
        return (DF + DB) / B
    if DF > 0:                                                           # (9)
        av = -DB / B
        best = max(0 * B, DF / B - av)
        U = 0 * B
        for j in range(L, -1, -1):                                       # U_j^B = Σ_{i=j+1..L} u_{B_i}
            if not U < av:
                break
            R = q.exB[j] + q.y[j + 1] + q.y[j]                           # erratum 6
            best = max(best, (R + MF - M) / B - U)
            U += q.uB[j]
        return best
    av = -DF / B                                                         # (10), Δ_F ≤ 0 (erratum 7)
    MB = q.y[L + 1] + _pos(DB) + MF - _pos(DF)
    best = max(0 * B, DB / B - av)
    U = 0 * B
    for j in range(L, -1, -1):
        if not U < av:
            break
        best = max(best, (q.exF[j] + MB - M) / B - U)
        U += q.uF[j]
    return best


def relaxed_makespan(c: OffloadChain, offload, S=None, literal_validity=False):
    """The value eqs. (1)-(10) give along fixed decisions (what Algorithm 1 minimises): Σ(u_F + u_B) +
    Σ(ε_F + ε_B) + ε_G; inf if a state fails Algorithm 1's test. ``S=None``: exact (Fractions)."""
    q, _ = _quantise(c, S)
    chosen = set(int(i) for i in offload)
    L = len(c.uF) - 1
    MF, DF, DB = q.x[0], 0 * q.B, 0 * q.B
    idle = 0 * q.B
    for i in range(L + 1):
        r = _step(q, i, MF, DF, DB, i in chosen, literal_validity)
        if r is None:
            return INF
        e, MF, DF, DB = r
        if q.ceil:
            MF, DF, DB = _ceil(MF), _ceil(DF), _ceil(DB)
        idle += e
    idle += _eps_g(q, MF, DF, DB)
    return float(sum(q.uF) + sum(q.uB) + idle)


def _ceil(v):
    return int(math.ceil(v - 1e-9))


@dataclass
class DynProgResult:
    value: float            # Algorithm 1's optimum: Σ(u_F + u_B) + least idle (inf: no valid state)
    decisions: list | None  # offloaded indices (backtracked)
    states: int             # largest hash table (states of one IDLE_i)
    seconds: float
    S: int | None
    truncated: bool = False
    reason: str = ""


class StateBudgetExceeded(RuntimeError):
    pass


def dynprog(c: OffloadChain, S: int | None = S_PUBLISHED, literal_validity: bool = False,
            max_states: int = 3_000_000, max_seconds: float | None = None, movable=None) -> DynProgResult:
    """Algorithm 1. ``S`` memory slots of M_GPU / S ([O] §6.1: sizes rounded up; state values rounded up
    to whole slots after each step -- Note [Slots]); ``S=None``: exact, one Python dict per i with
    Fraction keys (tiny integer instances). ``max_states`` bounds one IDLE_i table (raises
    :class:`StateBudgetExceeded`), ``max_seconds`` the run (same). ``movable``: Note [What may move].

    Note [Slots]: [O] says all memory sizes are whole slots, rounded up; Δ_F, Δ_B and M_F after a step
    are memory amounts too (an amount moved in (ε + u)·B is not whole), so they are rounded up as well
    -- pessimistic, and what keeps the tables finite. Negative Δ (idle channel) below
    −max(Σ u·B, Σ|x|) − 1 slot is clipped: (2), (3), (5), (7), the Δ⁺ validity and (9)/(10) cannot
    tell such values apart (exact). Not clipped with ``literal_validity`` (which reads negative Δ)."""
    t0 = time.perf_counter()
    if S is None:
        return _dynprog_exact(c, literal_validity, max_states, t0, _movable(c, movable))
    q, _ = _quantise(c, S)
    L = len(c.uF) - 1
    may_move = _movable(c, movable)
    sumx = sum(q.x)
    clipF = int(math.ceil(max(sum(q.uF) * q.B, sumx))) + 1
    clipB = int(math.ceil(max(sum(q.uB) * q.B, sumx))) + 1
    M, B = q.M, q.B
    MF = np.array([q.x[0]], dtype=np.int64)
    DF = np.zeros(1, dtype=np.int64)
    DB = np.zeros(1, dtype=np.int64)
    cost = np.zeros(1)
    parents, decisions = [], []
    largest = 1
    for i in range(L + 1):
        DFp, DBp = np.maximum(DF, 0), np.maximum(DB, 0)
        MB = q.y[i] + DBp + MF - DFp
        dF = DF if literal_validity else DFp
        dB = DB if literal_validity else DBp
        ok = (MF + q.exF[i] - dF + q.x[i + 1] <= M) & (MB + q.exB[i] + q.x[i + 1] + q.y[i + 1] - dB <= M)
        idx = np.flatnonzero(ok)
        MF, DF, DB, DFp, DBp, MB, cost = MF[idx], DF[idx], DB[idx], DFp[idx], DBp[idx], MB[idx], cost[idx]
        epsF = np.maximum(MF + q.exF[i] + q.x[i + 1] - M, 0) / B
        epsB = np.maximum(MB + q.exB[i] + q.x[i + 1] + q.y[i + 1] - M, 0) / B
        wF = (epsF + q.uF[i]) * B
        wB = (epsB + q.uB[i]) * B
        c2 = cost + epsF + epsB
        # offloaded (2), (3), (7); kept (4), (5), (8)
        oDF = np.ceil(DFp + q.x[i] - wF - 1e-9)
        oMF = np.ceil(MF + q.x[i + 1] - np.minimum(DFp + q.x[i], wF) - 1e-9)
        oDB = np.ceil(q.x[i] + np.maximum(DB - wB, 0) - 1e-9)
        kDF = np.ceil(DF - wF - 1e-9)
        kMF = np.ceil(MF + q.x[i + 1] - np.minimum(DFp, wF) - 1e-9)
        kDB = np.ceil(DB - wB - 1e-9)
        nMF = np.concatenate([oMF, kMF]).astype(np.int64)
        nDF = np.concatenate([oDF, kDF]).astype(np.int64)
        nDB = np.concatenate([oDB, kDB]).astype(np.int64)
        if not literal_validity:
            nDF = np.maximum(nDF, -clipF)
            nDB = np.maximum(nDB, -clipB)
        ncost = np.concatenate([c2, c2])
        par = np.concatenate([idx, idx])
        dec = np.concatenate([np.ones(len(idx), bool), np.zeros(len(idx), bool)])
        if not may_move[i]:  # x_i stays: the kept branch only
            kept = slice(len(idx), None)
            nMF, nDF, nDB, ncost, par, dec = nMF[kept], nDF[kept], nDB[kept], ncost[kept], par[kept], dec[kept]
        order = np.lexsort((ncost, nDB, nDF, nMF))
        nMF, nDF, nDB, ncost, par, dec = nMF[order], nDF[order], nDB[order], ncost[order], par[order], dec[order]
        first = np.ones(len(nMF), bool)
        first[1:] = (nMF[1:] != nMF[:-1]) | (nDF[1:] != nDF[:-1]) | (nDB[1:] != nDB[:-1])
        MF, DF, DB, cost = nMF[first], nDF[first], nDB[first], ncost[first]
        parents.append(par[first])
        decisions.append(dec[first])
        largest = max(largest, len(MF))
        if len(MF) > max_states:
            raise StateBudgetExceeded(f"IDLE_{i + 1} has {len(MF)} states > max_states = {max_states} (S = {S})")
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            raise StateBudgetExceeded(f"over {max_seconds} s at op {i} of {L + 1} (S = {S})")
        if len(MF) == 0:
            return DynProgResult(INF, None, largest, time.perf_counter() - t0, S, reason=f"no valid state after op {i}")
    total = np.array([cost[k] + float(_eps_g(q, int(MF[k]), int(DF[k]), int(DB[k]))) for k in range(len(MF))])
    k = int(np.argmin(total))
    value = float(sum(q.uF) + sum(q.uB) + total[k])
    chosen = []
    for i in range(L, -1, -1):
        if decisions[i][k]:
            chosen.append(i)
        k = int(parents[i][k])
    return DynProgResult(value, sorted(chosen), largest, time.perf_counter() - t0, S)


def _dynprog_exact(c, literal, max_states, t0, ok):
    q, _ = _quantise(c, None)
    L = len(c.uF) - 1
    tables = [{(q.x[0], Fraction(0), Fraction(0)): (Fraction(0), None, None)}]
    largest = 1
    for i in range(L + 1):
        nxt = {}
        for key, (idle, _, _) in tables[i].items():
            for off in (True, False) if ok[i] else (False,):
                r = _step(q, i, *key, off, literal)
                if r is None:
                    break
                e, MF, DF, DB = r
                k2 = (MF, DF, DB)
                v = idle + e
                if k2 not in nxt or v < nxt[k2][0]:
                    nxt[k2] = (v, key, off)
        if not nxt:
            return DynProgResult(INF, None, largest, time.perf_counter() - t0, None, reason=f"no valid state after op {i}")
        largest = max(largest, len(nxt))
        if largest > max_states:
            raise StateBudgetExceeded(f"IDLE_{i + 1} has {largest} states > max_states = {max_states}")
        tables.append(nxt)
    best_key, best = None, None
    for key, (idle, _, _) in tables[-1].items():
        v = idle + _eps_g(q, *key)
        if best is None or v < best:
            best, best_key = v, key
    chosen, key = [], best_key
    for i in range(L + 1, 0, -1):
        _, parent, off = tables[i][key]
        if off:
            chosen.append(i - 1)
        key = parent
    return DynProgResult(float(sum(q.uF) + sum(q.uB) + best), sorted(chosen), largest, time.perf_counter() - t0, None)


# ---------------------------------------------------------------------------- running a timeline
# Note [Issuing a timeline]
# -------------------------
# An executor cannot start a copy at an instant, only before an op (the host queues kernels and copies
# in order; the GPU runs them as streams and events allow). :func:`issue_points` turns a timeline into
# what to issue before each op of the sequence F_0..F_L, B_L..B_0 (op q; q = 2(L+1) is the step's end):
# - ``offload k`` before F_k (the earliest the model allows: x_k is F_k's input, complete once F_{k-1}
#   is queued), all of them in the copy channel's order; a later start in the timeline is the channel
#   being busy, which the one FIFO copy stream reproduces.
# - ``release k`` (the compute stream waits for that copy, then x_k's device memory goes) before the
#   first op that starts at or after the copy's end in the timeline: where the timeline's memory rule
#   has freed it. It is after F_k (the copy starts at F_k's start and takes time), so F_k has read x_k.
# - ``prefetch k`` (x_k's device memory is taken, the copy back issued) before the op during which the
#   timeline starts it (the next op when it starts at an op's end or between two ops: the backward
#   waiting for it), and never before ``release k``. Taking the memory at that op's start rather than
#   during it moves the reservation earlier within one op, whose own footprint the model counts whole
#   from its start; the executor measures what that costs.
# - ``drop k`` (x_k's device copy is let go) before B_{k-2}: x_k dies at the end of B_{k-1} (Note
#   [Lifetimes]); B_k and B_{k-1} read it. The acquire (the compute stream waits for the copy back) is
#   where B_k or B_{k-1} first reads x_k.
# The copy stream is FIFO, so each transfer is issued no earlier than the one before it in the channel
# (a prefetch may wait for an earlier one's release). At one op: drops, releases, then the transfers in
# the channel's order.
def issue_points(c: OffloadChain, tl: Timeline) -> list[list[tuple[str, int]]]:
    """What to issue before each op of ``tl`` (Note [Issuing a timeline]): a list of 2(L+1) + 1 lists
    of ``(kind, k)`` with kind ``"drop"``, ``"release"``, ``"offload"`` or ``"prefetch"``; op q is F_q
    for q <= L and B_{2L+1-q} after, the last list the step's end."""
    L = len(c.uF) - 1
    ops = list(tl.F) + [tl.Bop[j] for j in range(L, -1, -1)]
    end = len(ops)
    tol = 1e-9 * max(1.0, tl.makespan)
    starts = [s for s, _ in ops]
    ends = [e for _, e in ops]

    def first_from(t):  # the first op starting at or after t (the end when none)
        return next((q for q in range(end) if starts[q] >= t - tol), end)

    def during(t):  # the op running at t, or the next one to start when t is at an op's end or in a gap
        return next((q for q in range(end) if ends[q] > t + tol), end)

    def b_index(j):
        return end if j < 0 else L + 1 + (L - j)

    off = {k: (s, e) for kind, k, _a, s, e in tl.transfers if kind == "off"}
    points: list[list] = [[] for _ in range(end + 1)]
    release = {k: max(first_from(off[k][1]), k + 1) for k in off}  # k + 1 also for a copy under the tolerance
    last = 0  # the copy stream is FIFO: a transfer is issued no earlier than the one before it in the channel
    for kind, k, _a, start, _e in sorted(tl.transfers, key=lambda t: t[3]):
        last = max(last, k if kind == "off" else max(during(start), release[k]))
        if kind == "pre" and last > b_index(k):
            raise ValueError(f"internal error: x_{k}'s prefetch issues at op {last}, past B_{k} (op {b_index(k)})")
        points[last].append((2, start, "offload" if kind == "off" else "prefetch", k))
    for k in off:
        points[release[k]].append((1, off[k][1], "release", k))
        points[b_index(k - 2)].append((0, k, "drop", k))
    return [[(kind, k) for _rank, _t, kind, k in sorted(p, key=lambda r: (r[0], r[1]))] for p in points]


def issued_makespan(c: OffloadChain, points) -> float:
    """The step time of :func:`issue_points`' program as an executor runs it: ops one after the other,
    each transfer on the one channel from its issue (or when the channel frees), a ``release`` waiting for
    its copy out, B_i waiting for the copies back of the x_i and x_{i+1} it reads; no memory rule (the
    points already hold it). The paper's makespan assumes transfers start mid-op where they fit best;
    this is what issuing them before ops gives, the prediction to hold a measured step against."""
    L = len(c.uF) - 1
    durations = [float(v) for v in c.uF] + [float(c.uB[j]) for j in range(L, -1, -1)]
    B = float(c.B)
    t = chan = 0.0
    out, back = {}, {}
    for q, actions in enumerate(points):
        for kind, k in actions:
            if kind in ("offload", "prefetch"):
                start = max(t, chan)
                chan = start + float(c.x[k]) / B
                (out if kind == "offload" else back)[k] = chan
            elif kind == "release":
                t = max(t, out[k])
        if q == len(durations):
            break
        if q > L:  # B_j reads x_j and x_{j+1}
            j = 2 * L + 1 - q
            t = max([t] + [back[i] for i in (j, j + 1) if i in back])
        t += durations[q]
    return t


# ---------------------------------------------------------------------------- reductions
def three_partition_instance(u, V) -> tuple[OffloadChain, float]:
    """Theorem 1's instance (Fig. 2) for 3-PARTITION (3m integers u, Σ = mV): (chain, T = 2m).

    L = 5m, B = V, M_GPU = mV; |x_i| = u_i, u_{F_i} = 0 for i < 3m (the printed "1 ≤ i < 3m" leaves x_0
    undefined: x_0 = u_0 here, as the proof offloads every u_i); for k in [0, m) (printed [0, n]):
    u_{F_{3m+2k}} = 1, |x_{3m+2k}| = 0, u_{F_{3m+2k+1}} = 0, |x_{3m+2k+1}| = V; x_{5m}, x_{5m+1} = 0;
    every u_B and |y| is 0 except u_{B_{3m}} = m; ex = 0."""
    m = len(u) // 3
    if len(u) != 3 * m or sum(u) != m * V:
        raise ValueError(f"3-PARTITION needs 3m integers summing to mV; got {len(u)} summing to {sum(u)} with V = {V}")
    L = 5 * m
    uF = [0] * (L + 1)
    x = [0] * (L + 2)
    for i in range(3 * m):
        x[i] = u[i]
    for k in range(m):
        uF[3 * m + 2 * k] = 1
        x[3 * m + 2 * k] = 0
        x[3 * m + 2 * k + 1] = V
    uB = [0] * (L + 1)
    uB[3 * m] = m
    z = [0] * (L + 1)
    F = Fraction
    c = OffloadChain([F(v) for v in uF], [F(v) for v in uB], [F(v) for v in x], [F(0)] * (L + 2),
                     [F(v) for v in z], [F(v) for v in z], F(m * V), F(V))
    return c, 2 * m


def two_partition_instance(u) -> tuple[OffloadChain, float]:
    """Theorem 3's instance (Fig. 3) for 2-PARTITION (n positive integers, Σ = 2V): (chain, T = 2).

    L = n + 3 (ops 0..n+3), B = V, M_GPU = 2V, every |y| = 0, every op takes 0 except F_n and B_n (1
    each); |x_i| = u_{i+1} for i < n (the inputs of the first n ops), |x_{n+2}| = V, other x 0;
    M_peak = 3V. (x_{n+1}, the input of F_{n+1}, is 0: the figure shows only the u_i and V.)"""
    n = len(u)
    if sum(u) % 2:
        raise ValueError(f"2-PARTITION needs an even sum, got {sum(u)}")
    V = sum(u) // 2
    L = n + 3
    F = Fraction
    uF = [F(0)] * (L + 1)
    uB = [F(0)] * (L + 1)
    uF[n] = uB[n] = F(1)
    x = [F(0)] * (L + 2)
    for i in range(n):
        x[i] = F(u[i])
    x[n + 2] = F(V)
    z = [F(0)] * (L + 1)
    return OffloadChain(uF, uB, x, [F(0)] * (L + 2), z, z, F(2 * V), F(V)), 2
