"""Baseline policies users have today, in the same schedule form as the optimum.

Every baseline yields a policy tree (:mod:`gpusolve.schedule`) that is turned into operations by
:func:`policy_to_schedule` and evaluated with :func:`simulate` against the *true* chain, so its
time and peak are figures of the same cost model the DP optimises. Budgets are bytes beyond the
chain's input a_0, as in :func:`gpusolve.solve`.

- :func:`store_all` — plain autograd.
- :func:`checkpoint_sequential` — ``torch.utils.checkpoint.checkpoint_sequential`` with k
  segments; :func:`best_checkpoint_sequential` the fastest k = 1..N that fits;
  :func:`sqrt_segments` k = round(sqrt(N)).
- :func:`chen_greedy` — Chen et al. 2016, "Training deep nets with sublinear memory cost",
  budget-driven greedy with one recomputation, scanning the threshold b.
- :func:`thesis_uniform` — the optimal solver run on a *uniform* chain (per-stage averages of
  every cost), its policy evaluated with the true costs; the budget handed to the uniform solver
  shrinks by 0.95 per retry until the policy truly fits.
- :func:`bisection` — divide and conquer as in Siskind & Pearlmutter 2018: split (i, j) where
  the forward time from i reaches half of the sub-chain's; budget-aware (tape a sub-chain
  whole when that fits in what is left) or fixed (split down to single stages).
- :func:`compare` — all of them and the optimum at one budget, as records.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from .chain import ALL_BYTE_FIELDS, TIME_FIELDS, Chain
from .dp.buckets import uniform_buckets
from .schedule import Checkpoint, Op, Policy, Tape, policy_to_schedule, records_early, segments_policy, tape_chain
from .simulate import (SimResult, budget_bytes_of, overhead, simulate, store_all_peak_bytes, store_all_schedule,
                       store_all_time_ms)
from .progress import work_progress
from .units import parse_bytes

# Retries of the uniform-cost solver: budget x 0.95^r, r = 0..UNIFORM_RETRIES.
UNIFORM_SHRINK = 0.95
UNIFORM_RETRIES = 60


# ---------------------------------------------------------------------------- store-all
def store_all_policy(chain: Chain) -> Policy:
    """Plain autograd as a policy tree: tape every stage."""
    return tape_chain(0, chain.n)


def store_all(chain: Chain) -> list[Op]:
    """Plain autograd: record every stage, then run every backward."""
    return store_all_schedule(chain)


# ---------------------------------------------------------------------------- checkpoint_sequential
def sequential_boundaries(n: int, segments: int) -> list[int]:
    """Checkpoint boundaries of ``torch.utils.checkpoint.checkpoint_sequential(functions, segments)``.

    With ``segment_size = n // segments`` torch checkpoints the functions ``[start, start +
    segment_size)`` for ``start`` in ``range(0, segment_size * (segments - 1), segment_size)`` and
    runs the rest with autograd, so the kept activations are a_b for b = segment_size, ...,
    (segments - 1) * segment_size.
    """
    if not 1 <= segments <= n:
        raise ValueError(f"segments must be in 1..{n} for a {n}-stage chain, got {segments}")
    size = n // segments
    return list(range(size, sequential_last_cut(n, segments) + 1, size)) if segments > 1 else []


def sequential_last_cut(n: int, segments: int) -> int:
    """The last of :func:`sequential_boundaries` (``segments`` >= 2), without building them."""
    return (n // segments) * (segments - 1)


def checkpoint_sequential(chain: Chain, segments: int) -> Policy:
    """Policy of ``torch.utils.checkpoint.checkpoint_sequential`` with ``segments`` segments."""
    return segments_policy(sequential_boundaries(chain.n, segments), chain.n)


def sqrt_segments(chain: Chain) -> tuple[Policy, int]:
    """``checkpoint_sequential`` with round(sqrt(N)) segments: (policy, segments)."""
    k = max(1, min(chain.n, int(round(math.sqrt(chain.n)))))
    return checkpoint_sequential(chain, k), k


@dataclass
class Found:
    """A budget-driven baseline's pick: its policy, simulated figures and what was chosen."""

    policy: Policy
    sim: SimResult
    detail: dict = field(default_factory=dict)


OUTSIDE_THESIS_CLASS = ("outside the thesis model's class (multi_tape=False: a stage is recorded only right before "
                        "its own backward, and the encoding prices earlier recording wrongly; Note [The thesis "
                        "model's class] in gpusolve/solve.py)")


