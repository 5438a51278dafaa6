"""Train a join network (k chains of stages meeting at one head) under a memory budget: :class:`CheckpointedJoin`.

A join network (Siamese, two-tower, triplet) has k branches, each a chain of stages with its own input,
whose outputs meet at a head (a loss, or any function of the k outputs). ``CheckpointedJoin(branches,
head, budget)`` profiles every branch with the chain profiler (:func:`torch_exec.profile_dict`, one
profile per branch) and the head as a one-stage chain over the k outputs, builds the byte model's
:class:`gpusolve.join.JoinNet` and :class:`gpusolve.join.Turn`, solves it with
:func:`gpusolve.join.solve.solve_join`, and runs the join schedule with the chain executor's one
interpreter (:func:`torch_exec.executor.interpret`): every branch op runs on that branch's
:class:`~torch_exec.executor.Runtime` (checkpoints, tapes, segment backwards, RNG replay, BatchNorm
statistics updated once per step: all of it the chain executor's code), the ``TURN`` on the
:class:`JoinRuntime` here.

``auto_checkpoint`` finds joins in a captured graph itself (Note [Join detection] in
:mod:`torch_exec.auto`) and runs them with this class.

Note [The head's graph]
    The join schedule is a forward phase (each stage of each branch exactly once, no-grad or recorded),
    the ``TURN`` (the head's forward and backward back to back), then the backward phase (branch ops
    only: segment backwards, recomputations, frees). The user, however, gets the head's output and
    calls ``.backward()`` on it later, maybe after using it. So the ``TURN`` is executed in two halves,
    two entries of the annotated program (:func:`~torch_exec.executor.annotate`), exactly as a chain's
    last stage is ``FWD_TAPE(N)`` at the end of its Function's forward and ``BWD(N)`` at the start of
    its backward:

    - :class:`_JoinFunction` ``forward``: interprets the forward phase, then the head's forward *with
      recording*, on segment inputs made from the k branch outputs (Note [Segment inputs] in
      :mod:`torch_exec.executor`; an empty branch's is its input, requiring grad as the input does). The head's graph stays inside
      the runtime (its tape); the Function returns the head's output tensors detached, and the module
      rebuilds the head's output structure (any pytree) around them.
    - ``backward``: receives the gradient of the head's output from the engine (1.0 for a scalar loss,
      or whatever the user's graph after the head sends), back-propagates it through the head's
      recorded graph (the head's parameters accumulate their ``.grad``; what the engine hands each
      segment input is the gradient of a branch output, handed to that branch's runtime), then interprets the backward
      phase, and returns the gradient of every branch input.

    Between the two halves nothing else of the schedule runs, so the memory held is the model's turn
    (its tape and the branch outputs it reads). The gradient of the head's output is held by the engine
    through the whole backward (Note [The gradient of a_N] in the executor), and the head's output may
    be held by the caller (Note [The caller holds a_N]): both are reserved in the join's byte model
    (``JoinNet.reserved_bytes``), and the output leaves the head's tape. The branches' own outputs and
    their gradients are made and freed inside the step (``executor_chain(..., output_grad_held=False)``).

Note [Draw order]
    The forward phase runs each branch's stages in order, but it may interleave the branches (the DP's
    nesting decides), while plain autograd runs branch 0, then branch 1, ... A stage that draws random
    numbers (dropout) or updates buffers (BatchNorm running statistics of a module shared by several
    branches: Siamese) gives other results in another order. So when two branches have such stages
    and the plan runs them out of branch order, the forward phase is re-ordered branch by branch (a
    stable sort: each branch's ops keep their order; times are unchanged) and the re-ordered schedule
    is simulated in exact bytes: it is used when it still fits the budget (a note on the plan says
    so), else the plan is kept, with a note, and a :class:`JoinOrderWarning` at its first step says that
    random numbers or shared statistics follow the plan's order, not plain autograd's. Of two faces
    (Note [Two groupings of unsaved boundaries] in the executor) one that keeps the order runs first. Recomputations replay their RNG state
    and update scratch copies of the buffers as in the chain executor, whatever the order.
    Whether a stage draws is known from the profiled call only (a drop rate the loop raises from 0, a draw the
    data decides: Note [Draws found at the first run] in torch_exec/_util.py), so a forward phase that
    interleaves branches is re-ordered wherever that fits, drawing stages known or not (before, a stage that
    started drawing at step 1 drew in the plan's order and the step's loss differed from plain autograd's: a
    review, bench/repros/rv21d_join_live_stage_draws_not_replayed.py). Where it does not fit, every stage's first
    run is watched (``JoinEntry.interleaved``), and a stage found drawing raises the JoinOrderWarning at that
    step; a stage found drawing makes the next call plan again (``CheckpointedJoin._replan_draws``), with its
    flags and its RNG record's bytes.

``torch.autograd.grad(...)`` and ``backward(inputs=...)`` run as through the chain executor: the
trainable parameters reach the step's Function through its parameter tap, and the segment backwards
(the head's too) compute only what is named (Note [Autograd calls that name tensors] in
torch_exec/executor.py).

``retain_graph=True`` keeps the forward's state (every branch's checkpoints and tapes, the head's tape) and
each later backward starts again from it, as the chain's (Note [Retained graphs] in torch_exec/executor.py).

Limitations: double backward (``create_graph=True``) through a checkpointed step is refused with an
error (run with ``budget=None`` for it); a head that returns a tensor sharing storage with a branch
output keeps that output alive past the ``FREE`` the plan schedules after the turn; the join has no
``offload=`` and no ``caller_keeps`` (its head's output is reserved whole).
"""
from __future__ import annotations

import types
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from gpusolve.errors import FallbackWarning, InfeasibleBudgetError
from gpusolve.join.baselines import store_all
from gpusolve.join.bytesim import simulate_join, store_all_join_peak_bytes
from gpusolve.join.dp import min_peak_join
from gpusolve.join.network import EmptyBranch, JoinNet, Turn, join_policy_to_schedule
from gpusolve.join.solve import JOIN_BACKENDS, JoinPlan, solve_join
from gpusolve.schedule import OpKind
from gpusolve.solve import Curve
from gpusolve.units import parse_budget

from . import _util as U
from .executor import (IN_FLIGHT, NOT_MEASURED, TURN, CheckpointedSequential, ProgramSplit, Runtime, _backward_runtime,
                       _backward_segment, _compiler_disable, _detached_results, _needs_at_least,
                       _PlannedModule, _SegmentMode, _standin_params, _with_beside, annotate,
                       below_floor_message, below_plain_message, executor_chain, interpret, interpret_backward,
                       faces_of, kept_graph_leaves, mark_parameters, merged_face, output_out_of_tape, plan_faces,
                       refuse_host_draws, refuse_shared_hazards, report_draws_found, rng_flags, state_requires_grad)
