"""Run a gpusolve schedule on real PyTorch stages: :class:`CheckpointedSequential`.

The schedule IR is interpreted by ONE loop, :func:`interpret`, over ``plan.schedule``:

- ``FWD_NOGRAD(s, keep)``: under ``no_grad`` run fused stage s on a_{s-1} (a held checkpoint, the
  detached output of a tape, or the input a_0); hold the result as checkpoint a_s; drop a_{s-1}
  unless ``keep``.
- ``FWD_TAPE(s)``: make a_{s-1} a fresh leaf (``detach().requires_grad_()``) and run stage s under
  ``enable_grad``; hold (leaf, output) as the tape of s, independent of every other tape.
- ``BWD(s)``: ``torch.autograd.backward(output of tape s, held gradient of a_s)``: parameter ``.grad``
  accumulate as usual; the gradient of a_{s-1} is the leaf's ``.grad``. The tape is dropped.
- ``FREE(s)``: drop checkpoint a_s.

The autograd Function's ``forward`` interprets the ops up to and including the single
``FWD_TAPE(N)`` and returns a_N (detached from that tape); its ``backward`` receives the gradient
of a_N and interprets the rest (starting with ``BWD(N)``), returning the gradient of a_0.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from gpusolve.chain import Chain
from gpusolve.schedule import Op, OpKind, policy_to_schedule
from gpusolve.simulate import simulate, store_all_time_ms
from gpusolve.solve import Curve, Plan, solve
from gpusolve.units import parse_bytes

from . import _util as U
from .profiler import chain_from_profile, profile_dict


# ---------------------------------------------------------------------------- plan entries
def split_schedule(schedule: list[Op], n: int) -> int:
    """Index of the one ``FWD_TAPE(n)``; checks that it is followed by ``BWD(n)`` and that the ops
    before it run every stage exactly once, in order (so the first run of each stage is in forward).
    """
    at = [i for i, op in enumerate(schedule) if op.kind is OpKind.FWD_TAPE and op.stage == n]
    if len(at) != 1:
        raise ValueError(f"a schedule must hold exactly one FWD_TAPE({n}), found {len(at)}")
    idx = at[0]
    if idx + 1 >= len(schedule) or schedule[idx + 1] != Op(OpKind.BWD, n):
        raise ValueError(f"FWD_TAPE({n}) must be immediately followed by BWD({n})")
    stages = [op.stage for op in schedule[:idx + 1] if op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE)]
    if stages != list(range(1, n + 1)) or any(op.kind in (OpKind.BWD, OpKind.FREE) for op in schedule[:idx]):
        raise ValueError("the ops before FWD_TAPE(N) must be one forward of each stage 1..N in order")
    return idx


def plan_from_schedule(chain: Chain, schedule, budget=None) -> Plan:
    """A :class:`gpusolve.Plan` for a given schedule (or policy), with the simulator's figures.

    For baselines and tests: ``schedule`` is a list of ops or a policy tree over (0, N).
    """
    if not isinstance(schedule, list):
        schedule = policy_to_schedule(schedule, 0, chain.n)
    sim = simulate(chain, schedule)
    budget_bytes = sim.peak_bytes if budget is None else parse_bytes(budget, "budget")
    return Plan(feasible=True, predicted_time_ms=sim.time_ms, predicted_peak_bytes=sim.peak_bytes,
                budget_bytes=budget_bytes, bucket_bytes=0, buckets=0, backend="given", solve_seconds=0.0,
                curve=Curve(np.zeros(0, dtype=np.int64), np.zeros(0)), schedule=list(schedule),
                store_all_time_ms=store_all_time_ms(chain), notes=["schedule given, not solved"])


@dataclass
class Entry:
    """Everything one input signature needs: the profile, chain, plan and the fused stage groups."""

    profile: dict
    chain: Chain
    plan: Plan
    groups: list[list]              # callables of each chain stage (base first, then aliasing members)
    group_modules: list[list]       # modules of each chain stage (their buffers are protected)
    clone_input: bool               # stage 1 aliases a_0: clone a_0 before running it
    split: int                      # index of FWD_TAPE(N) in plan.schedule
    recomputed: set = field(default_factory=set)  # stages run again during backward

    @property
    def forward_ops(self):
        return self.plan.schedule[:self.split + 1]

    @property
    def backward_ops(self):
        return self.plan.schedule[self.split + 1:]


# ---------------------------------------------------------------------------- the interpreter
class Runtime:
    """The held state of one step: checkpoints, tapes, gradients, RNG states per stage."""

    def __init__(self, entry: Entry, a0, input_requires_grad: list[bool], autocast: dict, preserve_rng: bool):
        self.entry = entry
        self.n = entry.chain.n
        self.acts: dict = {0: a0}
        self.tapes: dict = {}
        self.grads: dict = {}
        self.rng: dict = {}
        self.ran: set = set()
        self.rg0 = input_requires_grad
        self.autocast = autocast
        self.preserve_rng = preserve_rng
        self.devices = U.cuda_devices(a0)
        self.in_backward = False

    def input_of(self, s: int):
        if s - 1 in self.tapes:
            return U.detach(self.tapes[s - 1][1])
        if s - 1 in self.acts:
            return self.acts[s - 1]
        raise RuntimeError(f"internal error: a_{s - 1} is not held when stage {s} runs")

    def run_stage(self, s: int, state):
        if s == 1 and self.entry.clone_input:
            state = U.clone(state)  # an in-place first stage must not overwrite the caller's input
        for fn in self.entry.groups[s - 1]:
            state = fn(state)
        return state

    @contextlib.contextmanager
    def replay(self, s: int):
        """First run of stage s in this step: record its RNG state (if it runs again). Later runs:
        same RNG state, recorded autocast, and the stage's buffers (BatchNorm statistics) restored."""
        if s not in self.ran:
            self.ran.add(s)
            if self.preserve_rng and s in self.entry.recomputed:
                self.rng[s] = U.RngState.capture(self.devices)
            yield
            return
        with contextlib.ExitStack() as stack:
            if self.preserve_rng and s in self.rng:
                stack.enter_context(torch.random.fork_rng(devices=self.devices, enabled=True))
                self.rng[s].restore()
            if self.in_backward:
                stack.enter_context(U.autocast_from(self.autocast))
            stack.enter_context(U.scratch_buffers(self.entry.group_modules[s - 1]))
            yield