def _evaluate(chain: Chain, policy: Policy) -> SimResult | None:
    """``policy`` simulated on ``chain``; None where it leaves a thesis-model chain's class (OUTSIDE_THESIS_CLASS:
    store-all priced there at 8 B under a least budget of 13 B,
    bench/repros/rv10_solver_thesis_compare_outside_class.py)."""
    if not chain.multi_tape and records_early(policy):
        return None
    return simulate(chain, policy_to_schedule(policy, 0, chain.n))


def _fastest(chain: Chain, budget_bytes: int, candidates) -> Found | None:
    """The fastest of ``(policy, detail)`` candidates whose simulated peak fits the budget."""
    best: Found | None = None
    for policy, detail in candidates:
        sim = _evaluate(chain, policy)
        if sim is None:
            continue
        if sim.peak_bytes <= budget_bytes and (best is None or sim.time_ms < best.sim.time_ms):
            best = Found(policy, sim, detail)
    return best


def fastest_plan_peak_bytes(chain: Chain) -> int:
    """The peak of the fastest plan of ``chain``'s class, the one that runs every operation once: plain autograd,
    or in the thesis's model every stage checkpointed (store-all is outside that class and priced wrongly there:
    Note [The thesis model's class] in gpusolve/solve.py). No budget above it makes a plan faster."""
    if chain.multi_tape:
        return store_all_peak_bytes(chain)
    return int(_evaluate(chain, checkpoint_sequential(chain, chain.n)).peak_bytes)


def best_checkpoint_sequential(chain: Chain, budget) -> Found | None:
    """The fastest ``checkpoint_sequential`` segment count k = 1..N within ``budget``, or None."""
    budget_bytes = budget_bytes_of(chain, budget)
    seen: set[tuple[int, ...]] = set()

    def candidates():
        for k in range(1, chain.n + 1):
            cuts = tuple(sequential_boundaries(chain.n, k))
            if cuts not in seen:
                seen.add(cuts)
                yield segments_policy(list(cuts), chain.n), {"segments": k}

    return _fastest(chain, budget_bytes, candidates())


# ---------------------------------------------------------------------------- Chen et al. 2016
def _tape_prefix(chain: Chain) -> np.ndarray:
    """P[s] = tape bytes of stages 1..s (P[0] = 0)."""
    return np.concatenate([[0], np.cumsum(chain.tape_bytes.astype(np.int64))])


def _chen_next(prefix: np.ndarray, starts: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The greedy's next cut after each start: the first s > start with P[s] - P[start] > threshold
    (the running sum passes the threshold there). A cut at or past N means the segmentation ended."""
    return np.maximum(np.searchsorted(prefix, prefix[starts] + thresholds, side="right"), starts + 1)


def chen_cuts(chain: Chain, threshold: float) -> list[int]:
    """Chen et al.'s greedy: add each stage's tape bytes to a running sum; once it passes
    ``threshold``, keep that stage's output a_s as a checkpoint and restart the sum (a_N, the loss,
    is never a checkpoint)."""
    return list(next(iter(chen_segmentations(chain, [threshold]))))


def chen_segmentations(chain: Chain, thresholds=None, stop: int | None = None) -> dict[tuple[int, ...], int]:
    """Every distinct greedy segmentation, over the thresholds b in {0} and the prefix sums of the
    tape bytes (no other b gives another one), or over ``thresholds``: {cuts: the smallest b that
    gives them}. All thresholds advance together, one cut per round. ``stop``: leave out the
    segmentations with a cut at or past it (their last cut is too: a caller that wants only last
    cuts before ``stop`` saves the rounds of the thresholds that cut often)."""
    prefix = _tape_prefix(chain)
    thresholds = np.unique(prefix) if thresholds is None else np.asarray(thresholds, dtype=np.int64)
    starts = np.zeros(len(thresholds), dtype=np.int64)
    cuts = [[] for _ in thresholds]
    kept = np.ones(len(thresholds), dtype=bool)
    live = np.arange(len(thresholds))
    while len(live):
        nxt = _chen_next(prefix, starts[live], thresholds[live])
        going = nxt < chain.n
        if stop is not None:
            kept[live[going & (nxt >= stop)]] = False
            going &= nxt < stop
        for idx, cut in zip(live[going].tolist(), nxt[going].tolist()):
            cuts[idx].append(cut)
        starts[live[going]] = nxt[going]
        live = live[going]
    out: dict[tuple[int, ...], int] = {}
    for b, c, keep in zip(thresholds.tolist(), cuts, kept.tolist()):
        if keep:
            out.setdefault(tuple(c), int(b))
    return out


def chen_greedy(chain: Chain, budget) -> Found | None:
    """Chen et al. 2016's budget-driven greedy (one recomputation per stage): the fastest of
    :func:`chen_segmentations` that simulates within ``budget``."""
    budget_bytes = budget_bytes_of(chain, budget)
    candidates = ((segments_policy(list(cuts), chain.n), {"threshold_bytes": b, "checkpoints": len(cuts)})
                  for cuts, b in chen_segmentations(chain).items())
    return _fastest(chain, budget_bytes, candidates)


# ---------------------------------------------------------------------------- uniform-cost solver
def uniform_like(chain: Chain) -> Chain:
    """A chain of ``chain.n`` identical stages, each field the per-stage average of ``chain``'s."""
    n = chain.n
    fields = {}
    for name in TIME_FIELDS:
        fields[name] = [float(np.mean(getattr(chain, name)))] * n
    for name in ALL_BYTE_FIELDS:
        fields[name] = [int(round(float(np.mean(getattr(chain, name)))))] * n
    return Chain(**fields, input_bytes=chain.input_bytes, input_grad_bytes=chain.input_grad_bytes,
                 reserved_bytes=chain.reserved_bytes, multi_tape=chain.multi_tape,
                 provenance={"source": "uniform average", "of": chain.provenance.get("source")})