from .meter import MemoryMeter
from .profiler import chain_from_profile, profile_dict, runs_as_a_stage


_HEAD_WROTE_ERROR = ("CheckpointedJoin: the head wrote in place into a branch output, which the schedule holds and may "
                     "read again; make that operation out of place (e.g. a.relu() for a.relu_())")


class JoinOrderWarning(UserWarning):
    """The plan draws random numbers or updates shared buffers in another branch order than plain
    autograd (Note [Draw order])."""


_TENSOR = object()  # placeholder of a tensor leaf in the head's flattened output

_DOUBLE_BACKWARD_ERROR = (
    "CheckpointedJoin: double backward (create_graph=True) is not supported through a checkpointed join: its "
    "recomputations and segment backwards record no graph of the gradient. Run it with budget=None (plain autograd)")
_TWICE_ERROR = (
    "CheckpointedJoin: backward ran twice through the same step, and the first backward freed it; pass "
    "retain_graph=True to the earlier backward (as plain autograd needs) to run it again")

@dataclass
class JoinEntry(ProgramSplit):
    """Everything one input signature needs: the profiles, the byte model, the plan and the program."""

    plan: JoinPlan
    net: JoinNet                     # the join as the executor runs it (what it holds is counted)
    plain_net: JoinNet               # the profiled join (plain autograd's costs)
    branches: list                   # per branch: its executor Entry (an empty branch: a stand-in with n = 0)
    structures: list                 # per branch: ("tensor", 1) or ("tuple", number of tensors)
    head: object                     # the head callable
    head_profile: dict = field(default_factory=dict)
    plain_peak_bytes: int | None = 0  # plain autograd's step, measured (CheckpointedJoin._plain_step_peak); None: not
    held_bytes: int = 0              # held through each step beside the join (CheckpointedJoin.held_bytes)
    beside_bytes: int = 0            # made in each step beside the join (CheckpointedJoin.beside_bytes)
    floor_bytes: int = 0             # the least budget whatever the plan (CheckpointedSequential.floor_bytes)
    turn_peak_bytes: int = 0         # the chain's turn term (executor._with_beside): the join model has the head's
    plain: bool = False              # plain autograd fits the budget: the step runs as such
    program: list = field(default_factory=list)   # annotate(plan.schedule)
    split: int = 0                   # index of the head's forward (the first TURN entry) in program
    # parameters two or more branches (or a branch and the head) hold: Note [Hooks on a leaf several segments
    # read] in the executor
    shared_params: tuple = ()
    # the same join with its branches' boundaries that no backward saves kept as stages (Note [Two groupings of
    # unsaved boundaries] in the executor; None: no branch has such a boundary) and whether this face keeps them
    regrouped: "JoinEntry | None" = None
    unsaved_kept: bool = False
    head_writes: bool = False        # the head wrote a branch output in place when profiled: refused under a plan
    order_warning: str = ""          # Note [Draw order]: what the plan's order changes, warned at its first step
    order_warned: bool = False
    # Note [Draw order]: the plan's forward phase interleaves branches (running them branch by branch did not fit):
    # the first run of every stage is watched for draws the profile did not see (Note [Draws found at the first run]
    # in torch_exec/_util.py), which then follow the plan's order
    interleaved: bool = False


# ---------------------------------------------------------------------------- runtime
class JoinRuntime:
    """The held state of one join step: a :class:`~torch_exec.executor.Runtime` per branch (what
    :func:`~torch_exec.executor.interpret` runs a branch op on) and the head's tape (the ``TURN``)."""

    def __init__(self, entry: JoinEntry, inputs: list, input_requires_grad: list[bool], autocast: dict,
                 preserve_rng: bool, call_data: U.CallData | None = None):
        self.entry = entry
        self.call = U.HeldCallData(call_data)  # Note [Data bound to a call] in torch_exec/executor.py
        # Note [A step keeps its plan] in torch_exec/executor.py (each branch's runtime keeps its own part)
        self.forward_ops, self.backward_ops = entry.forward_ops, entry.backward_ops
        self.branches: list[Runtime] = []
        pos = 0
        for branch, (structure, count) in zip(entry.branches, entry.structures, strict=True):
            a0 = inputs[pos] if structure == "tensor" else tuple(inputs[pos:pos + count])
            self.branches.append(Runtime(branch, a0, list(input_requires_grad[pos:pos + count]), autocast,
                                         preserve_rng))
            self.branches[-1].watch_all = entry.interleaved  # Note [Draw order]
            pos += count
        self.head_tape = None    # [the head's segment inputs, its output tensors]
        self.head_leaves = None  # per branch: the segment input the head read
        self.head_grads = None   # gradients of the head's output tensors (set when the backward starts)
        self.output = None       # (the head's output, flattened, its pytree spec) after its forward

    def start_backward(self) -> None:
        for rt in self.branches:
            rt.start_backward()

    def snapshot(self) -> tuple:
        """What the forward left (each branch's :meth:`Runtime.snapshot`, the head's tape), for backwards
        that keep the graph (Note [Retained graphs] in torch_exec/executor.py)."""
        return [rt.snapshot() for rt in self.branches], list(self.head_tape), list(self.head_leaves)

    def restart(self, snapshot: tuple) -> None:
        """Start a backward again from :meth:`snapshot`'s state."""
        branches, head_tape, head_leaves = snapshot
        for rt, kept in zip(self.branches, branches, strict=True):
            rt.restart(kept)
        self.head_tape, self.head_leaves = list(head_tape), list(head_leaves)

    def leaves(self, snapshot: tuple) -> list:
        """The forward's segment leaves in :meth:`snapshot`'s state, the head's included."""
        branches, _, head_leaves = snapshot
        return [leaf for rt, kept in zip(self.branches, branches, strict=True) for leaf in rt.leaves(kept)] \
            + list(head_leaves)

    def turn(self, backward: int) -> None:
        """The ``TURN``: its forward half (arg 0) or its backward half (arg 1); Note [The head's graph]."""
        if backward:
            self._head_backward()
        else:
            self._head_forward()

    def _head_forward(self) -> None:
        leaves = [U.SegmentInput(rt.input_of(rt.n + 1), rt.rg0 if rt.n == 0 else state_requires_grad(rt.entry, rt.n))
                  for rt in self.branches]
        with torch.enable_grad():
            out = self.entry.head(*(leaf.state for leaf in leaves))
        if any(leaf.written() for leaf in leaves):  # on this call only: the profiled one did not (_profile_head)
            raise RuntimeError(_HEAD_WROTE_ERROR)
        flat, spec = tree_flatten(out)
        del out
        outs = tuple(t for t in flat if isinstance(t, torch.Tensor))
        if not outs:
            raise TypeError("CheckpointedJoin: the head returned no tensor; it must return a tensor (e.g. the loss) "
                            "or a structure holding tensors")
        self.output = (flat, spec)
        self.head_leaves = leaves
        self.head_tape = [leaves, outs]

    def _head_backward(self) -> None:
        tape, leaves = self.head_tape, self.head_leaves
        self.head_tape = self.head_leaves = None
        _backward_segment(tape, self.head_grads)  # empties both: no reference left here
        self.head_grads = None
        for rt, leaf in zip(self.branches, leaves, strict=True):
            rt.grads[rt.n] = leaf.take_grads()
        del tape, leaves

    def input_grads(self) -> list:
        """The gradient of every branch input (flat, in input order); checks that nothing is left."""
        out = []
        for beta, rt in enumerate(self.branches):
            grads = rt.grads.pop(0)
            if set(rt.acts) - {0} or rt.tapes or rt.grads:
                raise RuntimeError(f"internal error: the join schedule left state behind in branch {beta}")
            rt.acts.clear()
            out += [g if rg else None for g, rg in zip(grads, rt.rg0, strict=True)]
        return out