def interpret(ops, rt: Runtime) -> None:
    """The one interpreter of the schedule IR (see the module docstring for each op).

    Every branch drops its local references before the next op, so that a tensor the schedule
    frees is really freed then (the memory model counts it gone).
    """
    for op in ops:
        s = op.stage
        if op.kind is OpKind.FWD_NOGRAD:
            inp = rt.input_of(s)
            with torch.no_grad(), rt.replay(s):
                rt.acts[s] = rt.run_stage(s, inp)
            del inp
            if not op.keep_input:
                del rt.acts[s - 1]
        elif op.kind is OpKind.FWD_TAPE:
            leaf = U.make_leaf(rt.input_of(s), rt.rg0 if s == 1 else True)
            with torch.enable_grad(), rt.replay(s):
                rt.tapes[s] = (leaf, rt.run_stage(s, leaf))
            del leaf
        elif op.kind is OpKind.BWD:
            leaf, out = rt.tapes.pop(s)
            grad = rt.grads.pop(s)
            pairs = [(t, g) for t, g in zip(U.tensors(out), _grad_list(grad, out))
                     if g is not None and t.requires_grad]
            del grad
            if pairs:
                with torch.enable_grad():
                    torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
            del pairs, out
            rt.grads[s - 1] = [t.grad if t.requires_grad else None for t in U.tensors(leaf)]
            del leaf
        elif op.kind is OpKind.FREE:
            del rt.acts[s]
        else:  # pragma: no cover - OpKind is closed
            raise ValueError(f"unknown op {op!r}")


def _grad_list(grad, out):
    if isinstance(grad, list):
        return grad
    return [grad] if isinstance(out, torch.Tensor) else list(grad)