class UniformSolver:
    """The thesis's uniform-cost solver for ``chain``, with one DP table up to ``max_budget``.

    The table (CPU backend) is of the averaged chain (:func:`uniform_like`); :meth:`policy_for`
    recovers the uniform optimum at budget x shrink^r, r = 0, 1, ..., and returns the first whose
    simulation on the *true* chain fits the budget.
    """

    def __init__(self, chain: Chain, max_budget, bucket=None):
        from .dp.cpu import solve_table
        from .dp.problem import Problem

        self.chain = chain
        self.max_budget = budget_bytes_of(chain, max_budget)
        if bucket is None:
            bucket_bytes = -(-self.max_budget // uniform_buckets(chain.n))
        else:
            bucket_bytes = parse_bytes(bucket, "bucket")
        self.bucket_bytes = max(1, bucket_bytes)
        self.top = self.max_budget // self.bucket_bytes
        self.problem = None
        if self.top >= 1:
            self.problem = Problem.build(uniform_like(chain), self.bucket_bytes, self.top)
            self.table = solve_table(self.problem)
            self.curve = self.table[self.problem.row(0, self.problem.n)]

    def policy_for(self, budget, shrink: float = UNIFORM_SHRINK, retries: int = UNIFORM_RETRIES) -> Found | None:
        from .dp.recover import recover_policy, table_lookup

        budget_bytes = min(budget_bytes_of(self.chain, budget), self.max_budget)
        if self.problem is None:
            return None
        lookup = table_lookup(self.table)
        top = budget_bytes // self.bucket_bytes
        tried: set[int] = set()
        for r in range(retries + 1):
            m = int(top * shrink ** r)
            if m in tried:
                continue
            tried.add(m)
            if not np.isfinite(self.curve[m]):
                break  # smaller budgets are infeasible for the uniform chain too
            policy = recover_policy(self.problem, lookup, m)
            sim = _evaluate(self.chain, policy)
            if sim is not None and sim.peak_bytes <= budget_bytes:
                return Found(policy, sim, {"uniform_budget_bytes": m * self.bucket_bytes, "retries": r})
        return None


def thesis_uniform(chain: Chain, budget, bucket=None, shrink: float = UNIFORM_SHRINK,
                   retries: int = UNIFORM_RETRIES) -> Found | None:
    """The thesis's uniform-cost solver: optimal policy of the averaged chain, true costs.

    ``bucket`` is the uniform table's granularity (default budget / :func:`uniform_buckets`).
    Returns the first policy, at budget x shrink^r, whose true peak fits ``budget``, or None.
    """
    return UniformSolver(chain, budget, bucket).policy_for(budget, shrink, retries)


# ---------------------------------------------------------------------------- bisection
def _split(prefix: np.ndarray, i: int, j: int) -> int:
    """k in (i, j) where the forward time from a_i first reaches half of (i, j)'s."""
    total = prefix[j] - prefix[i]
    if total <= 0:
        return (i + j) // 2
    k = int(np.searchsorted(prefix, prefix[i] + total / 2, side="left"))
    return min(max(k, i + 1), j - 1)


def _fwd_prefix(chain: Chain) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(chain.t_fwd_nograd)])


