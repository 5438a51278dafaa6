"""The schedule IR: the flat list of operations that both the simulator and the executor run.

Operations (``s`` is a stage, 1..N):
- ``FWD_NOGRAD(s, keep_input)``: compute a_s from a_{s-1} without recording; free a_{s-1} afterwards
  unless ``keep_input`` (it is a checkpoint or the sub-chain's held input).
- ``FWD_TAPE(s)``: compute a_s from a_{s-1} with autograd recording; its tape (a_s and the saved
  tensors) is held until ``BWD(s)``.
- ``BWD(s)``: consume the gradient of a_s and the tape of s, produce the gradient of a_{s-1}.
- ``FREE(s)``: drop the checkpoint a_s.
- ``TURN``: only in join schedules (:mod:`gpusolve.join`): the head (loss) over the k branch outputs,
  forward and backward at once; it produces the gradient of every branch output. Its ``stage`` is 0.
- Offloading (:mod:`gpusolve.offload`, spec ``offload.md`` B.4.1; ``s`` is the activation a_s, a plain
  checkpoint): ``OFFLOAD(s)`` issues the device-to-host copy of a_s on the copy channel (a_s stays
  readable and held); ``RELEASE(s)`` waits for that copy, then frees a_s's device block;
  ``PREFETCH(s)`` allocates a_s's device block (held from now) and issues the host-to-device copy;
  ``ACQUIRE(s)`` waits for that copy: a_s is a held checkpoint again. Simulated on two timelines by
  :func:`gpusolve.simulate.simulate` (``link=``).

Ops of a join schedule carry ``branch`` (0-based branch index; None for the TURN and for every op
of a chain schedule, whose form and JSON are unchanged).

A *policy* is a tree over sub-chains (i, j): either ``Tape`` (record stage i+1, solve (i+1, j),
run its backward), ``Checkpoint(k)`` (forward no-grad to a_k, solve (k, j), drop a_k, solve
(i, k)) or ``Swap(k)`` (Checkpoint k with a_i moved to the host while (k, j) runs).
:func:`policy_to_schedule` is the one place that turns a policy into operations.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterator, Union


class OpKind(str, Enum):
    FWD_NOGRAD = "fwd_nograd"
    FWD_TAPE = "fwd_tape"
    BWD = "bwd"
    FREE = "free"
    TURN = "turn"
    OFFLOAD = "offload"
    RELEASE = "release"
    PREFETCH = "prefetch"
    ACQUIRE = "acquire"


SWAP_OPS = (OpKind.OFFLOAD, OpKind.RELEASE, OpKind.PREFETCH, OpKind.ACQUIRE)


@dataclass(frozen=True)
class Op:
    """One schedule operation on stage ``stage`` (1-based); ``keep_input`` only for FWD_NOGRAD;
    ``branch`` only in join schedules (the branch the stage belongs to)."""

    kind: OpKind
    stage: int
    keep_input: bool = False
    branch: int | None = None

    def to_json(self) -> list:
        if self.branch is not None:  # join form: always four items
            return [self.kind.value, self.stage, bool(self.keep_input), self.branch]
        if self.kind is OpKind.FWD_NOGRAD:
            return [self.kind.value, self.stage, bool(self.keep_input)]
        return [self.kind.value, self.stage]

    @classmethod
    def from_json(cls, item) -> "Op":
        kind = OpKind(item[0])
        branch = int(item[3]) if len(item) > 3 and item[3] is not None else None
        return cls(kind, int(item[1]), bool(item[2]) if len(item) > 2 else False, branch)

    def __str__(self) -> str:
        if self.kind is OpKind.TURN:
            return "turn()"
        where = f"{self.branch}:{self.stage}" if self.branch is not None else f"{self.stage}"
        if self.kind is OpKind.FWD_NOGRAD:
            return f"{self.kind.value}({where}{', keep' if self.keep_input else ''})"
        return f"{self.kind.value}({where})"


@dataclass(frozen=True)
class Tape:
    """Record stage i+1 with autograd, solve ``right`` = (i+1, j) (None when j = i+1), backward."""

    right: "Policy | None" = None


@dataclass(frozen=True)
class Checkpoint:
    """Forward no-grad to a_k, solve ``right`` = (k, j), drop a_k, solve ``left`` = (i, k)."""

    k: int
    right: "Policy"
    left: "Policy"


@dataclass(frozen=True)
class Swap:
    """Checkpoint k with a_i (a plain checkpoint) on the host while ``right`` = (k, j) runs
    (spec ``offload.md`` B.4.1). Emitted as::

        offload(i), fwd_nograd(i+1, keep), fwd_nograd(i+2..k), release(i),
        <right without its last op>, prefetch(i), bwd(k+1), free(k), acquire(i), <left>

    when ``overlap`` (the host-to-device copy overlaps the right part's last op, bwd(k+1)), else
    ``..., release(i), <right>, free(k), prefetch(i), acquire(i), <left>`` (no room for a_i during
    bwd(k+1)). The node carries the variant the DP priced (it knows m), so the emitter needs
    neither the chain nor the budget."""

    k: int
    right: "Policy"
    left: "Policy"
    overlap: bool = True


Policy = Union[Tape, Checkpoint, Swap]


def records_early(policy: Policy) -> bool:
    """Whether ``policy`` records a stage before the next stage's backward has run (a :class:`Tape` with a right
    part): outside the class of the thesis's model (Note [The thesis model's class] in gpusolve/solve.py)."""
    stack = [policy]
    while stack:
        node = stack.pop()
        if isinstance(node, Tape):
            if node.right is not None:
                return True
        elif node is not None:
            stack += [node.right, node.left]
    return False


def policy_to_schedule(policy: Policy, i: int, j: int) -> list[Op]:
    """Operations of ``policy`` for the sub-chain (i, j): a_i held outside, gradient of a_j given."""
    return list(_emit(policy, i, j))


def _emit(policy: Policy, i: int, j: int) -> Iterator[Op]:
    # Explicit stack instead of recursion: chains of thousands of stages nest that deep.
    stack: list = [(policy, i, j)]
    before_bwd: dict[int, Op] = {}  # an overlapping Swap's prefetch, issued right before bwd(k+1)
    while stack:
        item = stack.pop()
        if isinstance(item, Op):
            if item.kind is OpKind.BWD and item.stage in before_bwd:
                yield before_bwd.pop(item.stage)
            yield item
            continue
        node, lo, hi = item
        if isinstance(node, Tape):
            if (node.right is None) != (hi == lo + 1):
                raise ValueError(f"Tape at ({lo}, {hi}) must have a right sub-policy exactly when j > i + 1")
            yield Op(OpKind.FWD_TAPE, lo + 1)
            stack.append(Op(OpKind.BWD, lo + 1))
            if node.right is not None:
                stack.append((node.right, lo + 1, hi))
        elif isinstance(node, Checkpoint):
            k = node.k
            if not lo < k < hi:
                raise ValueError(f"checkpoint k = {k} is outside ({lo}, {hi})")
            for stage in range(lo + 1, k + 1):
                yield Op(OpKind.FWD_NOGRAD, stage, keep_input=(stage == lo + 1))
            stack.append((node.left, lo, k))
            stack.append(Op(OpKind.FREE, k))
            stack.append((node.right, k, hi))
        elif isinstance(node, Swap):
            k = node.k
            if not lo < k < hi:
                raise ValueError(f"swap k = {k} is outside ({lo}, {hi})")
            yield Op(OpKind.OFFLOAD, lo)
            for stage in range(lo + 1, k + 1):
                yield Op(OpKind.FWD_NOGRAD, stage, keep_input=(stage == lo + 1))
            yield Op(OpKind.RELEASE, lo)
            stack.append((node.left, lo, k))
            stack.append(Op(OpKind.ACQUIRE, lo))
            if node.overlap:
                # Every schedule of (k, hi) ends with bwd(k+1), the only backward of stage k+1.
                before_bwd[k + 1] = Op(OpKind.PREFETCH, lo)
                stack.append(Op(OpKind.FREE, k))
            else:
                stack.append(Op(OpKind.PREFETCH, lo))
                stack.append(Op(OpKind.FREE, k))
            stack.append((node.right, k, hi))
        else:
            raise TypeError(f"not a policy node: {node!r}")


def tape_chain(i: int, j: int) -> Policy:
    """Record every stage of (i, j) and run the backwards: plain autograd on the sub-chain."""
    node: Policy = Tape(None)
    for _lo in range(j - 2, i - 1, -1):
        node = Tape(node)
    return node


def segments_policy(boundaries: list[int], n: int) -> Policy:
    """Keep a_b for every boundary b (0 < b < n) during the forward, tape each segment on backward.

    This is ``torch.utils.checkpoint.checkpoint_sequential``'s policy; boundaries are sorted.
    """
    cuts = sorted(set(b for b in boundaries if 0 < b < n))

    # Iterative fold from the last cut backwards avoids deep recursion.
    node = tape_chain(cuts[-1], n) if cuts else tape_chain(0, n)
    for idx in range(len(cuts) - 1, -1, -1):
        lo = cuts[idx - 1] if idx > 0 else 0
        node = Checkpoint(cuts[idx], right=node, left=tape_chain(lo, cuts[idx]))
    return node


def schedule_to_json(schedule: list[Op]) -> list:
    """JSON form of a schedule: a list of ``[kind, stage(, keep_input)]``."""
    return [op.to_json() for op in schedule]


def schedule_from_json(items) -> list[Op]:
    """Inverse of :func:`schedule_to_json`."""
    return [Op.from_json(item) for item in items]


def count_recomputations(schedule: list[Op]) -> int:
    """Forward operations beyond one per stage (how much is recomputed)."""
    forwards = sum(1 for op in schedule if op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE))
    stages = len({op.stage for op in schedule if op.kind is OpKind.BWD})
    return forwards - stages