class _JoinFunction(torch.autograd.Function):
    """forward: the forward phase and the head's forward, returns the head's output tensors (detached);
    backward: the head's backward, then the backward phase; returns the gradients of the branch inputs.
    Note [The head's graph]. ``tap`` is the parameter tap's output (or an empty leaf requiring grad where
    no parameter is routed): the backward runs even when no input needs a gradient, and a call naming
    parameters reaches it."""

    @staticmethod
    def forward(ctx, args, tap, *inputs):
        entry, preserve_rng, box, meter, tap_args, call_data = args
        ctx.meter = meter
        ctx.tap = tap_args
        mark_parameters(ctx)
        ctx.snapshot = None
        ctx.set_materialize_grads(False)
        rt = JoinRuntime(entry, [t.detach() for t in inputs], [t.requires_grad for t in inputs],
                         U.autocast_state(), preserve_rng, call_data)
        # Note [Python's and NumPy's generators] in torch_exec/_util.py
        host = U.host_rng_mark() if any(any(b.recomputed) for b in rt.branches) else None
        interpret(rt.forward_ops, rt)
        refuse_host_draws(host, "CheckpointedJoin")
        found = [(b.entry, b.found, f"branch {beta}'s ") for beta, b in enumerate(rt.branches)]
        report_draws_found(found, "CheckpointedJoin")
        if entry.interleaved and any(f for _, f, _ in found):  # Note [Draw order]: the plan's order, from this step
            warnings.warn("CheckpointedJoin: stages found drawing random numbers run in a forward phase that "
                          "interleaves branches (running it branch by branch did not fit the budget): their draws "
                          "follow the plan's order, not plain autograd's (Note [Draw order] in torch_exec/join.py)",
                          JoinOrderWarning, stacklevel=3)
        IN_FLIGHT.add(rt)
        flat, spec = rt.output
        rt.output = None
        box.append(([_TENSOR if isinstance(v, torch.Tensor) else v for v in flat], spec))
        outs = [t for t in flat if isinstance(t, torch.Tensor)]
        del flat
        ctx.rt = rt
        ctx.save_for_backward(*inputs)
        return _detached_results(ctx, outs, grad_only=True)

    @staticmethod
    def backward(ctx, *grad_outputs):
        # Every refusal comes first, before any state is consumed or any .grad touched.
        rt = _backward_runtime(ctx, _DOUBLE_BACKWARD_ERROR, _TWICE_ERROR)
        ctx.saved_tensors  # noqa: B018 - raises if the caller modified an input in place since forward
        kept = kept_graph_leaves(ctx, rt)  # retain_graph=True: as the chain's
        # autograd.grad or backward(inputs=...): as the chain's (Note [Autograd calls that name tensors])
        mode = _SegmentMode.of(ctx.tap, not torch.autograd._is_checkpoint_valid(),
                               None if kept is None else {id(leaf) for leaf in kept}, ctx.meter)
        rt.start_backward()
        rt.head_grads = list(grad_outputs)
        del grad_outputs
        interpret_backward(rt.backward_ops, rt, mode, ctx.tap)
        IN_FLIGHT.discard(rt)
        for leaf in kept or ():  # the forward's segment leaves serve again: drop the gradients they were given
            leaf.box.clear()
        grads = rt.input_grads()
        del rt, kept
        if ctx.meter is not None:
            ctx.meter.end()
        return (None, None, *grads)


# ---------------------------------------------------------------------------- the module
def _is_empty(stages) -> bool:
    if stages is None:
        return True
    if isinstance(stages, (list, tuple, nn.Sequential, nn.ModuleList)):
        return len(stages) == 0
    return False


def _device_type(inputs) -> str:
    """The device type of the join's inputs (their first tensor's)."""
    return next(t for x in inputs for t in U.tensors(x)).device.type


def _order_sensitive(branches) -> list[set]:
    """Note [Draw order]: per branch, the stages whose order against other branches' stages changes what the step
    computes: those that draw random numbers (one stream for every branch), and those whose forward writes a buffer
    that a stage of another branch writes too (a module shared by branches: Siamese). A tower's own BatchNorm is
    not: its statistics come out the same in any branch order (it was counted, and the join warned and ran a slower
    face for it: a review, bench/repros/rv19e_join_order_warning_unshared_buffers.py)."""
    written = [{} if isinstance(b, types.SimpleNamespace) else
               {s: {id(t) for t in U.buffers_of(b.group_modules[s - 1])} for s in range(1, b.chain.n + 1)
                if b.buffer_writes[s]} for b in branches]
    owners: dict[int, set] = {}
    for beta, stages in enumerate(written):
        for ids in stages.values():
            for i in ids:
                owners.setdefault(i, set()).add(beta)
    shared = {i for i, betas in owners.items() if len(betas) > 1}
    return [set() if isinstance(b, types.SimpleNamespace) else
            {s for s in range(1, b.chain.n + 1) if b.rng[s] or written[beta].get(s, set()) & shared}
            for beta, b in enumerate(branches)]