def bisection_fixed(chain: Chain) -> Policy:
    """Siskind & Pearlmutter's fixed divide and conquer: split every sub-chain at half its
    forward time, down to single stages (O(log N) checkpoints held, O(N log N) forwards)."""
    prefix = _fwd_prefix(chain)

    def build(i: int, j: int) -> Policy:  # depth is O(log N) for balanced splits, at most N
        if j == i + 1:
            return Tape(None)
        k = _split(prefix, i, j)
        return Checkpoint(k, right=build(k, j), left=build(i, k))

    return _with_recursion(lambda: build(0, chain.n), chain.n)


def bisection(chain: Chain, budget) -> Found | None:
    """Budget-aware bisection: tape a sub-chain whole when plain autograd on it fits in the
    memory left, else split it at half its forward time (the right part runs with a_k held).
    Returns None when even that does not fit."""
    budget_bytes = budget_bytes_of(chain, budget)
    prefix = _fwd_prefix(chain)
    act = chain.padded()["act_bytes"]
    tape_peak_cache: dict[tuple[int, int], int] = {}

    def tape_peak(i: int, j: int) -> int:
        key = (i, j)
        if key not in tape_peak_cache:
            tape_peak_cache[key] = simulate(chain, policy_to_schedule(tape_chain(i, j), i, j), start=(i, j)).peak_bytes
        return tape_peak_cache[key]

    def build(i: int, j: int, left: int) -> Policy:
        if j == i + 1 or tape_peak(i, j) <= left:
            return tape_chain(i, j)
        k = _split(prefix, i, j)
        return Checkpoint(k, right=build(k, j, left - int(act[k])), left=build(i, k, left))

    policy = _with_recursion(lambda: build(0, chain.n, budget_bytes), chain.n)
    sim = _evaluate(chain, policy)
    if sim is None or sim.peak_bytes > budget_bytes:
        return None
    return Found(policy, sim)


def _with_recursion(fn: Callable, n: int):
    import sys
    limit = sys.getrecursionlimit()
    if limit < 4 * n + 100:
        sys.setrecursionlimit(4 * n + 100)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(limit)


# ---------------------------------------------------------------------------- comparison
@dataclass
class Record:
    """One row of :func:`compare`: ``time_ms`` / ``peak_bytes`` are None when nothing fits."""

    name: str
    time_ms: float | None
    peak_bytes: int | None
    overhead: float | None
    feasible: bool
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _record(name: str, sim: SimResult | None, budget_bytes: int, base_ms: float, detail=None,
            chain: Chain | None = None) -> Record:
    """A baseline's row; ``chain`` in the thesis's model: a row without figures says why (OUTSIDE_THESIS_CLASS)."""
    if sim is None:
        detail = dict(detail or {})
        if chain is not None and not chain.multi_tape:
            detail["reason"] = f"its plans are {OUTSIDE_THESIS_CLASS}, or none fits"
        return Record(name, None, None, None, False, detail)
    return Record(name, float(sim.time_ms), int(sim.peak_bytes), float(overhead(sim.time_ms, base_ms)),
                  sim.peak_bytes <= budget_bytes, dict(detail or {}))


def baseline_records(chain: Chain, budget, uniform_bucket=None) -> list[Record]:
    """Every baseline at ``budget`` (no optimum): fixed policies are reported with their figures
    and ``feasible`` = whether they fit; budget-driven ones that find nothing have None figures.
    ``uniform_bucket`` is the uniform-cost solver's granularity (default: see :func:`uniform_buckets`)."""
    budget_bytes = budget_bytes_of(chain, budget)
    base = store_all_time_ms(chain)

    def record(name, sim, detail=None):
        return _record(name, sim, budget_bytes, base, detail, chain)
    out = [record("store-all", _evaluate(chain, store_all_policy(chain)))]
    found = best_checkpoint_sequential(chain, budget_bytes)
    out.append(record("checkpoint_sequential (best k)", found and found.sim, found.detail if found else {}))
    policy, k = sqrt_segments(chain)
    out.append(record("checkpoint_sequential (sqrt N)", _evaluate(chain, policy), {"segments": k}))
    found = chen_greedy(chain, budget_bytes)
    out.append(record("chen2016 greedy", found and found.sim, found.detail if found else {}))
    found = thesis_uniform(chain, budget_bytes, uniform_bucket)
    out.append(record("thesis uniform-cost", found and found.sim, found.detail if found else {}))
    found = bisection(chain, budget_bytes)
    out.append(record("bisection (budget-aware)", found and found.sim))
    out.append(record("bisection (fixed)", _evaluate(chain, bisection_fixed(chain))))
    return out


