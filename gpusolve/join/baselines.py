"""Baselines for join networks, in the byte model; each is a join schedule checked by the simulator.

- **store-all**: plain autograd: record every stage, the turn, every backward (the branches'
  backward phases in the order of least peak, :func:`gpusolve.join.bytesim.store_all_join_peak_bytes`).
- **split budget**: each branch solved alone by the chain DP (:mod:`gpusolve.dp.cpu`) within its
  share of the budget, the shares exact over bucket splits (a min-plus convolution of the branches'
  curves). The schedule runs every branch's forward part (its chain schedule up to its first
  backward), the turn, then every branch's backward part (Note [Composed chain schedules]).
- **EQUIV-CHAIN** ([J] §6, Fig. 10a, in the byte model): the operations at the same distance from the
  turn are grouped into one level; the chain of levels (:func:`level_chain`, costs composed so that a
  level never holds less than its members do, Note [Levels]) is solved by :func:`gpusolve.solve`
  and each level op is expanded into its members' ops. Unlike the paper's it applies to unbalanced
  joins too (a short branch joins the levels nearest the turn).

Note [Composed chain schedules]
    A chain schedule of C(0, l, m) starts with the gradient of a_l held and ends with the gradient of
    a_0; its ops before the first backward are forwards that end with stage l recorded (the chain DP
    never keeps a_l as a checkpoint). Run the forward parts of every branch, the turn, then the
    backward parts: while one branch runs a part, every other branch holds at most what its own
    chain schedule held at some moment (its state after its forward part, gradient of a_l included,
    or the gradient of a_0), so the composed peak is at most the sum of the chains' peaks plus the
    turn's bytes beyond its output gradients (:meth:`JoinNet.turn_overhead_bytes`), the gradients of
    empty branches and the reserve. The budget is split accordingly; the simulator gives the true
    peak (usually lower).

Note [Levels]
    Level j (1..L, L = max l_beta) holds stage p = l_beta - L + j of every branch with p >= 1; its
    members run one after the other (branch order forward, reverse order backward). Level sizes:
    output and tape = sums over members, gradient = the sum over *all* branches of the gradient at
    max(p, 0) (a branch that has not started yet, or has finished its backward, holds the gradient of
    its input from the turn on), workspace = the largest member's, and the whole tape is counted
    until the level's backward (``bwd_tape_bytes = tape_bytes``). Each member's worst moment is then
    at most the level's, so a level plan within m bytes expands to a join schedule within m bytes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..chain import Chain
from ..dp import cpu
from ..dp.problem import Problem
from ..schedule import Op, OpKind, policy_to_schedule
from .bytesim import backward_orders, simulate_join, store_all_join_schedule
from .network import EmptyBranch, JoinNet


@dataclass
class JoinBaseline:
    """One baseline at one budget: its schedule (None when it has none), simulated figures."""

    name: str
    schedule: list[Op] | None
    time_ms: float
    peak_bytes: int
    feasible: bool
    detail: str = ""


def _best_order(net: JoinNet, build) -> tuple[list[Op], object]:
    """The schedule ``build(order)`` of least simulated peak over :func:`backward_orders`."""
    best = None
    for order in backward_orders(net.k):
        schedule = build(order)
        sim = simulate_join(net, schedule)
        if best is None or sim.peak_bytes < best[1].peak_bytes:
            best = (schedule, sim)
    return best


def store_all(net: JoinNet, budget_bytes: int | None = None) -> JoinBaseline:
    """Plain autograd on the join (feasible when its peak fits ``budget_bytes``; always without one)."""
    schedule, sim = _best_order(net, lambda order: store_all_join_schedule(net, order))
    fits = budget_bytes is None or sim.peak_bytes <= budget_bytes
    return JoinBaseline("store-all", schedule, sim.time_ms, sim.peak_bytes, fits, "record every stage")


def split_budget(net: JoinNet, budget_bytes: int, bucket_bytes: int | None = None) -> JoinBaseline:
    """Each branch by the chain DP within its share of the budget, the shares exact over bucket
    splits (Note [Composed chain schedules]); ``bucket_bytes`` defaults to a 1024th of the budget."""
    name = "split budget (chain DP per branch)"
    fixed = net.total_reserved_bytes + net.turn_overhead_bytes() + sum(
        b.input_grad_bytes for b in net.branches if isinstance(b, EmptyBranch))
    available = budget_bytes - fixed
    if available < 0:
        return JoinBaseline(name, None, np.inf, 0, False, f"the turn and reserve alone need {fixed} B")
    bucket = int(bucket_bytes) if bucket_bytes else max(1, -(-budget_bytes // 1024))
    buckets = available // bucket
    chains = [(beta, dataclasses.replace(b, reserved_bytes=0)) for beta, b in enumerate(net.branches)
              if isinstance(b, Chain)]
    tables = [cpu.fill(Problem.build(chain, bucket, buckets)) for _, chain in chains]
    total = np.zeros(buckets + 1)
    picks = []  # per branch after the first: best share of it for every total
    for index, table in enumerate(tables):
        curve = np.asarray(table.curve, dtype=np.float64)
        if index == 0:
            total = curve
            continue
        total, pick = min_plus_shares(total, curve)
        picks.append(pick)
    if not chains or not np.isfinite(total[buckets]):
        if not chains:
            schedule = [Op(OpKind.TURN, 0)]
            sim = simulate_join(net, schedule)
            return JoinBaseline(name, schedule, sim.time_ms, sim.peak_bytes, sim.peak_bytes <= budget_bytes,
                                "no stages")
        return JoinBaseline(name, None, np.inf, 0, False,
                            f"no split of {available} B fits the branches at bucket {bucket} B")
    shares = [0] * len(tables)
    left = buckets
    for index in range(len(tables) - 1, 0, -1):
        shares[index] = int(picks[index - 1][left])
        left -= shares[index]
    shares[0] = left
    parts = {}
    for (beta, chain), table, share in zip(chains, tables, shares, strict=True):
        ops = [dataclasses.replace(op, branch=beta) for op in policy_to_schedule(table.policy(share), 0, chain.n)]
        first_bwd = next(i for i, op in enumerate(ops) if op.kind is OpKind.BWD)
        parts[beta] = (ops[:first_bwd], ops[first_bwd:])
    schedule, sim = _best_order(net, lambda order: _compose(net, parts, order))
    detail = "shares " + ", ".join(f"branch {beta}: {share * bucket} B"
                                   for (beta, _), share in zip(chains, shares, strict=True))
    return JoinBaseline(name, schedule, sim.time_ms, sim.peak_bytes, sim.peak_bytes <= budget_bytes, detail)


# Rows of the min-plus product evaluated at once (rows x plateau starts candidates in memory).
_SHARE_BLOCK = 1 << 22


def min_plus_shares(total: np.ndarray, curve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(best, share): best[m] = min over s of total[m - s] + curve[s], share[m] the least s reaching it
    (``total`` the branches so far, ``curve`` the next branch's, both nonincreasing over buckets).

    Only the first column of each plateau of ``curve`` can be that least s: inside a plateau, one
    bucket less for the branch leaves its time as it is and gives the others one more, which never
    makes them slower. So the product runs over the plateau starts (a few hundred at 4096 buckets on
    ResNet-50, against the 4096^2 pairs, 134 MB, of the first version), a block of rows at a time."""
    width = len(total)
    starts = np.flatnonzero(np.r_[True, curve[1:] != curve[:-1]])  # inf == inf: the infeasible prefix is one
    best = np.empty(width)
    share = np.empty(width, dtype=np.int64)
    at_starts = curve[starts][None, :]
    rows = max(1, _SHARE_BLOCK // len(starts))
    for lo in range(0, width, rows):
        m = np.arange(lo, min(width, lo + rows))
        rest = m[:, None] - starts[None, :]
        cand = np.where(rest >= 0, total[np.maximum(rest, 0)] + at_starts, np.inf)
        at = np.argmin(cand, axis=1)
        best[m], share[m] = cand[np.arange(len(m)), at], starts[at]
    return best, share


def _compose(net: JoinNet, parts: dict, order) -> list[Op]:
    """Forward parts in the reverse of ``order``, the turn, backward parts in ``order``."""
    ops = [op for beta in reversed(order) if beta in parts for op in parts[beta][0]]
    ops.append(Op(OpKind.TURN, 0))
    return ops + [op for beta in order if beta in parts for op in parts[beta][1]]


def level_chain(net: JoinNet) -> tuple[Chain, list[list[tuple[int, int]]]] | None:
    """EQUIV-CHAIN's chain of levels (Note [Levels]) and the members (branch, stage) of each level;
    None for a join of empty branches only."""
    lengths = net.lengths
    depth = max(lengths)
    if depth == 0:
        return None
    arrays = [net.padded(beta) for beta in range(net.k)]
    members = [[(beta, length - depth + j) for beta, length in enumerate(lengths) if length - depth + j >= 1]
               for j in range(1, depth + 1)]
    fields: dict[str, list] = {key: [] for key in ("t_fwd", "t_fwd_nograd", "t_bwd", "act_bytes", "grad_bytes",
                                                   "tape_bytes", "fwd_nograd_extra", "fwd_grad_extra", "bwd_extra")}
    for j, level in enumerate(members, start=1):
        for key in ("t_fwd", "t_fwd_nograd", "t_bwd", "act_bytes", "tape_bytes"):
            fields[key].append(sum(arrays[beta][key][p] for beta, p in level))
        for key in ("fwd_nograd_extra", "fwd_grad_extra", "bwd_extra"):
            fields[key].append(max(int(arrays[beta][key][p]) for beta, p in level))
        fields["grad_bytes"].append(sum(int(arrays[beta]["grad_bytes"][max(0, length - depth + j)])
                                        for beta, length in enumerate(lengths)))
    input_grad = sum(int(arrays[beta]["grad_bytes"][0]) for beta in range(net.k))
    chain = Chain(**fields, bwd_tape_bytes=list(fields["tape_bytes"]), input_bytes=0, input_grad_bytes=input_grad,
                  reserved_bytes=net.total_reserved_bytes, multi_tape=all(b.multi_tape for b in net.branches
                                                                           if isinstance(b, Chain)),
                  names=[f"level{j}" for j in range(1, depth + 1)], provenance={"source": "equiv-chain"})
    return chain, members


def expand_levels(ops: list[Op], members) -> list[Op]:
    """A level-chain schedule as branch ops (Note [Levels]); the TURN stays."""
    out: list[Op] = []
    for op in ops:
        if op.kind is OpKind.TURN:
            out.append(op)
            continue
        level = members[op.stage - 1]
        if op.kind is OpKind.FWD_NOGRAD:
            out += [Op(op.kind, p, keep_input=op.keep_input or p == 1, branch=beta) for beta, p in level]
        elif op.kind is OpKind.FWD_TAPE:
            out += [Op(op.kind, p, branch=beta) for beta, p in level]
        elif op.kind is OpKind.BWD:
            out += [Op(op.kind, p, branch=beta) for beta, p in reversed(level)]
        else:
            out += [Op(op.kind, p, branch=beta) for beta, p in level]
    return out


def equiv_chain(net: JoinNet, budget_bytes: int, bucket_bytes: int | None = None) -> JoinBaseline:
    """EQUIV-CHAIN in the byte model: the level chain solved by :func:`gpusolve.solve` (CPU backend)
    within the budget less the turn's bytes beyond its output gradients."""
    from ..solve import solve
    name = "EQUIV-CHAIN (levels)"
    built = level_chain(net)
    if built is None:
        schedule = [Op(OpKind.TURN, 0)]
        sim = simulate_join(net, schedule)
        return JoinBaseline(name, schedule, sim.time_ms, sim.peak_bytes, sim.peak_bytes <= budget_bytes, "no stages")
    chain, members = built
    chain_budget = budget_bytes - net.turn_overhead_bytes()
    if chain_budget < 1:
        return JoinBaseline(name, None, np.inf, 0, False, "the turn alone needs the budget")
    bucket = min(int(bucket_bytes), chain_budget) if bucket_bytes else None
    plan = solve(chain, chain_budget, bucket=bucket, backend="cpu", strict=False, progress=False)
    if not plan.feasible:
        return JoinBaseline(name, None, np.inf, 0, False, f"the level chain needs {plan.min_feasible_bytes} B")
    first_bwd = next(i for i, op in enumerate(plan.schedule) if op.kind is OpKind.BWD)
    level_ops = plan.schedule[:first_bwd] + [Op(OpKind.TURN, 0)] + plan.schedule[first_bwd:]
    schedule = expand_levels(level_ops, members)
    sim = simulate_join(net, schedule)
    return JoinBaseline(name, schedule, sim.time_ms, sim.peak_bytes, sim.peak_bytes <= budget_bytes,
                        f"{chain.n} levels")


def compare_join(net: JoinNet, budget_bytes: int, bucket_bytes: int | None = None) -> list[JoinBaseline]:
    """Every baseline at ``budget_bytes`` (the optimum is :func:`gpusolve.join.solve_join`). With a branch in the
    thesis's model they record before the turn, outside the class (Note [The thesis model's class] in
    gpusolve/solve.py): rows without a schedule saying so (store-all read 42 ms at 3 B under the join's least
    budget of 4 B: bench/repros/rv10_diff_join_compare_thesis_store_all.py)."""
    from ..baselines import OUTSIDE_THESIS_CLASS
    from ..solve import outside_class_candidates
    rows = [store_all(net, budget_bytes), split_budget(net, budget_bytes, bucket_bytes),
            equiv_chain(net, budget_bytes, bucket_bytes)]
    if outside_class_candidates(net.branches):
        return rows
    return [JoinBaseline(b.name, None, np.inf, 0, False, f"records before the turn: {OUTSIDE_THESIS_CLASS}")
            for b in rows]