def _writes_its_input(branch) -> bool:
    """Whether a branch's first stages wrote its input in place when profiled: the first stage, or a later one
    through the views of it the stages before passed on (the profile's ``writes_input``; a profile without it:
    whenever the executor clones the input, views included). A view alone (``nn.Flatten``) writes nothing: it was
    refused too (a review: bench/repros/rv12_diff_join_view_first_stage_refused.py)."""
    if not getattr(branch, "clone_input", False):
        return False
    for stage in branch.profile["stages"]:  # a view, then a stage writing through it (a review: rv12c_diff_*)
        if stage.get("writes_input", True):
            return True
        if not (stage.get("aliases") or stage["x"] == 0):  # new storage: what follows writes no longer the input
            return False
    return False


def _refuse_shared_input_written(entry: JoinEntry, inputs) -> None:
    """One tensor fed to several branches (``join(h, h)``, or to an empty branch the head reads) where a branch's
    first stage writes its input in place (``nn.ReLU(inplace=True)``): plain autograd lets the other branches and
    the head read what that stage wrote, while a branch under a plan works on a copy of its input (the executor's
    ``clone_input``: a recomputation must start from the input as it was), so the join would train another
    function than plain autograd, silently (a review: bench/repros/rv12_join_shared_input_inplace_first_stage.py,
    loss 3.962 against 4.044). Refused before the step runs, naming the branches and the remedy."""
    writers = [beta for beta, b in enumerate(entry.branches) if _writes_its_input(b)]
    if not writers:
        return
    owners: dict = {}
    for beta, x in enumerate(inputs):
        for key in {U.storage_key(t) for t in U.tensors(x)} - {None}:
            owners.setdefault(key, []).append(beta)
    for beta in writers:
        for key in {U.storage_key(t) for t in U.tensors(inputs[beta])} - {None}:
            others = [o for o in owners[key] if o != beta]
            if others:
                raise ValueError(
                    f"CheckpointedJoin: branch {beta}'s first stage writes its input in place, and the same tensor "
                    f"is the input of branch(es) {others} too: plain autograd would let them read what it wrote, "
                    f"a branch under a plan works on a copy of its input. Make that stage out of place (e.g. "
                    f"nn.ReLU(inplace=False)), or give branch {beta} its own copy (join(h.clone(), h, ...)), which "
                    f"is what the plan computes")


def _structure(x, beta: int):
    if isinstance(x, torch.Tensor):
        return ("tensor", 1)
    if isinstance(x, (tuple, list)) and x and all(isinstance(t, torch.Tensor) for t in x):
        return ("tuple", len(x))
    raise TypeError(f"CheckpointedJoin: the input of branch {beta} is a {type(x).__name__}; each branch takes a "
                    f"tensor or a tuple of tensors")


def _rebuild(flat, structures):
    out, pos = [], 0
    for structure, count in structures:
        out.append(flat[pos] if structure == "tensor" else tuple(flat[pos:pos + count]))
        pos += count
    return out