def compare(chain: Chain, budget, bucket=None, backend: str = "auto", plan=None) -> list[dict]:
    """The optimum (:func:`gpusolve.solve`) and every baseline at ``budget``, as dicts
    ``{name, time_ms, peak_bytes, overhead, feasible, detail}`` (overhead vs store-all time);
    the optimum comes first. Nothing raises for an infeasible budget: rows say feasible=False.
    ``bucket`` and ``backend`` are the optimum's (see :func:`gpusolve.solve`); a ``plan`` already
    solved at this budget is used as the optimum instead of solving again."""
    from .solve import solve

    budget_bytes = budget_bytes_of(chain, budget)
    base = store_all_time_ms(chain)
    if plan is None:
        plan = solve(chain, budget_bytes, bucket=bucket, backend=backend, strict=False)
    elif plan.budget_bytes != budget_bytes:
        raise ValueError(f"the plan given to compare() was solved at {plan.budget_bytes} B, not {budget_bytes} B")
    detail = {"backend": plan.backend, "buckets": plan.buckets, "bucket_bytes": plan.bucket_bytes,
              "min_feasible_bytes": plan.min_feasible_bytes}
    if plan.feasible:
        optimum = Record("optimal (gpusolve)", float(plan.predicted_time_ms), int(plan.predicted_peak_bytes),
                         float(plan.predicted_time_ms / base - 1.0) if base else 0.0, True, detail)
    else:
        optimum = Record("optimal (gpusolve)", None, None, None, False, detail | {"notes": plan.notes})
    rows = baseline_records(chain, budget_bytes)
    if plan.feasible:
        faster = [r.name for r in rows if r.feasible and r.time_ms < plan.predicted_time_ms * (1 - 1e-6)]
        if faster:  # the DP is optimal for sizes rounded up to buckets, not for exact bytes
            optimum.detail["note"] = (f"{', '.join(faster)} beat the bucketed optimum: bucket rounding; "
                                      f"a finer bucket finds a plan at least as fast")
    return [r.to_dict() for r in [optimum] + rows]


def baseline_curves(chain: Chain, budgets, uniform_bucket=None, progress: bool | None = None
                    ) -> dict[str, list[float | None]]:
    """Time (ms) of each budget-driven baseline at every budget of ``budgets`` (None where nothing
    fits), plus the fixed policies' single points under ``"points"``: {name: (peak_bytes, time_ms)}.
    ``progress`` as :func:`gpusolve.solve`'s: lines on stderr where it runs long (None), never (False).

    Fixed candidate families (every ``checkpoint_sequential`` k, every Chen threshold) are simulated
    once; the uniform-cost solver builds one table at the largest budget.
    """
    budgets = [budget_bytes_of(chain, b) for b in budgets]
    with work_progress(4, f"the baselines at {len(budgets)} budgets", progress is not False) as update:
        curves = _baseline_curves(chain, budgets, uniform_bucket, update or (lambda work: None))
    return curves


def _baseline_curves(chain: Chain, budgets: list, uniform_bucket, update) -> dict:
    """:func:`baseline_curves`, reporting ``update(1)`` after each of its four families."""
    seq = [(sim.peak_bytes, sim.time_ms) for sim in
           (_evaluate(chain, checkpoint_sequential(chain, k)) for k in range(1, chain.n + 1)) if sim is not None]
    update(1)
    chen = [(sim.peak_bytes, sim.time_ms) for sim in
            (_evaluate(chain, segments_policy(list(c), chain.n)) for c in chen_segmentations(chain)) if sim is not None]
    update(1)

    def staircase(points):
        out = []
        for b in budgets:
            fits = [t for p, t in points if p <= b]
            out.append(min(fits) if fits else None)
        return out

    uniform = UniformSolver(chain, max(budgets), uniform_bucket) if budgets else None
    curves: dict = {"checkpoint_sequential (best k)": staircase(seq), "chen2016 greedy": staircase(chen)}
    found = [uniform.policy_for(b) for b in budgets] if uniform else []
    curves["thesis uniform-cost"] = [f.sim.time_ms if f else None for f in found]
    update(1)
    found = [bisection(chain, b) for b in budgets]
    curves["bisection (budget-aware)"] = [f.sim.time_ms if f else None for f in found]
    update(1)
    points = {}
    for name, policy in (("store-all", store_all_policy(chain)), ("checkpoint_sequential (sqrt N)", sqrt_segments(chain)[0]),
                         ("bisection (fixed)", bisection_fixed(chain))):
        sim = _evaluate(chain, policy)
        if sim is not None:  # (outside a thesis-model chain's class: no point)
            points[name] = (int(sim.peak_bytes), float(sim.time_ms))
    curves["points"] = points
    return curves
