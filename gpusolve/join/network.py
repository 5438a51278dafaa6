"""Join networks in the project's byte model: k branches (chains) that meet at one head (the turn).

Model (spec ``join-networks.md`` A.2.5; the chain model of ``gpusolve/chain.py`` for every branch)
----------------------------------------------------------------------------------------------------
Branch beta (0-based) is a :class:`~gpusolve.chain.Chain` of l_beta stages, or an
:class:`EmptyBranch` (l_beta = 0: its input feeds the turn directly). Its input a^beta_0 is held by
the caller and never counted; the gradient of a^beta_0 (``input_grad_bytes``) is produced inside the
budget and handed to the caller at the end. The budget counts everything else, with the join's
``reserved_bytes`` (plus every branch chain's own ``reserved_bytes``) held at every moment.

The **turn** (:class:`Turn`) is the head: the loss over the k branch outputs a^beta_{l_beta}, its
forward and its backward run back to back as one op (``OpKind.TURN``). Exactly:

- it reads every branch output a^beta_{l_beta}, held by the schedule (a live tape of stage l_beta, or
  a no-grad checkpoint of a^beta_{l_beta}, or, for an empty branch, the caller's input);
- its forward holds ``tape_bytes`` (the loss and what the head's backward saves) plus
  ``fwd_extra`` workspace; its backward holds ``tape_bytes`` + the k output gradients
  g^beta_{l_beta} (sizes ``grad_bytes[l_beta]``, or ``input_grad_bytes`` for an empty branch) +
  ``bwd_extra``; afterwards only the k gradients remain (:meth:`JoinNet.turn_need_bytes`);
- it frees nothing by itself. With ``frees_inputs`` (default) a branch output held as a no-grad
  checkpoint is dead after the turn and the schedule frees it right after (``FREE`` ops); the DP
  hands those bytes back to the backward phase (Note [Turn inputs] in :mod:`gpusolve.join.dp`).
  Set ``frees_inputs=False`` when the caller keeps references to the branch outputs after computing
  the loss: checkpoints of branch outputs are then held as long as any other checkpoint.

In the spec's notation t_turn = ``t_fwd + t_bwd`` and turn_extra = ``bwd_extra`` (with
``tape_bytes = fwd_extra = 0``).

Join policies (:data:`JoinPolicy`) are the DP's nested schedules: a tuple of branch actions in
forward order, the turn after the last one; :func:`join_policy_to_schedule` is the one place that
turns them into ops of the schedule IR (ops tagged with their branch).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Union

import numpy as np

from ..chain import ALL_BYTE_FIELDS, MAX_TIME_MS, TIME_FIELDS, Chain
from ..schedule import Op, OpKind, Policy, policy_to_schedule
from ..units import MAX_BYTES


@dataclass(frozen=True)
class EmptyBranch:
    """A branch of zero stages: its input a_0 (held by the caller, ``input_bytes`` for the record
    only) is the turn's input; the turn produces its gradient (``input_grad_bytes``, 0 when the
    input needs no gradient), which is held to the end of the step."""

    input_bytes: int = 0
    input_grad_bytes: int = 0
    name: str = "empty"

    n = 0
    multi_tape = False
    reserved_bytes = 0

    def validate(self, where: str = "empty branch") -> None:
        for label in ("input_bytes", "input_grad_bytes"):
            _check_bytes(getattr(self, label), f"{where}: {label}")

    def padded(self) -> dict[str, np.ndarray]:
        """The arrays of :meth:`Chain.padded` for zero stages (index 0 only: the input)."""
        out = {name: np.zeros(1, dtype=np.float64) for name in TIME_FIELDS}
        out.update({name: np.zeros(1, dtype=np.int64) for name in ALL_BYTE_FIELDS})
        out["act_bytes"][0] = self.input_bytes
        out["grad_bytes"][0] = self.input_grad_bytes
        return out


Branch = Union[Chain, EmptyBranch]


@dataclass(frozen=True)
class Turn:
    """The head over the k branch outputs (times ms, sizes bytes): see the module docstring."""

    t_fwd: float = 0.0
    t_bwd: float = 0.0
    tape_bytes: int = 0
    fwd_extra: int = 0
    bwd_extra: int = 0
    frees_inputs: bool = True
    name: str = "turn"

    @property
    def time_ms(self) -> float:
        """t_turn: the head's forward and backward."""
        return float(self.t_fwd) + float(self.t_bwd)

    def validate(self) -> None:
        for label in ("t_fwd", "t_bwd"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or \
                    not math.isfinite(float(value)) or not 0 <= value <= MAX_TIME_MS:
                raise ValueError(f"turn {self.name!r}: {label} = {value!r}; a time must be a finite number of "
                                 f"ms >= 0 and at most {MAX_TIME_MS:.0e} (use 0 for a head whose time is negligible)")
        for label in ("tape_bytes", "fwd_extra", "bwd_extra"):
            _check_bytes(getattr(self, label), f"turn {self.name!r}: {label}")
        if not isinstance(self.frees_inputs, (bool, np.bool_)):
            raise ValueError(f"turn {self.name!r}: frees_inputs = {self.frees_inputs!r} must be True or False")


def _check_bytes(value, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_BYTES:
        hint = ""
        if isinstance(value, float):
            hint = (" (got a float: NaN or a fraction of a byte)" if not math.isfinite(value) or value != round(value)
                    else f" (pass int({value!r}))")
        raise ValueError(f"{what} = {value!r}; it must be a whole number of bytes >= 0 and at most 2^50{hint}")


class JoinNet:
    """k >= 2 branches and the turn. Raises ``ValueError``/``TypeError`` naming the bad value."""

    def __init__(self, branches, turn: Turn, reserved_bytes: int = 0):
        branches = list(branches)
        if len(branches) < 2:
            raise ValueError(f"a join needs k >= 2 branches, got {len(branches)}; for a single chain use "
                             f"gpusolve.solve(chain, budget)")
        for beta, branch in enumerate(branches):
            if isinstance(branch, Chain):
                try:
                    branch.validate()
                except ValueError as err:
                    raise ValueError(f"branch {beta}: {err}") from None
            elif isinstance(branch, EmptyBranch):
                branch.validate(f"branch {beta} (empty)")
            else:
                raise TypeError(f"branch {beta} is a {type(branch).__name__}; each branch must be a gpusolve.Chain "
                                f"or a gpusolve.join.EmptyBranch (zero stages)")
        if not isinstance(turn, Turn):
            raise TypeError(f"turn is a {type(turn).__name__}; pass a gpusolve.join.Turn")
        turn.validate()
        _check_bytes(reserved_bytes, "reserved_bytes")
        self.branches: list[Branch] = branches
        self.turn = turn
        self.reserved_bytes = int(reserved_bytes)

    @property
    def k(self) -> int:
        return len(self.branches)

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(int(b.n) for b in self.branches)

    @property
    def total_reserved_bytes(self) -> int:
        """Bytes held through the whole step: the join's own and every branch chain's."""
        return self.reserved_bytes + sum(int(b.reserved_bytes) for b in self.branches)

    def padded(self, beta: int) -> dict[str, np.ndarray]:
        """``Chain.padded()`` of branch ``beta`` (index 0 = its input)."""
        return self.branches[beta].padded()

    def grad_bytes(self, beta: int, s: int) -> int:
        """G_beta(s): bytes of the gradient of a^beta_s."""
        return int(self.padded(beta)["grad_bytes"][s])

    def turn_grad_bytes(self) -> int:
        """Bytes of the k gradients the turn produces."""
        return sum(self.grad_bytes(beta, length) for beta, length in enumerate(self.lengths))

    def turn_need_bytes(self) -> int:
        """Bytes the turn needs at its worst moment beyond what holds its inputs (reserved included)."""
        t = self.turn
        return max(t.tape_bytes + t.fwd_extra, t.tape_bytes + self.turn_grad_bytes() + t.bwd_extra) + \
            self.total_reserved_bytes

    def turn_overhead_bytes(self) -> int:
        """What the turn needs beyond its k output gradients (reserved excluded): the baselines that
        solve branches as chains (each chain counts its own output gradient) add this."""
        t = self.turn
        return max(0, t.tape_bytes + t.fwd_extra - self.turn_grad_bytes(), t.tape_bytes + t.bwd_extra)

    def dp_chain(self, beta: int) -> Chain | None:
        """Branch ``beta`` as the chain DP sees it: the join's whole reserve held at every moment
        (None for an empty branch)."""
        branch = self.branches[beta]
        if isinstance(branch, EmptyBranch):
            return None
        return dataclasses.replace(branch, reserved_bytes=self.total_reserved_bytes)

    def store_all_time_ms(self) -> float:
        """Every recording forward and backward once, and the turn: a lower bound on any schedule."""
        total = sum(float(np.sum(b.t_fwd) + np.sum(b.t_bwd)) for b in self.branches if isinstance(b, Chain))
        return total + self.turn.time_ms


# ---------------------------------------------------------------------------- join policies

@dataclass(frozen=True)
class BranchTape:
    """Record the next stage i+1 of ``branch``; its backward runs after everything that follows."""

    branch: int


@dataclass(frozen=True)
class BranchCheckpoint:
    """No-grad forwards of ``branch`` from a_i to a_k keeping only a_k; after everything that
    follows (and the turn), drop a_k and run ``left``, the chain policy of the segment (i, k)."""

    branch: int
    k: int
    left: Policy


JoinAction = Union[BranchTape, BranchCheckpoint]
JoinPolicy = tuple
"""A tuple of :data:`JoinAction` in forward order; the turn runs after the last one."""


def join_policy_to_schedule(net: JoinNet, policy: JoinPolicy) -> list[Op]:
    """Ops of ``policy`` (spec A.2.5, schedule emission): every action's forward ops in order, the
    turn (and the ``FREE`` of branch outputs held as checkpoints, when the turn frees its inputs),
    then every action's backward part in reverse order. Raises ``ValueError`` when the actions do
    not bring every branch to its output."""
    lengths = net.lengths
    pos = [0] * net.k
    checkpointed_outputs: list[int] = []
    forward: list[Op] = []
    after: list[list[Op]] = []
    for action in policy:
        b = action.branch
        if not 0 <= b < net.k:
            raise ValueError(f"action {action!r}: branch {b} is not one of the {net.k} branches")
        i = pos[b]
        if isinstance(action, BranchTape):
            if i >= lengths[b]:
                raise ValueError(f"action {action!r}: branch {b} is already at its output (stage {lengths[b]})")
            forward.append(Op(OpKind.FWD_TAPE, i + 1, branch=b))
            after.append([Op(OpKind.BWD, i + 1, branch=b)])
            pos[b] = i + 1
        elif isinstance(action, BranchCheckpoint):
            k = action.k
            if not i < k <= lengths[b]:
                raise ValueError(f"action {action!r}: checkpoint {k} is outside ({i}, {lengths[b]}] of branch {b}")
            forward += [Op(OpKind.FWD_NOGRAD, s, keep_input=(s == i + 1), branch=b) for s in range(i + 1, k + 1)]
            back = [] if k == lengths[b] and net.turn.frees_inputs else [Op(OpKind.FREE, k, branch=b)]
            if k == lengths[b] and net.turn.frees_inputs:
                checkpointed_outputs.append(b)
            back += [dataclasses.replace(op, branch=b) for op in policy_to_schedule(action.left, i, k)]
            after.append(back)
            pos[b] = k
        else:
            raise TypeError(f"not a join action: {action!r}")
    if tuple(pos) != lengths:
        raise ValueError(f"the actions end at positions {tuple(pos)}, not at the branch outputs {lengths}")
    turn = [Op(OpKind.TURN, 0)] + [Op(OpKind.FREE, lengths[b], branch=b) for b in checkpointed_outputs]
    return forward + turn + [op for ops in reversed(after) for op in ops]