class _ScheduleFunction(torch.autograd.Function):
    """forward: ops up to FWD_TAPE(N), returns a_N; backward: the remaining ops, returns grad of a_0."""

    @staticmethod
    def forward(ctx, runtime_args, dummy, *inputs):
        entry, structure, preserve_rng = runtime_args
        a0 = _rebuild(structure, [t.detach() for t in inputs])
        rt = Runtime(entry, a0, [t.requires_grad for t in inputs], U.autocast_state(), preserve_rng)
        interpret(entry.forward_ops, rt)
        out = rt.tapes[rt.n][1]
        ctx.rt = rt
        ctx.n_inputs = len(inputs)
        ctx.save_for_backward(*inputs)
        outs = U.tensors(out)
        ctx.out_is_tensor = isinstance(out, torch.Tensor)
        results = tuple(t.detach() for t in outs)
        nondiff = [r for r, t in zip(results, outs) if not U.differentiable(t)]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return results[0] if ctx.out_is_tensor else results

    @staticmethod
    def backward(ctx, *grad_outputs):
        rt = getattr(ctx, "rt", None)
        if rt is None:
            raise RuntimeError("CheckpointedSequential: backward ran twice through the same step "
                               "(retain_graph is not supported)")
        ctx.saved_tensors  # noqa: B018 - raises if the caller modified an input in place since forward
        ctx.rt = None
        rt.in_backward = True
        rt.grads[rt.n] = list(grad_outputs)
        del grad_outputs
        interpret(rt.entry.backward_ops, rt)
        grads = rt.grads.pop(0)
        rt.acts.clear()
        if rt.tapes or rt.acts or rt.grads:
            raise RuntimeError("internal error: the schedule left state behind")
        input_grads = [g if rg else None for g, rg in zip(grads, rt.rg0)]
        return (None, None, *input_grads)


def _rebuild(structure, flat):
    if structure == "tensor":
        return flat[0]
    return tuple(flat)