class CheckpointedJoin(_PlannedModule):
    """k branches of stages meeting at a head, trained under a memory budget with the join DP's plan.

    ``branches``: a list of k >= 2 branches, each an ``nn.Sequential`` or a list of modules/callables (as
    :class:`~torch_exec.CheckpointedSequential` takes), or an empty list/``None`` for an empty branch
    (its input goes to the head directly). The same module objects may appear in several branches
    (Siamese: shared weights, their gradients accumulate from every branch, as in plain autograd).
    ``head``: a module or callable taking the k branch outputs, returning a tensor (the loss) or any
    structure of tensors. Call the module with one input per branch (a tensor or a tuple of tensors):
    ``loss = join(x_a, x_b); loss.backward()``.

    ``budget``: bytes, a string such as ``"6GiB"``, or a percentage such as ``"50%"`` of plain
    autograd's step peak, measured when profiling each input signature (:meth:`plain_peak_bytes_for`);
    it counts everything but the branch inputs (parameters, their gradients and the optimizer state are
    not counted either). ``None`` runs plain autograd.
    ``bucket``: memory granularity of the join DP (default budget / 1024); ``backend``: the join DP's
    backend (``"auto"``, ``"cpu"``, ``"cuda"``: :func:`gpusolve.join.solve_join`). ``schedule_fn(net) -> schedule
    or JoinPolicy`` replaces the solver (tests, baselines). ``profile_passes``, ``profile_warmup``,
    ``profile_isolated``, ``preserve_rng_state``, ``network``, ``measure_steps``: as for :class:`~torch_exec.CheckpointedSequential`
    (:meth:`measure_memory` and :meth:`memory_report` too).

    The first call with a new input signature profiles the branches and the head and solves (or call
    :meth:`prepare`); plans are cached per signature. A budget below the join's minimum raises
    :class:`gpusolve.InfeasibleBudgetError` naming the minimum. See the module docstring for the design
    and its limitations.
    """

    def __init__(self, branches, head, budget="6GiB", bucket=None, backend: str = "auto", *, profile_passes: int = 3,
                 profile_warmup: int = 1, schedule_fn=None, preserve_rng_state: bool = True,
                 network: str | None = None, measure_steps: int = 3, profile_isolated: bool | None = None):
        super().__init__()
        if isinstance(branches, (nn.Sequential, torch.Tensor)) or not isinstance(branches, (list, tuple,
                                                                                             nn.ModuleList)):
            raise TypeError(f"CheckpointedJoin: branches must be a list of k >= 2 branches (each a list of stages or "
                            f"an nn.Sequential), got {type(branches).__name__}")
        branches = list(branches)
        if len(branches) < 2:
            raise ValueError(f"CheckpointedJoin needs k >= 2 branches, got {len(branches)}; for a single chain use "
                             f"CheckpointedSequential")
        if not callable(head):
            raise TypeError(f"CheckpointedJoin: head must be a module or a callable, got {type(head).__name__}")
        self.empty = [_is_empty(stages) for stages in branches]
        if all(self.empty):
            raise ValueError("CheckpointedJoin: every branch is empty; at least one branch needs stages")
        # Each non-empty branch is a CheckpointedSequential with no budget: its stage list, checks of
        # callable stages, profiling and stage groups are the chain executor's (never its plan).
        self.branches = nn.ModuleList([
            nn.Identity() if empty else CheckpointedSequential(stages, budget=None, profile_passes=profile_passes,
                                                               profile_warmup=profile_warmup,
                                                               preserve_rng_state=preserve_rng_state, network=network,
                                                               profile_isolated=profile_isolated)
            for stages, empty in zip(branches, self.empty, strict=True)])
        if isinstance(head, nn.Module):
            self.head = head
        else:
            visible = [m for m in self.branches]
            hidden = U.hidden_state(head, visible)
            if hidden:
                raise ValueError(f"CheckpointedJoin: the head is a plain callable that uses state the wrapper cannot "
                                 f"see: {'; '.join(hidden)}. Pass the head as an nn.Module")
            self._head_fn = head
        self._set_solver(budget, bucket, backend, profile_passes, profile_warmup, schedule_fn, preserve_rng_state,
                         network, measure_steps, profile_isolated, backends=JOIN_BACKENDS)

    @property
    def k(self) -> int:
        return len(self.branches)

    @property
    def _branch_fns(self) -> list:
        """The stages of every branch, in order (the callables, modules among them)."""
        return [fn for seq, empty in zip(self.branches, self.empty, strict=True) if not empty for fn in seq._fns]

    @property
    def head_fn(self):
        return self._modules["head"] if "head" in self._modules else self._head_fn

    # ------------------------------------------------------------ plans
    @property
    def last_profile(self) -> list | None:
        """The measured profiles (``measured-chain/1``) of the latest input signature's branches, in order (None for
        a branch of no stages); None before the first call. ``gpusolve join`` reads them, saved with
        :func:`torch_exec.save_profile`, with the head's time from ``net.turn`` (``--turn-ms``)."""
        if self._last is None:
            return None
        return [None if isinstance(b, types.SimpleNamespace) else b.profile for b in self._last.branches]

    @property
    def net(self) -> JoinNet | None:
        """The byte model of the latest call's join, as the executor runs it."""
        return None if self._last is None else self._last.net

    @property
    def min_budget_bytes(self) -> int | None:
        """The least budget under which the latest input signature can run (bytes): the join model's
        (never below ``floor_bytes``), or plain autograd's measured peak where that is lower (it runs
        there), as for CheckpointedSequential."""
        if self._last is None:
            return None
        # Note [Two groupings of unsaved boundaries]: a given schedule is over the profile's own grouping
        faces = faces_of(self._last) if self.schedule_fn is None else (merged_face(self._last),)
        model = min(max(min_peak_join(face.net).min_bytes, face.floor_bytes) for face in faces)
        if self._last.plain_peak_bytes is None:
            return model
        return min(model, self.plain_peak_bytes_for(self._last))

    def prepare(self, *inputs) -> JoinPlan:
        """Profile and solve for inputs like these now (otherwise the first call does it)."""
        U.refuse_inference_mode("CheckpointedJoin")
        self._follow_replaced_stages()
        self._check_inputs(inputs)
        self._last = self._entry(inputs)
        return self._last.plan

    def _key(self, inputs, walked: list | None = None):
        flat = [t for x in inputs for t in U.tensors(x)]
        return (tuple((tuple(t.shape), t.dtype, t.device, t.requires_grad) for t in flat),
                tuple(_structure(x, b) for b, x in enumerate(inputs)), self._state_key(walked), U.autocast_key())

    def _build(self, inputs) -> JoinEntry:
        U.refuse_meta("CheckpointedJoin", [t for x in inputs for t in U.tensors(x)], self)
        structures = [_structure(x, b) for b, x in enumerate(inputs)]
        branch_entries, exec_chains, plain_chains = [], [], []
        for x, seq, empty in zip(inputs, self.branches, self.empty, strict=True):
            sample = U.make_leaf(x, [t.requires_grad for t in U.tensors(x)])
            if empty:
                grad = sum(t.numel() * t.element_size() for t in U.tensors(x) if t.requires_grad
                           and U.differentiable(t))
                branch = EmptyBranch(input_bytes=U.state_nbytes(x), input_grad_bytes=int(grad))
                branch_entries.append(types.SimpleNamespace(chain=branch, forward_ops=[], backward_ops=[],
                                                            recomputed=[False]))  # runs no stage
                exec_chains.append(branch)
                plain_chains.append(branch)
                continue
            entry = self._branch_entry(seq, sample)  # profiles the branch (the join plans it: _plan_entry)
            branch_entries.append(entry)
            exec_chains.append(entry.exec_chain)
            plain_chains.append(entry.plain_chain)
        turn_grads = sum(int(chain.padded()["grad_bytes"][-1]) for chain in exec_chains)
        head_profile, turn, out_grad = self._profile_head(inputs, turn_grads)
        reserved = out_grad + self._reserved_beside()  # as for CheckpointedSequential
        # the executor's join also reserves the allocator's one remainder for the whole step (executor_chain);
        # plain autograd's net, like a chain's plain chain, does not
        remainder = U.allocator_reserve_bytes(_device_type(inputs))
        entry = JoinEntry(plan=None, net=JoinNet(exec_chains, turn, reserved + remainder),
                          plain_net=JoinNet(plain_chains, turn, reserved), branches=branch_entries,
                          structures=structures, head=self.head_fn, head_profile=head_profile,
                          plain_peak_bytes=self._plain_step_peak(inputs), held_bytes=int(self.held_bytes),
                          beside_bytes=int(self.beside_bytes), floor_bytes=int(self.floor_bytes),
                          shared_params=self._shared_params(branch_entries),
                          head_writes=bool(head_profile["stages"][0].get("writes_input")))
        if any(not isinstance(b, types.SimpleNamespace) and b.plain_chain.provenance.get("merged_unsaved", 0) > 0
               for b in branch_entries):  # Note [Two groupings of unsaved boundaries], per branch, from its profile
            kept = [b if isinstance(b, types.SimpleNamespace) else
                    self._branch_entry(seq, U.make_leaf(x, [t.requires_grad for t in U.tensors(x)]), b.profile)
                    for x, seq, b in zip(inputs, self.branches, branch_entries, strict=True)]
            entry.regrouped = replace(entry, net=JoinNet([b.chain for b in kept], turn, reserved + remainder),
                                      plain_net=JoinNet([b.chain if isinstance(b, types.SimpleNamespace) else b.plain_chain
                                                         for b in kept], turn, reserved),
                                      branches=kept, shared_params=self._shared_params(kept), regrouped=entry,
                                      unsaved_kept=True)
        return entry

    def _branch_entry(self, seq: CheckpointedSequential, sample, data: dict | None = None):
        """A branch's executor entry: profiled (``data`` None) over the profile's own grouping, or from ``data`` with
        the boundaries no backward saves kept as stages; its chain as the join's executor runs it."""
        entry = seq._build(sample, data, merge_unsaved=data is None, regroup=False)
        entry.exec_chain = executor_chain(entry.plain_chain, entry.rng, sample, self.preserve_rng_state,
                                          entry.group_modules, output_grad_held=False, allocator=False,
                                          buffer_writes=entry.buffer_writes, generators=entry.generators,
                                          rng_bytes=entry.rng_bytes)
        entry.chain = entry.exec_chain
        return entry

    def _shared_params(self, branch_entries) -> tuple:
        """Parameters that two or more stages of the branches (or a stage and the head) read."""
        return U.params_read_by_several([mods for b in branch_entries if not isinstance(b, types.SimpleNamespace)
                                         for mods in b.group_modules] + [U.modules_of([self.head_fn])])

    def _profile_head(self, inputs, turn_grads: int):
        """The head as a one-stage chain over the k branch outputs (flattened): its profile, the
        :class:`Turn` and the bytes reserved for the whole step: the head's output, which the caller
        may hold, and its gradient, which the engine holds (Note [The caller holds a_N]).
        ``turn_grads``: the bytes of the k branch-output gradients as the join model counts them (the
        head's measured backward peak, which includes them, is what the turn may hold at most)."""
        snapshot = U.ModelSnapshot(*U.stage_state(self._branch_fns))
        try:  # sample branch outputs: their shapes are what the head reads
            with torch.no_grad():
                outs = [U.detach(x) if empty else seq._plain(U.clone(U.detach(x)))
                        for x, seq, empty in zip(inputs, self.branches, self.empty, strict=True)]
        finally:
            snapshot.restore()
        leaves = [U.make_leaf(out, [t.requires_grad for t in U.tensors(x)] if empty else True)
                  for out, x, empty in zip(outs, inputs, self.empty, strict=True)]
        out_structures = [("tensor", 1) if isinstance(o, torch.Tensor) else ("tuple", len(U.tensors(o)))
                          for o in outs]
        head = self.head_fn

        def head_stage(flat):
            flat = (flat,) if isinstance(flat, torch.Tensor) else flat
            result = head(*_rebuild(list(flat), out_structures))
            return tuple(t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor))
        sample = tuple(t for leaf in leaves for t in U.tensors(leaf))
        modules = [head] if isinstance(head, nn.Module) else []
        with _standin_params([self]):  # Note [DistributedDataParallel] in the executor
            data = profile_dict([head_stage], sample, passes=self.profile_passes, warmup=self.profile_warmup,
                                network=f"{self.network or 'join'}:head", names=["head"], modules=modules,
                                isolated=self.profile_isolated, refuse_host_draws=False)  # never recomputed
        head_chain = chain_from_profile(data, fuse_aliasing=False)
        arr = head_chain.padded()
        # The caller may hold the head's output through the backward (Note [The caller holds a_N] in
        # the executor): reserved with its gradient, and out of the head's tape.
        held = int(data["stages"][-1].get("held_nbytes", arr["act_bytes"][1]))
        tape, bwd_tape = output_out_of_tape(arr["tape_bytes"][1], arr["bwd_tape_bytes"][1], head_chain.made_bytes(1))
        turn = Turn(t_fwd=max(0.0, float(arr["t_fwd"][1])), t_bwd=max(0.0, float(arr["t_bwd"][1])), tape_bytes=tape,
                    fwd_extra=int(arr["fwd_grad_extra"][1]), name="head",
                    # the head's backward at its worst: what it keeps of its tape, the k input gradients
                    # (counted by the join model from the branches) and its workspace
                    bwd_extra=max(0, bwd_tape - tape + int(arr["bwd_extra"][1]) + int(arr["grad_bytes"][0])
                                  - turn_grads))
        return data, turn, int(arr["grad_bytes"][1]) + held

    def _plain_step_peak(self, inputs) -> int | None:
        """Plain autograd's step on inputs like these, measured with the device's allocator: the branches
        and the head as plain autograd runs them, the caller holding the head's output through the
        backward and seeding a gradient for each of its tensors (the chain profiler's plain step,
        :meth:`torch_exec.profiler.Profiler.metered_plain_step`, and its rules: the inputs held and not
        counted, parameter gradients allocated before). Parameters, buffers, gradients and RNG state
        are left as they were. None when profiling stage by stage (``profile_isolated``), or when the
        step runs out of CUDA memory with ``profile_isolated=None`` (a FallbackWarning says so): Note
        [Profiling stage by stage] in torch_exec/profiler.py."""
        if self.profile_isolated:
            return None
        try:
            return self._metered_plain_step(inputs)
        except torch.OutOfMemoryError as err:
            if self.profile_isolated is not None:
                raise
            reason = str(err).splitlines()[0][:160]
        torch.cuda.empty_cache()
        warnings.warn(f"CheckpointedJoin: plain autograd's step does not fit ({reason}): its peak is the model's "
                      f"store-all peak (Note [Profiling stage by stage] in torch_exec/profiler.py)", FallbackWarning,
                      stacklevel=5)
        return None

    def _metered_plain_step(self, inputs) -> int:
        fns = [fn for seq, empty in zip(self.branches, self.empty, strict=True) if not empty for fn in seq._fns]
        snapshot = U.ModelSnapshot(*U.stage_state(fns + [self.head_fn]))
        device = U.tensors(inputs[0])[0].device
        try:
            with _standin_params([self]):  # Note [DistributedDataParallel] in the executor
                with torch.no_grad():
                    for p in self.parameters():
                        if p.requires_grad:
                            p.grad = torch.zeros_like(p)
                held = [U.clone(U.make_leaf(x, [t.requires_grad for t in U.tensors(x)])) for x in inputs]
                with MemoryMeter(device) as meter:
                    start = meter.mark()
                    with torch.enable_grad():
                        out = self._plain(held)
                    final = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
                    del out
                    if final:
                        torch.autograd.backward(final, [torch.ones_like(t) for t in final])
                    del final
                    end = meter.mark()
                del held
            return int(meter.between(start, end).peak)
        finally:
            snapshot.restore()

    @staticmethod
    def plain_peak_bytes_for(entry: JoinEntry) -> int:
        """Plain autograd's step peak for one signature: measured when it was profiled, with what the
        caller holds or makes beside the join (``held_bytes``, ``beside_bytes``); the model's store-all
        peak where none was measured (which counts them as reserved); never below ``floor_bytes``."""
        if entry.plain_peak_bytes is None:  # the profile's own grouping's: exact (the other face over-counts; a
            # review: bench/repros/rv19b_join_kept_face_percent_of_overcount.py)
            return max(store_all_join_peak_bytes(merged_face(entry).plain_net), entry.floor_bytes)
        return _with_beside(entry, entry.plain_peak_bytes)

    def budget_bytes_for(self, entry: JoinEntry) -> int | None:
        """The byte budget of one signature: bytes, or a percentage of plain autograd's step peak
        (:meth:`plain_peak_bytes_for`, measured when profiling, as for CheckpointedSequential)."""
        if self.budget is None:
            return None
        return parse_budget(self.budget, lambda: self.plain_peak_bytes_for(entry), "budget")

    def _plan_entry(self, entry: JoinEntry) -> JoinEntry:
        """Plan ``entry`` and return the face that runs (``_PlannedModule._entry`` keeps it): where a branch has
        boundaries that no backward saves, the join over the profile's own grouping and over the branches with those
        boundaries kept, as :meth:`CheckpointedSequential._plan_entry` plans a chain's (Note [Two groupings of
        unsaved boundaries] in the executor: its rules, the same). A join of transformer layers was one stage per
        branch, and its least budget plain autograd's peak (review rv19:
        bench/repros/rv19_join_branch_unsaved_boundaries_merged.py)."""
        merged = merged_face(entry)
        kept = merged.regrouped
        if kept is None or self.schedule_fn is not None:  # a given schedule is over the profile's own grouping
            return self._plan_face(merged)
        # a face whose plan keeps plain autograd's draw order first (a review: rv19b_join_face_choice_...)
        return plan_faces(merged, kept, lambda face, fallback: self._plan_face(face, fallback=fallback),
                          keeps=lambda face: not face.order_warning)

    def _replan_draws(self, entry: JoinEntry) -> JoinEntry:
        """A branch's stage was found drawing random numbers that its profile did not see (Note [Draws found at the
        first run] in torch_exec/_util.py): on both faces, the branches' flags from their profiles (shared by the
        faces), what their RNG records add reserved, and the join planned again, its draw order with them (Note
        [Draw order])."""
        faces = faces_of(entry)
        for beta in range(len(entry.branches)):
            branches = [face.branches[beta] for face in faces]
            if isinstance(branches[0], types.SimpleNamespace):
                continue
            reserve = max(b.rng_reserve for b in branches)
            for b in branches:
                b.rng, b.rng_bytes = rng_flags(b.profile, b.plain_chain)
                b.rng_reserve = reserve
                if b.rng_reserve != b.rng_applied:
                    b.exec_chain = b.chain = replace(b.exec_chain, reserved_bytes=b.exec_chain.reserved_bytes
                                                     + b.rng_reserve - b.rng_applied)
                    b.rng_applied = b.rng_reserve
        for face in faces:
            face.net = JoinNet([b.chain for b in face.branches], face.net.turn, face.net.reserved_bytes)
        planned = self._plan_entry(entry)  # one that no longer fits raises, and the next call tries again
        for face in faces:
            for b in face.branches:
                if not isinstance(b, types.SimpleNamespace):
                    b.draws_new = False
        return planned

    def _plan_face(self, entry: JoinEntry, fallback: bool = True) -> JoinEntry:
        """Plan one face of a signature's entry and return it. ``fallback``: a percentage budget below its least may
        fall back to another signature's budget (:meth:`_percent_ceiling`)."""
        net = entry.net
        budget = self.budget_bytes_for(entry)
        if self.schedule_fn is not None:
            schedule = self.schedule_fn(net)
            policy = schedule if isinstance(schedule, tuple) else None
            if policy is not None:
                schedule = join_policy_to_schedule(net, policy)
            schedule = list(schedule)
            sim = simulate_join(net, schedule)
            budget = sim.peak_bytes if budget is None else budget
            plan = JoinPlan(sim.peak_bytes <= budget, sim.time_ms, sim.peak_bytes, budget, 0, 0, 0.0,
                            Curve(np.zeros(0, dtype=np.int64), np.zeros(0)), schedule, policy,
                            net.store_all_time_ms(), 0, decided_by="schedule_fn", notes=["schedule given, not solved"],
                            net=net)
        elif budget is None or (entry.plain_peak_bytes is not None and self.plain_peak_bytes_for(entry) <= budget):
            # Plain autograd fits (as measured): run it as such, as CheckpointedSequential does. Not
            # measured (profiled stage by stage): the solver's store-all schedule runs instead, whose
            # peak the model predicts (plain autograd's can be above the model's store-all peak).
            peak = self.plain_peak_bytes_for(entry)
            budget = peak if budget is None else budget
            plain = store_all(entry.plain_net)
            plan = JoinPlan(True, plain.time_ms, peak, budget, 0, 0, 0.0, Curve(np.zeros(0, dtype=np.int64), np.zeros(0)),
                            plain.schedule, None, entry.plain_net.store_all_time_ms(), 0, decided_by="plain autograd",
                            notes=[f"plain autograd fits the budget (its peak {peak} B, measured when profiling); "
                                   f"running the branches and the head as plain autograd"], net=entry.plain_net)
        else:
            try:
                if budget < entry.floor_bytes:
                    least = max(entry.floor_bytes, min_peak_join(net).min_bytes)
                    raise InfeasibleBudgetError(below_floor_message(budget, entry.floor_bytes, least), least)
                plan = solve_join(net.branches, net.turn, budget, bucket=self.bucket, reserved_bytes=net.reserved_bytes,
                                  backend=self.backend)
            except InfeasibleBudgetError as err:
                ceiling = self._percent_ceiling(entry, err.min_bytes) if fallback else None
                plain_least = None if entry.plain_peak_bytes is None else self.plain_peak_bytes_for(entry)
                if ceiling is None and plain_least is not None and plain_least < err.min_bytes:
                    err = InfeasibleBudgetError(below_plain_message(budget, plain_least, err.min_bytes), plain_least)
                if ceiling is None:
                    message = f"CheckpointedJoin: {err}"
                    if isinstance(self.budget, str):
                        message += _needs_at_least(err, self.budget, self.plain_peak_bytes_for(entry))
                    raise InfeasibleBudgetError(message, err.min_bytes) from None
                note = self._below_least(entry, budget, err.min_bytes, ceiling)
                budget = ceiling
                plan = solve_join(net.branches, net.turn, budget, bucket=self.bucket,
                                  reserved_bytes=net.reserved_bytes, backend=self.backend)
                plan.notes.append(note)
        if isinstance(self.budget, str):  # a percentage: say what it resolved to
            what = "measured when profiling" if entry.plain_peak_bytes is not None else NOT_MEASURED
            plan.notes.insert(0, f"budget {self.budget} of plain autograd's peak {self.plain_peak_bytes_for(entry)} B "
                                 f"({what}): {budget} B")
        entry.plain = plan.decided_by == "plain autograd"
        entry.order_warning, entry.order_warned, entry.interleaved = "", False, False
        if not entry.plain:
            self._draw_order(entry, plan)
        # each branch's tape runs split between two readers of a leaf (Note [Shared leaves split tape runs] in
        # torch_exec/executor.py); branches never share a run
        breaks = frozenset((beta, s) for beta, branch in enumerate(entry.branches)
                           for _, s in getattr(branch, "breaks", ()))
        program = annotate(plan.schedule, breaks)
        entry.split = next(i for i, (code, _, arg, _) in enumerate(program) if code == TURN and arg == 0)
        entry.program = program
        turn_at = next(i for i, op in enumerate(plan.schedule) if op.kind is OpKind.TURN)
        for beta, branch in enumerate(entry.branches):
            if isinstance(branch, types.SimpleNamespace):
                continue
            again = {op.stage for op in plan.schedule[turn_at + 1:]
                     if op.branch == beta and op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE)}
            branch.recomputed = [s in again for s in range(branch.chain.n + 1)]
        entry.plan = plan
        return entry

    def _draw_order(self, entry: JoinEntry, plan: JoinPlan) -> None:
        """Note [Draw order]: run the forward phase in branch order when stages draw random numbers or
        update buffers in more than one branch and the re-ordered schedule still fits the budget."""
        sensitive = _order_sensitive(entry.branches)
        turn_at = next(i for i, op in enumerate(plan.schedule) if op.kind is OpKind.TURN)
        forward = plan.schedule[:turn_at]
        everything = [op.branch for op in forward if op.branch is not None]
        if everything == sorted(everything):
            return
        # Whether a stage draws is known from the profile's call only (a drop rate raised from 0, a draw that
        # depends on the data: Note [Draws found at the first run] in torch_exec/_util.py): the forward phase runs
        # branch by branch wherever that fits, drawing stages known or not
        reordered = (sorted(forward, key=lambda op: -1 if op.branch is None else op.branch)
                     + list(plan.schedule[turn_at:]))
        sim = simulate_join(entry.net, reordered)
        order = [op.branch for op in forward if op.stage in sensitive[op.branch]]
        if sim.peak_bytes <= plan.budget_bytes:
            plan.schedule = reordered
            plan.predicted_peak_bytes = sim.peak_bytes
            what = "random numbers and shared buffers follow" if order else "random numbers any stage draws follow"
            plan.notes.append(f"forward phase run branch by branch so that {what} plain autograd's order (peak "
                              f"{sim.peak_bytes} B, within the budget)")
            return
        entry.interleaved = True
        if order == sorted(order):
            return
        message = (f"the plan's forward phase interleaves branches whose stages draw random numbers or update "
                   f"buffers, and running it branch by branch would peak at {sim.peak_bytes} B, above the budget "
                   f"{plan.budget_bytes} B: dropout masks (and statistics of BatchNorm modules shared by branches) "
                   f"follow the plan's order, not plain autograd's (Note [Draw order] in torch_exec/join.py)")
        plan.notes.append(message)
        entry.order_warning = message  # warned at the plan's first step (_scheduled): a plan a refused replan
        # discards, or the other face's, warns nothing (a review: bench/repros/rv19e_join_refused_replan_warns_order.py)

    # ------------------------------------------------------------ forward
    def _check_inputs(self, inputs) -> None:
        if len(inputs) != self.k:
            raise TypeError(f"CheckpointedJoin has {self.k} branches: call it with one input per branch "
                            f"(join(x_0, ..., x_{self.k - 1})), got {len(inputs)} input(s)")
        for beta, x in enumerate(inputs):
            _structure(x, beta)

    def _plain(self, inputs):
        outs = [x if empty else seq._plain(x) for x, seq, empty in zip(inputs, self.branches, self.empty, strict=True)]
        return self.head_fn(*outs)

    def _follow_replaced_stages(self) -> None:
        """A branch's stage replaced after wrapping drops every plan (Note [Stages replaced after wrapping] in
        torch_exec/executor.py)."""
        if any([seq._follow_replaced_stages() for seq, empty in zip(self.branches, self.empty, strict=True)
                if not empty]):
            self._entries.clear()
            self._last = None

    def forward(self, *inputs):
        self._follow_replaced_stages()
        self._check_inputs(inputs)
        if self._runs_plain() or not torch.is_grad_enabled() or runs_as_a_stage():
            return self._plain(inputs)
        if U.nothing_requires_grad(inputs, self, self._branch_fns + [self.head_fn]):  # no backward comes (as a chain's)
            return U.ran_without_grad(self._plain(inputs), type(self).__name__)
        return self._scheduled(inputs)

    @_compiler_disable
    @U.without_caches  # Note [Autocast's cache] in the executor
    def _scheduled(self, inputs):
        """A step under a plan (never traced by torch.compile: Note [torch.compile] in the executor)."""
        walked = self._walk()  # Note [One walk of the model per call] in the executor
        entry = self._entry(inputs, walked)
        if any(getattr(b, "draws_new", False) for face in faces_of(entry) for b in face.branches):
            entry = self._entries[self._key(inputs, walked)] = self._replan_draws(entry)
        refuse_shared_hazards(() if entry.plain else entry.shared_params, "CheckpointedJoin")
        if not entry.plain:
            _refuse_shared_input_written(entry, inputs)
            if entry.head_writes:  # seen when profiling the head: refused before the step runs, the model as it was
                raise RuntimeError(_HEAD_WROTE_ERROR)  # (a review: bench/repros/rv19_join_head_inplace_*.py)
            if entry.order_warning and not entry.order_warned:  # Note [Draw order]: once per plan, as it runs
                entry.order_warned = True
                warnings.warn(f"CheckpointedJoin: {entry.order_warning}", JoinOrderWarning, stacklevel=3)
        U.settle_deferred_hooks()  # a backward that raised left hooks suspended
        self._last = entry
        flat = [t for x in inputs for t in U.tensors(x)]
        if self._begin_step(entry, flat[0].device):
            return self._plain_step(lambda: self._plain(inputs))
        # the parameters reach the Function through a tap: without it a call naming them (backward(inputs=[...]),
        # autograd.grad) skipped the step's backward and left them without gradients, silently
        tap, tap_args = self._parameter_tap(walked)
        box: list = []
        results = _JoinFunction.apply((entry, self.preserve_rng_state, box, self._meter, tap_args, self.call_data),
                                      tap, *flat)
        results = iter(results if isinstance(results, tuple) else (results,))
        leaves, spec = box.pop()
        return tree_unflatten([next(results) if v is _TENSOR else v for v in leaves], spec)

    def extra_repr(self) -> str:
        return f"k={self.k}, budget={self._budget_repr()}"


__all__ = ["CheckpointedJoin", "JoinEntry", "JoinOrderWarning", "JoinRuntime"]
