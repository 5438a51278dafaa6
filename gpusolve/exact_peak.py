"""The peak of a schedule with every storage counted once (Note [Storage-exact peaks]).

:func:`exact_peak` runs a chain schedule on :class:`gpusolve.simulate.Holdings`, the cost model's one
accounting, and beside it a ledger of which stage made each storage the model counts; at every op it takes
off the model's level what the model counts that is not held: a storage counted by two holders at once, or
one that autograd has already freed. NumPy only (no torch).

Note [Storage-exact peaks]
    The cost model (gpusolve/chain.py) over-counts where stage boundaries are tuples that pass storages on
    (an encoder-decoder captured by torch.export, Note [Values read late] in torch_exec/auto.py), in two ways
    the DP cannot express (Note [Outputs passed through], Note [Storages a stage drops]):
    1. a storage made by stage t and passed on to the checkpoints a_k and a_l held at once counts in both
       (and in stage t's tape where that is live);
    2. in a run of recorded stages (one autograd segment: Note [Tape runs] in torch_exec/executor.py), a
       storage of a_s that stage s + 1 drops and no backward saves is freed by autograd once stage s + 1
       has run and no boundary the executor holds passes it on, but the model keeps it in stage s's tape
       until stage s's backward.
    :meth:`Chain.from_profile` keeps per stage s, from the profile (``held_from``, ``in_dropped_from``,
    written by ``note_storages`` in torch_exec/profiler.py), by the stage of the chain that made them:
    ``passed_from`` (B_t(s): bytes of a_s made by stage t < s) and ``dropped_from`` (D_t(s): bytes of
    a_{s-1} made by stage t that stage s neither passes on nor saves, and no backward before it saved).
    With B_s(s) = ``made_bytes``, a storage made by t reaches a_k only through every a_l, t <= l <= k, so
    the storages of one run of stage t that the boundaries hold are nested: those of a_k lie in those of
    a_l. The ledger follows each boundary's storages by (maker t, run of t): a run is a forward op, and a
    later stage's output inherits its input's runs. For each (t, run):
    - the model counts B_t(k) for each checkpoint a_k held (k >= t; own bytes for k = t) and, while stage t's
      tape from that run lives, min(made_bytes, tape_bytes) of it (during its backward: less what the model
      releases at the backward's start, tape_bytes - bwd_tape_bytes);
    - at most this is held: the largest B_t(l) over the boundaries the executor references (checkpoints and
      the output of each tape segment's last stage), none of it where the sub-chain's input a_lo holds the run
      (outside the counted memory: a_lo holds every storage of t <= lo that a later boundary holds); while the
      tape lives, its made bytes less each D_t(s) no referenced boundary a_l, t <= l < s, still holds (freed;
      none with ``drops=False``, as planning counts: Note [Planning to the exact peak]); in its backward,
      no more than what the model keeps of the tape plus that largest B_t(l) (what the backward saved may be
      any part of the tape).
    The level is the model's less the sum over (t, run) of what the model counts above that; no term is
    negative (where the model counts less than what is held, it is left as it is). A forward's transient
    takes off only what was counted twice before it (its own output's passed-on storages may be part of its
    measured peak); a backward's, with its tape released as the model releases it; a FREE's, after it.
    Where the chain reserves the whole of a_N, which the caller holds through the backward (``output_reserved``,
    written by ``torch_exec.executor.executor_chain``: Note [The caller holds a_N] there), the reserve is a
    holder of a_N's storages made before stage N (the model counts them in their makers' tapes and checkpoints
    too), from stage N's recording on. Tape segments are found as the executor finds them (:func:`tape_attaches`,
    checked against ``torch_exec.executor.annotate`` by tests/test_exact_peak.py), split where stages share a leaf
    (``Chain.shared_leaves``). Not done: schedules that offload (their peak is the model's); a reserve of part of
    a_N (``caller_keeps="loss"``: which storages it keeps is not said by maker).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import count

from .chain import Chain
from .schedule import SWAP_OPS, Op, OpKind
from .simulate import Holdings, ScheduleError, Tally, simulate


@dataclass
class ExactPeak:
    """:func:`exact_peak`'s answer: the storage-exact peak (bytes), the model's (:func:`gpusolve.simulate.simulate`),
    the op at the exact peak (-1: the start), and whether the chain had the storage facts to apply."""

    peak_bytes: int
    model_peak_bytes: int
    peak_op: int
    applied: bool
    trace: list[int] = field(default_factory=list, repr=False)  # with trace=True: bytes taken off after each op


def storage_facts(chain: Chain, drops: bool = True) -> tuple[list[dict[int, int]], list[dict[int, int]]] | None:
    """(B, D): per stage s = 0..N (index 0 unused), {maker stage t: bytes} of a_s made by t (t <= s, B[s][s] the
    made bytes) and of a_{s-1} made by t that stage s drops (Note [Storage-exact peaks]; every D empty with
    ``drops=False``, as planning counts: Note [Planning to the exact peak]); None where the chain's provenance
    lacks them or they do not fit its sizes (a chain derived without slicing them)."""
    prov = chain.provenance or {}
    passed, dropped = prov.get("passed_from"), prov.get("dropped_from")
    n = chain.n
    if passed is None or len(passed) != n or any(p is None for p in passed):
        return None
    if not drops or dropped is None or len(dropped) != n:
        dropped = [None] * n
    held: list[dict[int, int]] = [{}]
    dropping: list[dict[int, int]] = [{}]
    for s in range(1, n + 1):
        b = {int(t): int(nbytes) for t, nbytes in (passed[s - 1] or ()) if 1 <= int(t) < s and int(nbytes) > 0}
        own = chain.made_bytes(s)
        if own + sum(b.values()) > int(chain.act_bytes[s - 1]):
            return None  # the facts are not this chain's
        if own > 0:
            b[s] = own
        held.append(b)
        dropping.append({int(t): int(nbytes) for t, nbytes in (dropped[s - 1] or ()) if 1 <= int(t) < s
                         and int(nbytes) > 0})
    return held, dropping


def tape_attaches(schedule: list[Op], breaks=frozenset()) -> set[int]:
    """Indices of the ``FWD_TAPE`` ops that extend the autograd segment of the op before them, as the executor
    runs them (``torch_exec.executor.annotate``, Note [Tape runs]): right after ``FWD_TAPE(s - 1)``, unless s
    is in ``breaks``, and only where ``BWD(s)`` comes right before ``BWD(s - 1)``."""
    bwd_at = {op.stage: k for k, op in enumerate(schedule) if op.kind is OpKind.BWD}
    out = set()
    for k, op in enumerate(schedule):
        if op.kind is not OpKind.FWD_TAPE or k == 0 or op.stage in breaks:
            continue
        prev = schedule[k - 1]
        if (prev.kind is OpKind.FWD_TAPE and prev.stage == op.stage - 1
                and bwd_at.get(op.stage, -5) == bwd_at.get(op.stage - 1, -2) - 1):
            out.add(k)
    return out


class _Ledger:
    """Which runs made the storages of each boundary held, and what the model counts of them
    (Note [Storage-exact peaks])."""

    def __init__(self, chain: Chain, held: list[dict[int, int]], drops: list[dict[int, int]], lo: int):
        self.chain, self.held, self.drops, self.lo = chain, held, drops, lo
        self.n = chain.n
        self.runs = count(1)
        self.acts: dict[int, dict[int, int]] = {}      # checkpoint a_k -> {maker t: run}
        self.tapes: dict[int, dict[int, int]] = {}     # live tape of stage t -> runs of a_t's storages
        self.ends: set[int] = set()                    # tapes whose output the executor holds (a segment's end)
        self.lo_runs = {t: -t for t in held[lo]} if lo > 0 else {}  # the input's runs: its own
        # a_N as the caller holds it through the backward, where the chain reserves all of it: the runs of its
        # storages made before stage N, from the recording of stage N on (the reserve counts them from the start)
        self.output_reserved = bool((chain.provenance or {}).get("output_reserved"))
        self.caller: dict[int, int] = {}
        self.cumulative: dict[int, tuple[list[int], list[int]]] = {}  # maker t -> (stages s, sum of D_t up to s)
        for s, d in enumerate(drops):
            for t, nbytes in d.items():
                stages, sums = self.cumulative.setdefault(t, ([], []))
                stages.append(s)
                sums.append((sums[-1] if sums else 0) + nbytes)
        arr = chain.padded()
        self.tape_own = [0] + [min(chain.made_bytes(s), int(arr["tape_bytes"][s])) if s < self.n else 0
                               for s in range(1, self.n + 1)]  # a_N's storages may be reserved, not in its tape
        self.released = [0] + [int(arr["tape_bytes"][s]) - int(arr["bwd_tape_bytes"][s]) for s in range(1, self.n + 1)]

    def dropped_up_to(self, t: int, last: int) -> int:
        """The sum of D_t(s) over s <= ``last``."""
        stages, sums = self.cumulative.get(t, ((), ()))
        k = bisect_right(stages, last)
        return sums[k - 1] if k else 0

    def input_runs(self, s: int) -> dict[int, int]:
        if s - 1 in self.acts:
            return self.acts[s - 1]
        if s - 1 in self.tapes:
            return self.tapes[s - 1]
        return self.lo_runs

    def output_runs(self, s: int) -> dict[int, int]:
        runs = {t: run for t, run in self.input_runs(s).items() if t in self.held[s]}
        runs[s] = next(self.runs)
        return runs

    def over(self, backward: int | None = None) -> int:
        """Bytes the model counts beyond what is held (stage ``backward``'s tape released as the model releases it
        at its backward's start, its output no longer held)."""
        counted: dict[tuple[int, int], int] = {}
        refs: dict[tuple[int, int], list[int]] = {}
        for k, runs in self.acts.items():
            for t, run in runs.items():
                counted[t, run] = counted.get((t, run), 0) + self.held[k].get(t, 0)
                refs.setdefault((t, run), []).append(k)
        for t, run in self.caller.items():  # the reserve: a boundary a_N the caller holds
            counted[t, run] = counted.get((t, run), 0) + self.held[self.n].get(t, 0)
            refs.setdefault((t, run), []).append(self.n)
        for e in self.ends:
            if e != backward:
                for t, run in self.tapes[e].items():
                    refs.setdefault((t, run), []).append(e)
        tape_keys = {}
        for t, runs in self.tapes.items():
            own = self.tape_own[t]
            if t == backward:
                own = max(0, own - self.released[t])
            if own > 0:
                counted[t, runs[t]] = counted.get((t, runs[t]), 0) + own
                tape_keys[t, runs[t]] = own
        total = 0
        for key, nbytes in counted.items():
            t = key[0]
            where = refs.get(key, [])
            largest = max((self.held[k].get(t, 0) for k in where), default=0)
            if key in tape_keys:
                first = min(where, default=self.n + 1)  # a_s's drops are freed where no a_l, t <= l < s, is held
                freed = self.dropped_up_to(t, first)
                cap = max(largest, self.held[t].get(t, 0) - freed)
                held = min(cap, tape_keys[key] + largest) if t == backward else cap
            elif key[1] < 0:  # the sub-chain's input a_lo holds them, outside the counted memory
                held = 0
            else:
                held = largest
            total += max(0, nbytes - held)
        return total

    def apply(self, op: Op, attaches: bool) -> None:
        s = op.stage
        if op.kind is OpKind.FWD_NOGRAD:
            self.acts[s] = self.output_runs(s)
            if not op.keep_input:
                self.acts.pop(s - 1, None)
        elif op.kind is OpKind.FWD_TAPE:
            self.tapes[s] = self.output_runs(s)
            if s == self.n and self.output_reserved and not self.caller:
                self.caller = {t: run for t, run in self.tapes[s].items() if t < s}
            if attaches:
                self.ends.discard(s - 1)
            self.ends.add(s)
        elif op.kind is OpKind.BWD:
            self.tapes.pop(s, None)
            self.ends.discard(s)
        elif op.kind is OpKind.FREE:
            self.acts.pop(s, None)


def exact_peak(chain: Chain, schedule: list[Op], start: tuple[int, int] | None = None, breaks=None,
               trace: bool = False, link=None, drops: bool = True) -> ExactPeak:
    """The peak bytes of ``schedule`` (a chain schedule over the sub-chain ``start``, default (0, N), as
    :func:`gpusolve.simulate.simulate` takes it) with each storage counted once (Note [Storage-exact peaks]).
    ``breaks``: stages whose ``FWD_TAPE`` starts a new autograd segment (default: every reader of a shared leaf
    after the first, from ``chain.shared_leaves()``, as the executor splits them). The model's peak where the
    chain's profile did not record the storage facts, and for schedules that offload (simulated over ``link``).
    ``drops=False``: the storages a stage drops are not freed in a tape run (Note [Planning to the exact peak])."""
    model = simulate(chain, schedule, start=start, link=link)
    facts = storage_facts(chain, drops)
    if facts is None or any(op.kind in SWAP_OPS for op in schedule):
        return ExactPeak(model.peak_bytes, model.peak_bytes, model.peak_op, False)
    n = chain.n
    i, j = (0, n) if start is None else start
    if breaks is None:
        breaks = {s for stages, _, _ in (chain.shared_leaves() or ()) for s in stages[1:]}
    attaches = tape_attaches(schedule, frozenset(breaks))
    arr = chain.padded()
    state = Holdings(arr, i, grads=(j,))
    ledger = _Ledger(chain, *facts, lo=i)
    tally = Tally(int(arr["grad_bytes"][j]) + int(chain.reserved_bytes), False)
    off: list[int] = []
    peak, peak_op = tally.peak, -1
    for index, op in enumerate(schedule):
        if op.kind is OpKind.TURN or op.branch is not None or not i < op.stage <= j:
            raise ScheduleError(f"op {index} {op}: not an op of the chain schedule over ({i}, {j})")
        before = tally.held
        transient, change, seconds = state.apply(op, index)
        if op.kind is OpKind.BWD:
            over = ledger.over(backward=op.stage)
            ledger.apply(op, index in attaches)
        elif op.kind is OpKind.FREE:
            ledger.apply(op, index in attaches)
            over = ledger.over()
        else:  # a forward: what was counted twice before it
            over = ledger.over()
            ledger.apply(op, index in attaches)
        if before + transient - over > peak:
            peak, peak_op = before + transient - over, index
        tally.add(index, transient, change, seconds)
        if trace:
            off.append(ledger.over())
    return ExactPeak(int(peak), model.peak_bytes, peak_op, True, off)


# Note [Planning to the exact peak]
#     The DP plans within the budget by the model's count, which over-counts what tuple boundaries pass on
#     (Note [Storage-exact peaks]): Whisper's plan at 60 % measured 0.87-0.89 x its prediction, recomputing more than
#     the budget needed. :func:`solve_within` solves at the user's budget, then at raised solver budgets (bisection over
#     [budget, RAISE_TOP x budget], at most RAISE_SOLVES more solves) and keeps the fastest plan whose storage-exact
#     peak is within the user's budget; its ``predicted_peak_bytes`` is that exact peak. The exact peak is never below a
#     measured one in the runs that validate it (bench/results/exact_peak_cpu.md); the model's count stays the DP's, so
#     a chain without the storage facts is planned as before. The storages a stage drops are freed in planning only
#     where the profiler saw each freed (:func:`plan_drops`): the profile calls a storage dropped where no saved-tensor
#     hook saw it saved, and a custom autograd.Function that keeps its inputs as ``ctx`` attributes holds one unseen;
#     planned with it freed, a step measured 98 306 B over the user's budget where the model's plan held (review rv15:
#     bench/repros/rv15_review_ctx_held_dropped_storage.py, bench/results/exact_peak_cpu.md). The profiler now checks by
#     weak reference that each is gone once the stage has run, and calls dropped only those (Note [Drops measured] in
#     torch_exec/profiler.py); a profile made stage by stage, or before, is not checked, and its drops are counted held.
#     The check sees one call: a stage that reads a tuple's tensor on some calls only (on a random draw, or on its
#     data) drops it on the profiled call and saves it on another, which went 131 072 B over the budget (review rv16:
#     bench/repros/rv16_review_data_dependent_drop.py, rv16_review_random_route_drop.py). So the drops are freed only
#     for stages that run one graph on every call: auto_checkpoint's exported ones (``static_stages`` in
#     torch_exec/executor.py); a CheckpointedSequential of the user's modules counts them held.
#     What any plan is over-counted by is bounded by the bytes the boundaries pass on and the stages drop (those
#     planning frees), summed over the stages (each storage counted twice is one a boundary passes on, or one a stage
#     drops): where that sum is 0 the exact peak is the model's, and where it is under RAISE_MIN_OVERCOUNT of the budget
#     no raised solve is tried, since each costs as much as the first (DenseNet-121's layout split by torch_exec.split,
#     examples/models.py's TVDenseNet: 4096 B dropped against a 1.17 MB budget at 50 %, four solves for nothing). The
#     plan at the budget itself says nothing: a plan with no two holders of one storage can be beaten by a raised one
#     with several (tests/test_exact_peak.py).
RAISE_TOP = 1.25
RAISE_SOLVES = 4
RAISE_MIN_OVERCOUNT = 0.01


def plan_drops(chain: Chain) -> bool:
    """Whether planning may free the storages ``chain``'s stages drop: only where the profiler saw each freed by
    measurement (Note [Drops measured] in torch_exec/profiler.py; Note [Planning to the exact peak]), and then only
    for stages that drop the same on every call (``solve_within``'s ``free_drops``)."""
    return bool((chain.provenance or {}).get("drops_checked", False))


def solve_within(chain: Chain, budget: int, solve_at, breaks=None, solves: int = RAISE_SOLVES, top: float = RAISE_TOP,
                 free_drops: bool = True):
    """The plan :func:`gpusolve.solve`-like ``solve_at(solver_budget)`` gives for ``chain``, planned so that its
    storage-exact peak (:func:`exact_peak`) is within ``budget`` (bytes): Note [Planning to the exact peak]. The
    plan at ``budget`` where the chain lacks the storage facts or nothing is to gain; else the fastest of it and
    the plans at up to ``solves`` raised budgets whose exact peak fits, its ``predicted_peak_bytes`` the exact
    peak, its ``budget_bytes`` the user's ``budget``, a note saying at which budget it was solved. ``free_drops``:
    whether the stages drop on every call what the profile saw them drop (stages of a static graph), without which
    the drops are counted held whatever the profile says (:func:`plan_drops`)."""
    plan = solve_at(budget)
    drops = free_drops and plan_drops(chain)
    facts = storage_facts(chain, drops)
    # the most any plan is counted twice by (Note [Planning to the exact peak]): what is passed on and dropped
    bound = 0 if facts is None else (sum(nbytes for s, held in enumerate(facts[0]) for t, nbytes in held.items()
                                         if t != s) + sum(sum(d.values()) for d in facts[1]))
    if not bound or not plan.schedule:
        return plan  # no facts, or no stage passes a storage on or drops one: the exact peak is the model's
    best, best_peak = plan, exact_peak(chain, plan.schedule, breaks=breaks, drops=drops).peak_bytes
    if bound < RAISE_MIN_OVERCOUNT * budget:
        solves = 0  # no plan can be counted twice by much: little to gain from a raised budget
    tried = [(budget, best_peak)]
    lo, hi = budget, int(budget * top)
    for _ in range(solves):
        if best.predicted_time_ms <= best.store_all_time_ms or hi - lo <= max(1, budget // 1000):
            break  # no recomputation left to save, or the interval is down to a rounding
        mid = hi if len(tried) == 1 else (lo + hi) // 2  # the top first: most plans fit it or gain nothing more
        candidate = solve_at(mid)
        peak = (exact_peak(chain, candidate.schedule, breaks=breaks, drops=drops).peak_bytes
                if candidate.feasible else budget + 1)
        tried.append((mid, peak))
        if peak <= budget:
            lo = mid
            if candidate.predicted_time_ms < best.predicted_time_ms:
                best, best_peak = candidate, peak
            if len(tried) == 2:
                break  # the top fits: nothing above it is searched
        else:
            hi = mid
    if best is not plan:
        best.notes = list(best.notes) + [
            f"solved at {best.budget_bytes} B: its storage-exact peak {best_peak} B is within the budget {budget} B "
            f"(the model's count, which counts storages passed on by tuple boundaries more than once, "
            f"{best.predicted_peak_bytes} B; Note [Planning to the exact peak] in gpusolve/exact_peak.py)"]
        best.budget_bytes = budget
    elif best_peak < best.predicted_peak_bytes:
        best.notes = list(best.notes) + [
            f"storage-exact peak {best_peak} B (the model's count {best.predicted_peak_bytes} B; Note [Storage-exact "
            f"peaks] in gpusolve/exact_peak.py)"]
    best.predicted_peak_bytes = int(best_peak)
    return best