# ---------------------------------------------------------------------------- the module
class CheckpointedSequential(nn.Module):
    """A sequence of stages trained under a memory budget with gpusolve's optimal checkpointing.

    ``stages``: an ``nn.Sequential`` or a list of modules/callables; the state between stages is a
    tensor or a tuple of tensors (call the module with the tensor, the tuple, or its elements).
    ``budget``: bytes (int) or a string like ``"6GiB"``; it counts everything but the input (the
    checkpoints, tapes, gradients of activations and workspace). ``None`` runs plain autograd.
    ``bucket``/``backend`` are passed to :func:`gpusolve.solve`.

    The first call with a new input shape/dtype/device profiles the stages and solves (or call
    :meth:`prepare`); plans are cached per input signature. Profiling and solving leave parameters,
    buffers, gradients and RNG state as they were. ``schedule_fn(chain) -> schedule or policy`` replaces
    the solver (baselines, tests).
    """

    def __init__(self, stages, budget="6GiB", bucket=None, backend: str = "auto", *, profile_passes: int = 3,
                 profile_warmup: int = 1, schedule_fn=None, preserve_rng_state: bool = True, network: str | None = None):
        super().__init__()
        self.names, fns = U.stage_list(stages)
        self.stages = nn.ModuleList([f for f in fns if isinstance(f, nn.Module)])
        self._fns = fns  # the callables, in order (modules are also registered above)
        self.budget = None if budget is None else parse_bytes(budget, "budget")
        self.bucket = bucket
        self.backend = backend
        self.profile_passes = profile_passes
        self.profile_warmup = profile_warmup
        self.schedule_fn = schedule_fn
        self.preserve_rng_state = preserve_rng_state
        self.network = network
        self._entries: dict = {}
        self._last = None

    # ------------------------------------------------------------ plans
    @property
    def plan(self) -> Plan | None:
        """The plan of the latest call (or :meth:`prepare`)."""
        return None if self._last is None else self._last.plan

    @property
    def chain(self) -> Chain | None:
        return None if self._last is None else self._last.chain

    @property
    def plans(self) -> dict:
        """Cached plans by input signature."""
        return {key: entry.plan for key, entry in self._entries.items()}

    def prepare(self, *sample_input, profile: dict | None = None) -> Plan:
        """Profile and solve for inputs like ``sample_input`` now (otherwise the first call does it).

        ``profile``: a ``measured-chain/1`` dict of these stages (e.g. from :func:`torch_exec.profile_dict`
        or a saved file) to use instead of profiling; its stage names must be this module's.
        """
        state = sample_input[0] if len(sample_input) == 1 else tuple(sample_input)
        if profile is not None:
            names = [stage["name"] for stage in profile["stages"]]
            if names != self.names:
                raise ValueError(f"the profile's stages {names[:4]}... are not this module's {self.names[:4]}...")
            self._entries[self._key(state)] = self._build(state, profile)
        entry = self._entry(state)
        self._last = entry
        return entry.plan

    def _key(self, state):
        return (tuple((tuple(t.shape), t.dtype, t.device, t.requires_grad) for t in U.tensors(state)),
                isinstance(state, torch.Tensor), self.training,
                tuple(sorted((k, str(v["dtype"])) for k, v in U.autocast_state().items())))

    def _entry(self, state) -> Entry:
        key = self._key(state)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._build(state)
            self._entries[key] = entry
        return entry

    def _build(self, state, data: dict | None = None) -> Entry:
        sample = U.make_leaf(state, [t.requires_grad for t in U.tensors(state)])
        data = data if data is not None else profile_dict(list(self._fns), sample, passes=self.profile_passes, warmup=self.profile_warmup,
                            network=self.network, names=self.names)
        # Map the fused stages' member names back to the callables.
        chain = chain_from_profile(data)
        by_name = {stage["name"]: i for i, stage in enumerate(data["stages"])}
        groups, group_modules = [], []
        for members in chain.provenance["members"]:
            idx = [by_name[m] for m in members]
            groups.append([self._fns[i] for i in idx])
            group_modules.append(U.modules_of([self._fns[i] for i in idx]))
        clone_input = bool(data["stages"][0].get("aliases") or data["stages"][0]["x"] == 0)
        entry = Entry(profile=data, chain=chain, plan=None, groups=groups, group_modules=group_modules,
                      clone_input=clone_input, split=0)
        self._plan_entry(entry)
        return entry

    def _plan_entry(self, entry: Entry) -> None:
        chain = entry.chain
        if self.schedule_fn is not None:
            plan = plan_from_schedule(chain, self.schedule_fn(chain), self.budget)
        else:
            plan = solve(chain, self.budget, bucket=self.bucket, backend=self.backend)
        entry.split = split_schedule(plan.schedule, chain.n)
        entry.recomputed = {op.stage for op in plan.schedule[entry.split + 1:]
                            if op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE)}
        entry.plan = plan

    def replan(self, budget="keep", schedule_fn="keep") -> None:
        """Change the budget and/or ``schedule_fn`` and re-solve every cached input signature from its
        profile (no re-profiling). ``budget=None`` switches to plain autograd."""
        if budget != "keep":
            self.budget = None if budget is None else parse_bytes(budget, "budget")
        if schedule_fn != "keep":
            self.schedule_fn = schedule_fn
        if self.budget is None and self.schedule_fn is None:
            return
        for entry in self._entries.values():
            self._plan_entry(entry)

    # ------------------------------------------------------------ forward
    def _plain(self, state):
        for fn in self._fns:
            state = fn(state)
        return state

    def forward(self, *inputs):
        state = inputs[0] if len(inputs) == 1 else tuple(inputs)
        flat = U.tensors(state)
        if len(flat) != (1 if isinstance(state, torch.Tensor) else len(state)):
            raise TypeError("CheckpointedSequential takes a tensor or a tuple of tensors")
        if (self.budget is None and self.schedule_fn is None) or not torch.is_grad_enabled():
            return self._plain(state)
        entry = self._entry(state)
        self._last = entry
        dummy = torch.empty(0, requires_grad=True)  # makes backward run even when no input needs grad
        structure = "tensor" if isinstance(state, torch.Tensor) else "tuple"
        return _ScheduleFunction.apply((entry, structure, self.preserve_rng_state), dummy, *flat)

    def extra_repr(self) -> str:
        from gpusolve.units import format_bytes
        budget = "None (plain autograd)" if self.budget is None else format_bytes(self.budget)
        return f"stages={len(self._fns)}, budget={budget}"


__all__ = ["CheckpointedSequential", "interpret", "plan_from_schedule", "split_schedule", "Runtime", "Entry"]
