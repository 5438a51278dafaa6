"""Measure a chain of stages and write it in the ``measured-chain/1`` format (see shared profiles README).

Times: on CUDA, CUDA events recorded between stages inside whole forward and backward passes (no
synchronisation inside a pass; backward boundaries from gradient hooks on each stage's output),
medians over several passes; on the CPU, ``time.perf_counter`` at the same points (CPU times: a
:class:`CPUTimingWarning` says so).

Memory, on both devices, comes from one separate pass measured by
:class:`~torch_exec.meter.MemoryMeter`: the caching allocator's counters on CUDA, the CPU
allocator's events (``torch.profiler``, ``profile_memory=True``) on the CPU. So every figure is
what the allocator really held, workspace included: ``x`` (output bytes of a no-grad forward),
``xbar`` (what a forward with grad keeps: output and saved tensors), the forward peaks and
``bwd_peak`` (peak during the stage's backward above the bytes allocated when it started) and
``bwd_delta`` (the change of allocated bytes over it, which composes fused stages exactly, with
``grad_ready_delta``: Note [Gradients ready one by one] in gpusolve/chain.py).
Parameter gradients are allocated before measuring, so no stage counts them. The storages autograd
saved (seen through ``saved_tensors_hooks``, by identity only) are also counted: ``saved_bytes``
per stage, a cross-check (``xbar`` is never below it), and ``out_saved_bytes``, the output storage
the stage's own backward saved (the cost model's ``bwd_tape_bytes`` comes from it); storage by storage,
``out_saved_from`` and ``in_dropped_from`` (Note [Storages a stage drops] in gpusolve/chain.py; what a stage drops
checked by measurement: Note [Drops measured]).

Profiling leaves the model exactly as it found it: parameters, buffers, gradients, RNG state and
training flags are restored afterwards.

Note [Profiling stage by stage]
    The passes above hold every stage's tape at once (a forward with grad, then its backward), and
    measure plain autograd's step: profiling needs the memory of the plain step, the very memory a
    model checkpointed under a budget does not have. ``isolated=True`` profiles one stage at a time
    instead: the no-grad pass keeps a copy of each stage's input on the host (exact copies, Note
    [Exact copies] in torch_exec/offload.py); then each stage runs alone, its input brought back and
    cloned where it needs a gradient (a non-leaf, as in a whole pass, so an in-place first op works):
    a forward pass, first to last, for the forward readings and what each stage saves; then, last to
    first, each stage's forward and its backward from the gradient of its output that the next
    stage's backward made, as it handed it over (a hook on that stage's input: a broadcast gradient
    stays one), the last stage's seeded with ones. Its output and that gradient are referenced by
    nothing else (as the executor's BWD runs it), its input is held until its gradient is ready (Note
    [Inputs held through a backward]), and the input tensors an earlier stage saved stay held after
    it, as in a whole pass (storages numbered in the no-grad pass: addresses come back).
    Device memory then peaks at about one stage's input, tape, output gradient and workspace. No
    plain step is measured: the plain-autograd figures (percent budgets, whether plain autograd fits)
    are the model's store-all peak. ``isolated=None`` (the executors' default)
    profiles the whole step and, where that runs out of CUDA memory, starts again stage by stage,
    saying so in one line (:class:`gpusolve.FallbackWarning`). Readings equal the whole step's on the
    test models, except on tuple states that pass a tensor on, where the whole step's spans overlap
    (Note: ``_Boundaries._reached``) and either side can read higher; the least budgets stay equal
    (tests/test_profile_isolated.py).

Note [Drops measured]
    The storages of its input a stage neither passes on nor saves (``in_dropped_from``, Note [Storages a stage
    drops] in gpusolve/chain.py) are found from what the saved-tensor hooks saw. A custom autograd.Function that
    keeps its inputs as ``ctx`` attributes, a module that caches its input, a hook that stores a tensor: none is
    seen there, and each keeps a storage alive that the profile called freed. Planning that freed such a storage
    went 98 306 B over the user's budget (review rv15: bench/repros/rv15_review_ctx_held_dropped_storage.py), so it
    counted every drop held. Now the whole step's memory pass checks: in its plain step (which holds no stage's
    output) a weak reference to each storage the stage is said to drop is taken before the stage runs, and read
    once its output has replaced its input; a storage still alive is not called dropped. The profile says
    ``drops_checked``, and only then does planning free the drops (``plan_drops`` in gpusolve/exact_peak.py). A
    profile made stage by stage checks nothing (each stage runs on copies of its input): ``drops_checked`` false.
    The check sees one call: a Python stage that reads the tensor on other calls (a random route, a data-dependent
    branch) keeps it then, so planning frees checked drops only for stages that run one graph on every call
    (``static_stages``: auto_checkpoint's exported graphs; review rv16, Note [Planning to the exact peak]).

Note [Inputs held through a backward]
    The cost model holds a stage's input through the stage's backward: a_{s-1} is a checkpoint, or
    part of the tape of stage s - 1, which goes at that stage's backward. Plain autograd may free an
    input storage during stage s's backward instead, where stage s saved it and nothing else
    references it: a tensor an earlier stage made and passed on unchanged, read by a late stage's
    first op to run backward (an "x0" skip multiplied in at the end). A backward reading taken that
    way was lowered by the freeing, before the stage's peak: credited to stage s, while the model
    still counts the storage held. Under a plan that keeps a_{s-1} as a checkpoint nothing frees it,
    and a measured step went over its budget by that tensor (1.05x: a review, 2026-11-28,
    bench/repros/rv6_manual_tuple_passthrough_over_budget.py). So the memory passes hold the tensors
    of a_s that stage s + 1 saved until the last gradient of a_s that ``_Boundaries`` hooks is ready,
    and drop them just before that mark: stage s + 1's reading ends with the freeing, after its peak,
    as in the model; stage s's starts without it, as in the model (its tape less what its backward
    saved). Where a_s is a tuple whose first gradient is ready before the last, stage s has started by
    then: its reading is taken from a start without them (Note [Gradients ready one by one] in
    gpusolve/chain.py). Only what stage s + 1 saved is held (``saved_tensors_hooks``, by storage): a tensor no
    backward saves is gone before the backward, as the model has it, and holding it into the spans
    would free it inside one (an unsaved tensor between two stages, which the model merges, or a
    flatten's input before the classifier), where composing a merged group's readings
    (``_merge_group`` in gpusolve/chain.py) would take it off twice: a first version that held
    every output went 523 264 B over a budget (tests/test_profile_isolated.py). In a stage-by-stage
    pass what the stage saved of its input is held the same way. The timing passes hold nothing
    (plain autograd's order; they read no bytes).
    A stage s + 1 that passes its input on as itself (``nn.Identity``, a no-op ``.to()`` that export
    keeps as a stage) makes a_s and a_{s+1} one tensor, whose hooks ran in the order they were put on:
    stage s's start mark came before what stage s + 2 saved of a_{s+1} (the same tensor) was dropped,
    so stage s's reading began with it held, and a transformer's MLP block read its backward 8192 B low (24 576 B
    instead of 32 768); the plans of a tiny Llama went over their budgets by up to 4996 B (a review,
    bench/repros/rv10_auto_llama_bwd_over_budget.py, rv10_llama_diagnosis.md). So one hook serves every
    boundary a tensor is, untouched, and reaches them from the last to the first (``_Boundaries.watch``).

Note [Lazy workspaces]
    Libraries allocate some device memory on first use and keep it: cuBLAS a workspace per handle and
    stream, and the autograd engine runs a CUDA backward in a thread of its own, with handles of its
    own. Read in a fresh process, such an allocation lands in the first stage that needs it, as if the
    stage had made or kept it. On the H100 (bench/results/gpu_runs/2026-11-26_nvidia_h100_80gb_hbm3*/),
    with the memory pass first: the fidelity benchmark's ResNet-style net, profiled first thing in its
    process, read a tape of -34 598 400 B for its Linear stage fused with the loss, and a two-tower
    join read a least budget of 68 170 752 B against plain autograd's measured 7 981 568 B (the cause
    inferred, not yet re-measured). So the first warm-up pass runs before the memory pass: what it
    leaves allocated is there before every reading, as it is before every training step after the
    first. tests/test_profile_lazy.py checks it on the CPU with stages that allocate and keep a buffer on
    their first forward and their first backward.

Note [Leaves several stages read]
    Plain autograd's one backward sums the gradients of a leaf that several stages read (a language
    model's input embedding tied to its output head) in a buffer the size of the leaf, from the later
    reader's backward to the earlier one's; no stage's readings charge it (Note [Shared leaves split tape
    runs] in torch_exec/executor.py, Note [Gradients summed across stages] in gpusolve/offload/compare.py).
    Which stages read which leaf is read off the autograd graph in the memory pass's forward
    (:class:`torch_exec._util.LeafReaders`): after each stage, a walk from its output down to the nodes
    of its input or of an earlier stage, collecting the leaves whose ``AccumulateGrad`` it reaches. So a
    reader is found however it holds the leaf (a registered module, a closure, a list attribute), and a
    stage that holds a tensor it does not use reads nothing. The profile's ``shared_leaves`` lists each
    leaf more than one stage read: ``stages``, ``nbytes``, and ``summed``, whether every stage read the
    same tensor, so that the profile's plain step had the buffer (not where one read a parameter and
    another the profiler's stand-in for it, ``_standin_params`` in the executor: two leaves here, one in
    training). Before (the stages' modules and what their callables reach), a reader through a list
    attribute was missed and a stage holding the whole model read every parameter
    (tests/test_shared_leaves.py). A stage that reads another stage's intermediate result through
    module state, not through the chain, is not seen as reading what that result came from (right for
    plain autograd: that result's node runs once, on the summed gradient), except stage by stage (Note
    [Profiling stage by stage]), where each walk starts afresh and reads the earlier stage's leaves
    behind it: one more break, never a missed one. Leaves are held weakly (a leaf a stage makes for
    itself lives as long as its graph); only ``AccumulateGrad`` nodes count as leaves (a custom
    Function's ``ctx`` may carry a ``variable`` of its own: a review found the walk stopped there).

Note [Leaves summed stage by stage]
    The executor runs each stage that reads a shared leaf in its own backward call (Note [Shared leaves split
    tape runs] in torch_exec/executor.py): the call sums the stage's own parts of the leaf and adds them into its
    ``.grad``. Plain autograd's one backward sums every stage's parts in one buffer, which a later reader made:
    an earlier reader's readings showed the buffer's sums, not its own. Where the buffer was a view (a Linear
    head's weight gradient, the transpose of a product) the first earlier part was added beside it: a tied
    language model's embedding stage read 2 031 616 B where its own call peaks at 1 024 000 B (a review, 2026-11-29:
    its least budget 2 048 008 B whole against 1 606 152 B stage by stage, measured 1 950 216 B); and a stage that
    reads the leaf twice held its first part besides in its own call, which no reading showed (12 032-16 384 B
    over: bench/repros/rv16_review_tied_linear_fused_pair_over_budget.py). So the whole memory pass's backward
    sums a shared leaf's parts stage by stage, as the executor does: a post hook on each node that hands a part to
    the leaf (found by the walk above) takes the part over, sums it with the stage's others as autograd's input
    buffer would (in place where the first part to arrive allows, ``_adds_in_place`` in torch_exec/_util.py; else
    beside both), and at the stage's last part adds the sum into ``.grad`` as AccumulateGrad does; the engine gets
    None on that edge, except at the first reader's last part (the last to run), which hands the engine that
    stage's sum: the leaf's AccumulateGrad adds it, and the leaf's own hooks get a gradient (given None, a user's
    ``p.register_hook(lambda g: g.clamp(...))`` failed). No buffer of the leaf's size then lives across stages,
    as in the executor (left to the engine, the last reader's parts made one that the first reader's backward
    freed: each stage's change of bytes read a leaf off). A stage's last part is known by the reads the backward
    reaches (``LeafReaders.expect``, from the roots, before it runs: a read on a tuple output no later stage uses
    never runs, and waited for, the stage's sum was held to the end of the backward; a review:
    bench/repros/rv17_review_unused_read_held.py); what a stage still holds when its backward ends goes into
    ``.grad`` then (``_Boundaries.done``). The stage's readings are then its own call's, as they are stage by stage
    (Note [Profiling stage by stage]), where each stage's backward is its own call already: the profile says
    ``split_leaves``, and the offloading paper's plans, which run one backward, are charged the sum
    (``Chain.shared_grads``; Note [Gradients summed across stages] in gpusolve/offload/compare.py). The plain
    step's reference figures are measured on a graph of their own.

Note [Host time of a stage]
    A CUDA event times the stream, not the host that queues it. Where the host cannot queue a stage's
    kernels as fast as the device runs them (many small kernels: DenseNet-121 at batch 64 on the H200,
    whose 50 % plan took the host 68.0 ms to queue of a 76.7 ms step), a recomputation costs its
    launches, which the events of a pass whose queue ran ahead of the device do not show. So on CUDA the
    timing passes also read the host's clock at every mark and record each stage's medians as
    ``host_fwd_ms``, ``host_fwd_nograd_ms`` and ``host_bwd_ms`` (the backward's read in the engine's
    thread, where its hooks run). They are measurements beside the cost model, which still takes the
    event times: bench/executor.py's ``host_max`` cost model (the larger of the two per stage) puts the
    choice to a measured step on a GPU before the planner uses them. A stage that waits for the device (a
    ``.item()``, a copy to the host) reads the queue of the stages before it as its own host time, which
    their event times count already: there the larger of the two per stage over-states the step, and a
    prediction from it is an upper bound. On the CPU the stage times are host times already, and no such
    field is written. The forward pass with grad marks each stage's start and end
    apart, its own bookkeeping between them (the input's versions, the backward marks' hooks: 9 us a stage with
    one tensor, 190 us with 32 on the CPU) outside every span: inside, a host-bound network's stages read it, on
    the device's clock too. How much of DenseNet-121's H200 profile summing to 66.3 ms against a 58.6 ms plain
    step that was is for a GPU run to tell.
"""
from __future__ import annotations

import contextlib
import gc
import json
import statistics
import threading
import time
import warnings
import weakref
from typing import NamedTuple
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from gpusolve.chain import PROFILE_FORMAT, Chain
from gpusolve.errors import FallbackWarning, warn_once
from gpusolve.progress import work_progress

from ._util import (LeafReaders, ModelSnapshot, RngState, _callable_name, aliases, backward_segment, block_bytes,
                    buffers_of, by_origin, check_state, clone, copyable, cuda_devices, generators_of, grad_storages,
                    held_from, held_nbytes, host_rng_error, host_rng_moved, host_rng_state, make_leaf, map_state,
                    output_facts, params_of, progress_setting, register_grad_hook, scalar_attributes,
                    set_host_rng_state, stage_list, stage_state, state_nbytes, storage_key, storages, tensors)
from .meter import MemoryMeter, room_for_a_cpu_meter
from .offload import HostCopies

PASS_WORK = {"nograd": 1, "grad": 3, "memory": 9}
"""Work units of the profiler's passes, for its progress on stderr (:func:`gpusolve.progress.work_progress`):
a no-grad forward, a forward and backward with grad (a plain step too), the metered memory pass, in about
the ratios of their times on transformers' GPT-2 small on the CPU. From a third of the work on, the time
left shown then put the end within 10 % of when it came, on GPT-2 small and BERT-base
(``bench/results/prepare_cost_cpu.md``)."""


def profile_work(passes: int, warmup: int, isolated: bool) -> int:
    """The work units :meth:`_Passes.run` reports for ``passes`` and ``warmup`` (:data:`PASS_WORK`)."""
    w = PASS_WORK
    timing = w["nograd"] + w["grad"]
    warm = (w["memory"] if isolated else timing) if warmup > 0 else 0
    measured = passes * (w["nograd"] + (0 if isolated else w["grad"]))
    return warm + w["memory"] + (max(0, warmup - 1) + passes) * timing + measured


# Thread-local depth of profile_dict calls: a CheckpointedSequential used as a stage of a chain being
# profiled runs its stages as plain autograd (see profiling()); it profiles itself when it runs for real.
_PROFILING = threading.local()


def profiling() -> bool:
    """Whether this thread is inside :func:`profile_dict` (a nested wrapper then runs plainly)."""
    return getattr(_PROFILING, "depth", 0) > 0


# Note [A wrapper inside another's step]
#     A wrapper used as a stage of another (a CheckpointedSequential inside a CheckpointedSequential, a
#     wrapped model inside a wrapped model) is profiled by the outer one as a plain stage, and the outer's
#     plan counts it so. Inside the outer's step it ran its own plan: the outer's memory model no longer
#     described the step, and the inner's first call with grad came in the outer's backward (a recomputed
#     tape), where it profiled itself: its CPU meter stopped the outer's measured step's meter inside the
#     backward, whose engine put the profiler's thread state back when it ended, so a profiler stayed on and
#     every later CPU meter raised ProfilerBusyError (a review, 2026-11-27:
#     bench/repros/rv5_manual_nested_profiler_leak.py). So the outer owns the step: inside another wrapper's
#     step (interpret, or a step run as plain autograd) a wrapper runs its stages plainly, as it does while
#     being profiled (runs_as_a_stage()). Called on its own, it runs its own plan.
_STEP = threading.local()


@contextlib.contextmanager
def a_wrapper_step():
    """The extent of a wrapper's step on this thread (Note [A wrapper inside another's step])."""
    _STEP.depth = getattr(_STEP, "depth", 0) + 1
    try:
        yield
    finally:
        _STEP.depth -= 1


def runs_as_a_stage() -> bool:
    """Whether a wrapper called now is a stage of another's work, profiled or run (it then runs plainly:
    Note [A wrapper inside another's step])."""
    return profiling() or getattr(_STEP, "depth", 0) > 0


class CPUTimingWarning(UserWarning):
    """The profile was taken on the CPU: its times are CPU times, not GPU times."""


class InputMutationWarning(UserWarning):
    """A stage modified its input in place without returning it (not executable safely)."""


def profile(stages, sample_input, passes: int = 5, warmup: int = 1, path=None, network: str | None = None,
            fuse_aliasing: bool = True, names: list[str] | None = None, modules=(), isolated: bool | None = None) -> Chain:
    """Profile ``stages`` on ``sample_input`` and return the :class:`gpusolve.Chain` (aliasing stages fused).

    ``stages``: an ``nn.Sequential`` or a list of modules/callables, each mapping the state (a tensor or
    a tuple of tensors) to the next. The device is the sample input's. ``path`` also writes the
    ``measured-chain/1`` JSON (readable by ``gpusolve`` CLI and :func:`load_profile`).
    When the input does not require grad, ``chain.input_grad_bytes`` is 0. ``modules``: modules the
    callable stages use besides the module stages (see :func:`profile_dict`). ``isolated``: Note
    [Profiling stage by stage]. ``network`` names it (default: the file's name without its extension where
    ``path`` is given, else "chain").
    """
    if network is None and path is not None:  # `gpusolve solve my_profile.json` and its plot say "my_profile"
        network = Path(path).stem
    data = profile_dict(stages, sample_input, passes=passes, warmup=warmup, network=network, names=names,
                        modules=modules, isolated=isolated)
    if path is not None:
        save_profile(data, path)
    return chain_from_profile(data, fuse_aliasing=fuse_aliasing)


def chain_from_profile(data: dict, fuse_aliasing: bool = True, merge_unsaved: bool = True) -> Chain:
    """``Chain.from_profile`` of a profile dict (kept as the profiler's name for it)."""
    return Chain.from_profile(data, fuse_aliasing=fuse_aliasing, merge_unsaved=merge_unsaved)


def save_profile(data: dict, path) -> None:
    Path(path).write_text(json.dumps(data, indent=1))


def load_profile(path, fuse_aliasing: bool = True) -> Chain:
    """Read a ``measured-chain/1`` file written by :func:`profile` (or the shared profiles)."""
    data = json.loads(Path(path).read_text())
    data.setdefault("_source", str(path))
    return chain_from_profile(data, fuse_aliasing=fuse_aliasing)


def input_facts(inputs: list) -> dict:
    """What a profile records of the input it was taken on (its ``args.input_shapes``, ``dtype`` and
    ``input_requires_grad``), also what a saved profile is checked against (``prepare(profile=...)``)."""
    return {"input shapes": [list(t.shape) for t in inputs],
            "dtype": ",".join(sorted({str(t.dtype).replace("torch.", "") for t in inputs})),
            "input_requires_grad": any(t.requires_grad for t in inputs)}


def param_bytes_of(state) -> int:
    """The bytes of the parameters (and loose leaf tensors) a profile's stages use (``stage_state(fns, modules)``):
    the profile's ``param_bytes``, also what ``prepare(profile=...)`` checks a saved profile against."""
    return sum(p.numel() * p.element_size() for p in params_of(state[0]) + list(state[1]))


def profile_dict(stages, sample_input, passes: int = 5, warmup: int = 1, network: str | None = None,
                 names: list[str] | None = None, modules=(), loss_only: bool = False,
                 isolated: bool | None = None, progress: bool = True, refuse_host_draws: bool = True) -> dict:
    """The ``measured-chain/1`` dict of ``stages`` on ``sample_input`` (see :func:`profile`).
    ``loss_only``: also measure plain autograd's step for a caller that keeps and back-propagates only
    the scalar outputs (``reference["loss_only_peak_bytes"]``; ``caller_keeps="loss"``). ``isolated``:
    one stage at a time (True), the whole step (False), or the whole step and, where it runs out of
    CUDA memory, stage by stage (None): Note [Profiling stage by stage]; the dict's ``isolated`` says which.
    ``progress``: profiling that runs longer than a couple of seconds reports its progress on stderr
    (:func:`gpusolve.progress.work_progress`; False: never). ``refuse_host_draws``: a stage that draws from Python's
    ``random`` or NumPy's global generator raises :class:`torch_exec.CaptureError` (Note [Python's and NumPy's
    generators] in torch_exec/_util.py; False: stages that are never recomputed, a join's head).

    Extra fields beyond the shared format: ``input_requires_grad``, ``split_leaves``, and per stage ``aliases``
    (the output shares all its storage with the input), ``rng`` (its forward draws random numbers), ``rng_bytes``
    (what a record of the generators it advanced holds on the device: Note [Draws found at the first run]),
    ``buffer_writes`` (its forward writes a buffer: BatchNorm's statistics, spectral norm's vectors),
    ``bwd_delta``, ``grad_ready_delta``, ``saved_bytes``, ``out_saved_bytes``, ``in_saved_bytes``,
    ``out_saved_from`` and ``in_dropped_from`` — readers that do not know them ignore them.

    The state profiling restores and keeps out of the measurements (parameters, their gradients,
    buffers) is that of the module stages, of ``modules``, and of the modules and tensors requiring grad
    that callable stages reach (closures, defaults, globals: :func:`torch_exec._util.stage_state`).
    """
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    default_names, fns = stage_list(stages)
    if names is None:
        names = default_names
    elif len(names) != len(fns) or len(set(names)) != len(names):
        raise ValueError(f"names must be {len(fns)} unique stage names")
    inputs = tensors(sample_input)
    if not inputs:
        raise TypeError("sample_input must be a tensor or a tuple of tensors")
    device = inputs[0].device
    if device.type != "cuda":  # the user's profiler refused before any pass runs (Note [One profiler per thread])
        room_for_a_cpu_meter()
    state = stage_state(fns, modules)
    snapshot = ModelSnapshot(*state, generators=generators_of(state[0], fns))  # Note [Generators of the model's own]
    if device.type != "cuda":
        warn_once("profiling on the CPU: stage times are CPU times (perf_counter); memory is the CPU "
                  "allocator's", CPUTimingWarning, stacklevel=3)  # Note [Warnings once per process]
    _PROFILING.depth = getattr(_PROFILING, "depth", 0) + 1
    host_rng = host_rng_state()  # put back: profiling is no training step (Note [Python's and NumPy's generators])
    try:
        stage_by_stage = bool(isolated)
        while True:
            kind = _CudaProfiler if device.type == "cuda" else _CpuProfiler
            try:
                profiler = kind(fns, sample_input, device, state, loss_only, stage_by_stage)
                profiler.names = names
                profiler.refuse_host_draws = refuse_host_draws
                desc = f"profiling {len(fns)} stages" + (" one at a time" if stage_by_stage else "")
                show = progress and progress_setting() is not False  # rank 0 only
                with work_progress(profile_work(passes, warmup, stage_by_stage), desc, show) as update:
                    measured = profiler.run(passes, warmup, update)
                break
            except torch.OutOfMemoryError as err:
                if stage_by_stage and isolated is None:
                    raise torch.OutOfMemoryError(f"profiling one stage at a time ran out of memory too: {err}") from None
                if isolated is not None:
                    raise
                reason = str(err).splitlines()[0][:160]
            # Out of the except block: the error's traceback no longer holds the failed pass's tensors, nor
            # (dropped here) the failed profiler the graph its readers walked.
            profiler = None
            snapshot.restore(hooks=False)  # the retry is no training step either: hooks stay suspended
            gc.collect()
            torch.cuda.empty_cache()
            warnings.warn(f"profiling the whole step ran out of memory on {device} ({reason}): profiling one stage at "
                          f"a time (Note [Profiling stage by stage] in torch_exec/profiler.py)", FallbackWarning,
                          stacklevel=3)
            stage_by_stage = True
    finally:
        _PROFILING.depth -= 1
        snapshot.restore()
        set_host_rng_state(host_rng)
    per_stage, reference = measured
    facts = input_facts(inputs)
    data = {
        "format": PROFILE_FORMAT,
        "network": network or "chain",
        "args": {"input_shapes": facts["input shapes"], "passes": passes},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": facts["dtype"],
        "input_bytes": state_nbytes(sample_input),
        "param_bytes": param_bytes_of(state),
        "input_requires_grad": facts["input_requires_grad"],
        "isolated": stage_by_stage,
        "drops_checked": profiler.drops_checked,  # Note [Drops measured]
        "reference": reference,
        "stages": [dict(name=name, **fields) for name, fields in zip(names, per_stage)],
        "shared_leaves": profiler.readers.shared(),  # Note [Leaves several stages read]
        "split_leaves": True,  # each stage's readings its own call's: Note [Leaves summed stage by stage]
    }
    for s, stage in enumerate(data["stages"]):
        if stage.pop("mutates_input", False):
            warnings.warn(f"stage {s + 1} ({stage['name']}) modifies its input in place but returns new storage: "
                          f"a checkpoint before it would be overwritten; make it return its input or avoid in-place",
                          InputMutationWarning, stacklevel=2)
    return data


@contextlib.contextmanager
def _no_cycle_collection():
    """No cyclic garbage collection inside the block, and none left from before it: the meter reads every
    allocation and free of the process, so a collection freeing garbage made earlier in the pass inside a
    stage's window read as the stage's (on the CPU a Tanh stage of a test's MLP, profiled after other tests,
    read an output of 0 bytes, then fused as if it aliased its input, once the profiler made more Python
    objects and the collector ran there; tests/test_profile_lazy.py)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _median(values):
    return float(statistics.median(values)) if values else 0.0


class ParameterWriteError(RuntimeError):
    """A stage's forward writes a parameter in place (Note [Parameters a forward writes])."""


# Note [Parameters a forward writes]
#     A forward that updates a parameter in place (an EMA centre or a momentum encoder kept as an nn.Parameter with
#     requires_grad=False, updated under no_grad: MoCo's key encoder) is written again by every re-run of its stage:
#     the schedule's recomputations updated it twice per step, and it and the gradients drifted from plain
#     autograd's (a review, 2026-11-28: 4.1e-2 on the state, 1.3e-2 on the gradients, bench/repros/
#     rv6_train_frozen_param_state.py). Buffers are the state a forward may write: their re-runs start from
#     clones (Note [Recomputing from the step's buffers] in torch_exec/executor.py). So profiling refuses a
#     stage whose forward writes a parameter, naming it and the remedy (register it as a buffer): its version
#     counter or its storage moved, or, for a frozen one, the sum of its values (``p.data.mul_(m)``, as MoCo
#     writes it, moves neither). A write in auto_checkpoint's code before the chain (run once per step) is not
#     refused; its first call's probe runs the model once, as the call itself would have.
def _parameter_marks(params: list, frozen: list | None = None) -> tuple:
    """What :func:`_refuse_parameter_writes` compares: each parameter's version and storage, and a sum of each
    frozen one's values (a write through ``.data`` moves neither the version nor, in place, the storage:
    MoCo's ``p.data.mul_(m)``; a review, 2026-11-28). Trainable parameters cannot be written in the forward
    but under no_grad, which moves their version. ``frozen``: the frozen ones of earlier marks (default: found)."""
    if frozen is None:
        frozen = [p for p in params if not p.requires_grad and p.is_floating_point() and p.layout == torch.strided]
    with torch.no_grad():
        sums = torch.stack([p.detach().sum(dtype=torch.float64) for p in frozen]) if frozen else None
    return [(p._version, _data_ptr(p)) for p in params], frozen, sums


def _data_ptr(p) -> int | None:
    """``p``'s storage address, None where it has none to read (a sparse or otherwise storage-less tensor)."""
    try:
        return p.data_ptr()
    except RuntimeError:
        return None


def _refuse_parameter_writes(s: int, params: list, before: tuple) -> tuple:
    """Note [Parameters a forward writes]: raise where stage ``s`` (0-based) wrote a parameter (its
    :func:`_parameter_marks` moved from ``before``); else the marks now, the next stage's ``before``."""
    marks, frozen, sums = before
    after = _parameter_marks(params, frozen)
    written = [p for p, m, now in zip(params, marks, after[0]) if m != now]
    if sums is not None:
        now = after[2]
        with torch.no_grad():
            moved = ~((now == sums) | (now.isnan() & sums.isnan()))
        seen = {id(p) for p in written}
        written += [p for p, m in zip(frozen, moved.tolist()) if m and id(p) not in seen]
    if written:
        shapes = ", ".join(str(tuple(p.shape)) for p in written[:3])
        raise ParameterWriteError(
            f"stage {s + 1}'s forward writes {len(written)} parameter(s) in place (shapes {shapes}): an EMA or a "
            f"momentum encoder kept as nn.Parameter, nn.Embedding's max_norm. Each recomputation of the stage would "
            f"write it again. Keep such state as a buffer (module.register_buffer(name, tensor)), which a re-run "
            f"starts from a copy of, or make the update outside the forward (after the optimizer step) "
            f"(Note [Parameters a forward writes] in torch_exec/profiler.py)")
    return after


class AttributeWriteError(ParameterWriteError):
    """A stage's forward writes a Python attribute of its module at each call (Note [Attributes a forward
    writes])."""


# Note [Attributes a forward writes]
#     A forward that keeps a Python counter on its module (``self.calls += 1``: a warm-up factor, a temperature
#     annealed per call, an observer's step count) is run again by each profiling pass and each recomputation of
#     its stage, and nothing puts such an attribute back: after the first step of a CheckpointedSequential of six
#     such blocks each counter read 18 where plain autograd's read 1, and the loss was 275428 against 4.80 (a
#     review: bench/repros/rv20a_seq_stage_counter_attribute_rerun.py). So the second timing pass, which draws the
#     same random numbers as the first, compares the scalar attributes (numbers, strings, None) of the stages'
#     modules with what the first left: one that moved again depends on its own value (a counter), and profiling
#     refuses the stage, naming the attribute and the remedy, with the attributes put back as they were before
#     profiling. A value overwritten at each call from what the call computes (a logged mean of a dropout's output)
#     comes out the same from the same draws and is left alone (review rv20r: refused at first,
#     bench/repros/rv20r_seq_logged_attribute_with_dropout_refused.py), and so is a write on the first call only (a
#     warn-once flag, a lazy module's sizes). With one timing pass asked for, the second runs for the check alone.
def _module_scalars(fns, modules=()) -> dict:
    """``(stage, module, name) -> value`` for the scalar attributes of the modules of the stages ``fns``, and of
    ``modules`` (``modules=``, those plain callables reach: stage None; a counter in one trained 3.1e-2 off plain
    autograd's gradients unrefused, review rv20r) (Note [Attributes a forward writes])."""
    out = {(s, m, key): v for s, fn in enumerate(fns) if isinstance(fn, torch.nn.Module)
           for m in fn.modules() for key, v in scalar_attributes(m)}
    known = {id(m) for _, m, _ in out}
    out.update({(None, m, key): v for mod in modules for m in mod.modules() if id(m) not in known
                for key, v in scalar_attributes(m)})
    return out


def _refuse_attribute_writes(fns, modules, before: dict, restore: dict) -> None:
    """Note [Attributes a forward writes]: raise where the stages ``fns`` moved a scalar attribute of theirs or of
    ``modules`` from ``before``, having put every attribute written back to its value in ``restore`` (before
    profiling)."""
    now = _module_scalars(fns, modules)
    written = [k for k, v in before.items() if k in now and now[k] != v]
    if not written:
        return
    for (s, m, key), v in restore.items():
        if vars(m).get(key, v) != v:
            setattr(m, key, v)
    s, m, key = written[0]
    raise AttributeWriteError(
        f"{'a stage' if s is None else f'stage {s + 1}'}'s forward writes {type(m).__name__}.{key} at every call "
        f"({before[(s, m, key)]!r} "
        f"-> {now[(s, m, key)]!r}{f'; and {len(written) - 1} more' if len(written) > 1 else ''}): each profiling "
        f"pass and each recomputation of the stage would write it again. Keep such state as a buffer "
        f"(module.register_buffer(name, torch.tensor(0)), updated in place), which a re-run starts from a copy of, or "
        f"update it in the training loop (Note [Attributes a forward writes] in torch_exec/profiler.py)")


class DataDependentShapeError(RuntimeError):
    """A stage runs an operator whose result's size follows the values of its input, not only its shape (Note
    [Sizes that follow the data])."""


# Note [Sizes that follow the data]
#     A plan is made from the sizes of one profiled call per input signature (shapes, dtypes, device). A stage whose
#     tensors' sizes follow the values of its input breaks that: boolean indexing (``h[h.sum(1) > 0]``: rows kept by
#     a test on their values, as a model that drops padding tokens or keeps confident detections does), nonzero,
#     masked_select, unique, bincount, one_hot without num_classes, repeat_interleave by a tensor. A batch that keeps
#     more rows than the profiled one makes larger tensors in that stage and every later one, and the plan went over
#     its budget: a stage keeping the rows of positive sum, profiled on a batch that kept 20 of 64 rows, then trained
#     on one that kept 32, measured 8 495 B over 1.1 x the least budget (CheckpointedSequential) and 5 679 B over
#     it (auto_checkpoint); the excess was then blamed on the caller's loss code (Note [The caller's turn] in
#     torch_exec/executor.py) and the next call raised InfeasibleBudgetError (a review, 2026-11-29:
#     bench/repros/rv21a_rows_selected_by_mask_over_budget.py). No one call tells the largest size another batch
#     may make, so profiling refuses such a stage: after its memory pass, one no-grad forward runs the stages under a
#     dispatch mode that looks at each ATen operator (the selections by a mask below), and raises
#     :class:`DataDependentShapeError` naming the stage, the operator, the line of the model's code that ran it and
#     the remedies. Sizes computed from a number read off a tensor (``x[: int(n)]``, ``.item()``) are not seen.
#     Narrowed by the review of the change (bench/repros/rv21r_seq_moe_routing_refused.py,
#     rv21r_seq_constant_bool_mask_refused.py, rv21r_seq_bincount_minlength_refused.py): refusing every operator
#     tagged ``dynamic_output_shape`` refused mixture-of-experts routing (``torch.where(mask)`` runs nonzero; the
#     rows routed total tokens x k whatever the batch), HF Mixtral's eager experts, a registered boolean buffer
#     used as a fixed column mask, and ``bincount(idx, minlength=E)``, all of which trained before
#     (bench/results/repros_session21r_cpu_before.md: each refused at 162982f). So only a selection by a mask
#     the stage computes is refused: aten.index with a boolean index that is not a parameter or buffer of the model,
#     and masked_select. Index lists (nonzero, argwhere, unique, bincount, repeat_interleave) are left alone: where
#     the rows they select vary in total, the plan may still go over (the learning of Note [The caller's turn] then
#     takes the excess).
def _size_follows_values(func, args, kwargs, constant: frozenset = frozenset()) -> bool:
    """Whether ATen operator ``func`` called with ``args``/``kwargs`` selects by a mask the stage computes, making a
    result whose size follows the values of its inputs (Note [Sizes that follow the data]); ``constant``: the storages
    (``StorageWeakRef``) of the model's parameters and buffers, masks that never change."""
    name = getattr(getattr(func, "overloadpacket", None), "__name__", None)  # a higher-order operator has none
    if name == "masked_select":
        return True
    if name != "index":
        return False
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)
               and (t.layout != torch.strided or StorageWeakRef(t.untyped_storage()) not in constant)
               for t in indices or ())


class _SizesFromValues(TorchDispatchMode):
    """Records, per stage (``stage``, 0-based; None: outside the stages), the operators whose results' sizes follow
    their inputs' values, with the line of the model's code that ran each (Note [Sizes that follow the data])."""

    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self, constant: frozenset = frozenset()):
        super().__init__()
        self.stage = None
        self.constant = constant  # the model's parameters' and buffers' storages
        self.found: list = []  # (stage, operator, site)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.stage is not None and not self.found and _size_follows_values(func, args, kwargs, self.constant):
            import traceback
            frames = [f for f in traceback.extract_stack()[:-1]
                      if "/torch/" not in f.filename and "torch_exec/" not in f.filename]
            site = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
            self.found.append((self.stage, str(func), site))
        return func(*args, **kwargs)


def _refuse_sizes_from_values(fns, sample, names=None, constant=()) -> None:
    """Note [Sizes that follow the data]: one no-grad forward of the stages ``fns`` (named ``names``) on ``sample``
    under :class:`_SizesFromValues`; raise :class:`DataDependentShapeError` where a stage selects by a mask it
    computes (``constant``: the model's parameters and buffers, whose masks are fixed)."""
    mode = _SizesFromValues(frozenset(StorageWeakRef(t.untyped_storage()) for t in constant
                                      if t.layout == torch.strided))  # a sparse buffer has no storage to read
    state = clone(make_leaf(sample, False))
    with torch.no_grad(), mode:
        for s, fn in enumerate(fns):
            mode.stage = s
            state = fn(state)
        mode.stage = None
    del state
    if not mode.found:
        return
    s, op, site = mode.found[0]
    raise DataDependentShapeError(
        f"stage {s + 1}{f' ({names[s]})' if names else ''} runs {op}{site}, whose result's size follows the values "
        f"of its input (a selection by a boolean mask it computes), not only its shape: a plan is made from the profiled "
        f"call's sizes, and a batch that keeps more would go over the budget. Keep the sizes fixed (multiply by the "
        f"mask, or torch.where(mask[..., None], x, 0), instead of x[mask]), make the selection outside the wrapped "
        f"stages (before the first or after the last; with auto_checkpoint, cut the model by hand with "
        f"CheckpointedSequential), or train without a budget (budget=None) (Note [Sizes that follow the data] in "
        f"torch_exec/profiler.py)")


# Note [Buffers written behind their versions]
#     A stage's ``buffer_writes`` (Note [Recomputing from the step's buffers] in torch_exec/executor.py) was read
#     from the buffers' version counters alone. Some ops write a buffer without moving its counter: the fused
#     fake-quantiser of quantization-aware training (``aten.fused_moving_avg_obs_fake_quant`` updates its running
#     min/max, scale and zero point), and ``aten.batch_norm``'s statistics in an exported graph. torchvision's QAT
#     ResNet-18 then had no stage writing a buffer, its recomputations started from the scale the forward had
#     already moved, and at its least budget conv1's gradient was 1.87 off (the largest is 2.49; a review,
#     2026-11-28: bench/repros/rv11_tv_qat_fused_fakequant_recompute.py, bench/results/repros_session11_cpu_before.md).
#     The no-grad pass now also compares the values of the buffers a stage holds (the buffers of its modules,
#     every buffer for a callable stage; dense ones: a sparse buffer is left to its counter) with copies taken
#     before it runs: a stage that changes a buffer's shape or contents writes it. (A first version kept a copy
#     of every buffer of the model through the pass: 32 stages with a 4 MiB buffer each read 134419392 B at the
#     pass's peak, 4654080 B now, and a sparse buffer raised in torch.equal: a review, 2026-11-28,
#     bench/repros/rv11_diff_buffer_copy_profiling_memory.py, rv11_diff_sparse_buffer_profile_raises.py,
#     bench/results/repros_session11_review_cpu{_before,}.md.)
def _stage_buffers(fn, buffers: list) -> list:
    """The dense buffers among ``buffers`` that stage ``fn`` holds (its modules'; all of them for a callable)."""
    if isinstance(fn, torch.nn.Module):
        own = {id(b) for b in buffers_of([fn])}
        buffers = [b for b in buffers if id(b) in own]
    return [b for b in buffers if b.layout == torch.strided]


def _buffers_changed(buffers: list, values: list) -> bool:
    """Whether a buffer's shape or contents differ from ``values`` (its copy taken before the stage ran;
    Note [Buffers written behind their versions]). NaNs compare equal: a NaN left in place is no write."""
    return any(b.shape != v.shape or b.dtype != v.dtype or not (
        torch.equal(b, v) or (b.is_floating_point() and torch.allclose(b, v, rtol=0, atol=0, equal_nan=True)))
        for b, v in zip(buffers, values))


def _versions(state) -> dict:
    """``{id(tensor): version}`` of a stage's input, taken before it runs: compared after, it tells
    whether the stage wrote its input, and which tensors it passed on untouched
    (:meth:`_Boundaries.watch`). The input stays referenced while the stage runs, so no id is reused."""
    return {id(t): t._version for t in tensors(state)}


class _Passes:
    """Memory and time of every stage: one memory pass, then timed passes.

    The memory pass runs a no-grad forward, a forward with grad and its backward, then a plain
    step, under a :class:`~torch_exec.meter.MemoryMeter` (allocator counters on CUDA, allocator
    events on the CPU) with a mark between stages; in the backward the marks are taken by gradient
    hooks on each stage's output (the gradient of a_s is ready: stage s's backward starts). Each
    per-stage figure is a reading between two marks, so a stage's peak includes the workspace its
    operators allocate and free inside. The timed passes run without the meter (on the CPU it slows
    every allocation); subclasses supply the clock.
    """

    def __init__(self, fns, sample, device, state=None, loss_only: bool = False, isolated: bool = False):
        self.fns = fns
        self.n = len(fns)
        self.isolated = isolated  # Note [Profiling stage by stage]
        self.names = None  # the stages' names, for errors (profile_dict sets them)
        self.stash = None         # isolated: each stage's input on the host (offload.StepCopies)
        # isolated, filled by the no-grad pass and isolated_forward for isolated_backward: per stage the
        # storages of its input tensors in the no-grad pass, the storages of that pass its backward holds,
        # and which of its input tensors require grad
        self.in_keys: list = []
        self.saved: list = []
        self.flags: list = []
        # isolated, filled by the no-grad pass: per stage the numbers of its output's storages, and per number
        # (bytes in the allocator's blocks, whether it is a parameter's or a buffer's) for the storage notes
        # (Note [Storages a stage drops])
        self.out_keys: list = []
        self.numbered: dict = {}
        self.loss_only = loss_only  # also measure a plain step that keeps only the loss (metered_plain_step)
        # the leaves each stage's graph reaches in the memory pass's forward (a second pass finds the same)
        self.readers = LeafReaders()
        self.sample = sample
        self.device = device
        self.rg = [t.requires_grad for t in tensors(sample)]
        # (modules, loose tensors) whose state the stages use (stage_state): their parameters get
        # gradients before measuring and their storages are not counted as the stages'.
        modules, loose = state if state is not None else stage_state(fns)
        self.modules = modules  # the stages' modules, modules= and those callables reach (attributes: _module_scalars)
        self.params = params_of(modules) + list(loose)
        self.buffers = buffers_of(modules)
        self.generators = generators_of(modules, fns)  # Note [Generators of the model's own] in torch_exec/_util.py
        self.excluded = {key for key in (storage_key(t) for t in self.params + self.buffers)
                         if key is not None}
        # Note [Drops measured]: per stage (0-based), the storages of its input the whole pass calls dropped, by
        # the position of a tensor of the input holding each: {position: (maker stage, bytes)}; and, once the
        # plain step has run, the positions whose storage outlived the stage
        self.dropping: dict = {}
        self.outlived: dict = {}
        self.drops_checked = False
        self.refuse_host_draws = True  # Note [Python's and NumPy's generators] in torch_exec/_util.py

    # clock ----------------------------------------------------------------
    def mark(self):
        raise NotImplementedError

    def elapsed(self, a, b) -> float:
        raise NotImplementedError

    host_clock = False  # whether the marks also read the host's clock (Note [Host time of a stage])

    def host_elapsed(self, a, b) -> float:
        """Milliseconds the host took from mark ``a`` to mark ``b`` where the clock is not the host's (Note
        [Host time of a stage]; ``host_clock``)."""
        raise NotImplementedError

    def sync(self):
        pass

    def _spans(self, pairs) -> tuple:
        """(clock ms, host ms or None without ``host_clock``) of each ``(a, b)`` of ``pairs``; 0 for None (the
        backward of a stage no gradient reached)."""
        pairs = list(pairs)
        clock = [0.0 if pair is None else max(0.0, self.elapsed(*pair)) for pair in pairs]
        host = [None if not self.host_clock else 0.0 if pair is None else max(0.0, self.host_elapsed(*pair))
                for pair in pairs]
        return clock, host

    def run(self, passes: int, warmup: int, progress=None):
        """Per-stage figures and the reference ones, medians of ``passes`` timing passes after ``warmup``
        (the first of them is :meth:`warm`). ``progress(work)`` is told the work done in
        :data:`PASS_WORK` units."""
        n = self.n
        tick = progress or (lambda work: None)
        t_ng = [[] for _ in range(n)]
        t_f = [[] for _ in range(n)]
        t_b = [[] for _ in range(n)]
        h_ng, h_f, h_b = ([[] for _ in range(n)] for _ in range(3))  # Note [Host time of a stage]
        ref = {"store_all_step_ms": [], "nograd_forward_ms": []}
        self.prepare_grads()
        attributes = _module_scalars(self.fns, self.modules)  # as they were (Note [Attributes a forward writes])
        if warmup > 0:  # Note [Lazy workspaces]: the first warm-up runs before memory is read
            came_with = RngState.capture(cuda_devices(self.sample), self.generators)
            self.warm()
            tick(PASS_WORK["memory"] if self.isolated else PASS_WORK["nograd"] + PASS_WORK["grad"])
            warmup -= 1
            # the memory pass, which reads which generators each stage advances, starts from the states the model
            # came with, as a step's first runs do: a stage seeding its own generator in its forward left it, after
            # the warm-up, where the memory pass's run left it again, and was profiled as not drawing; its first
            # step then found it drawing and raised at the least budget (Note [Draws found at the first run])
            came_with.restore()
        mem, reference = self.memory_pass()
        tick(PASS_WORK["memory"])
        # after the memory pass, whose first forward is cold where warmup=0 asks for it (Note [Lazy workspaces])
        _refuse_sizes_from_values(self.fns, self.sample, self.names, self.params + self.buffers)  # Note [Sizes that
        # follow the data]
        devices = cuda_devices(self.sample)
        draws = seen = None  # Note [Attributes a forward writes]: the first two passes draw the same numbers
        for it in range(max(warmup + passes, 2)):
            if it == 0:
                draws = RngState.capture(devices, self.generators)
            elif it == 1:
                draws.restore()
            ng, host_ng = self.nograd_pass()
            (fwd, host_f), (bwd, host_b) = self.grad_pass()
            if it == 0:  # what the pass left, before the reference passes below draw other numbers
                seen = _module_scalars(self.fns, self.modules)
            elif it == 1:
                _refuse_attribute_writes(self.fns, self.modules, seen, attributes)
                if it >= warmup + passes:  # the check's own pass (one timing pass asked for): not a figure
                    break
            tick(PASS_WORK["nograd"] + PASS_WORK["grad"])
            if it >= warmup:
                for s in range(n):
                    t_ng[s].append(ng[s])
                    t_f[s].append(fwd[s])
                    t_b[s].append(bwd[s])
                    if self.host_clock:
                        for into, host in ((h_ng, host_ng), (h_f, host_f), (h_b, host_b)):
                            into[s].append(host[s])
                # the whole no-grad forward in a pass of its own (no mark between stages): what the sum of
                # the stages' times is checked against (bench/profile_reference.py)
                ref["nograd_forward_ms"].append(self.nograd_forward())
                tick(PASS_WORK["nograd"])
                if not self.isolated:
                    ref["store_all_step_ms"].append(self.plain_step())
                    tick(PASS_WORK["grad"])
        self.stash = None  # the host copies of the stages' inputs
        reference.update({k: _median(v) for k, v in ref.items() if v})
        stages = []
        for s in range(n):
            stages.append(dict(t_fwd=_median(t_f[s]), t_fwd_nograd=_median(t_ng[s]), t_bwd=_median(t_b[s]),
                               **mem[s]))
            if self.host_clock:
                stages[-1].update(host_fwd_ms=_median(h_f[s]), host_fwd_nograd_ms=_median(h_ng[s]),
                                  host_bwd_ms=_median(h_b[s]))
        return stages, reference

    def warm(self):
        """One unmeasured run of what the memory pass runs (Note [Lazy workspaces]): the whole step, or
        each stage alone when ``isolated`` (a whole step may not fit; the memory pass itself runs twice)."""
        if self.isolated:
            self.memory_pass()
        else:
            self.nograd_pass()
            self.grad_pass()

    def prepare_grads(self):
        # Allocate every parameter gradient before measuring, so that no stage counts it (with a
        # gradient allocated, AccumulateGrad adds into it: the new gradient is workspace of the
        # stage that computes it). profile_dict's ModelSnapshot puts the caller's .grad objects back
        # (it holds the same parameters: the caller's gradient objects are never written to).
        with torch.no_grad():
            for p in self.params:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        self.sync()

    # memory ---------------------------------------------------------------
    def memory_pass(self):
        """Per-stage sizes and peaks (bytes) and the plain step's peak, from one metered run; stage by
        stage when ``isolated`` (Note [Profiling stage by stage]: no plain step)."""
        n = self.n
        mem = [dict() for _ in range(n)]
        ng_marks = []
        # the readers of this pass alone: stage by stage the warm-up runs it too, and counted twice, every leaf read
        # twice (a review, 2026-11-29: bench/repros/rv17_review_isolated_reads_doubled.py)
        self.readers = LeafReaders()
        with _no_cycle_collection(), MemoryMeter(self.device) as meter:
            self.nograd_memory(meter, mem, ng_marks)
            g_marks, readings = (self.isolated_memory if self.isolated else self.whole_memory)(meter, mem)
        spans, ready, reference = readings()  # readings exist once the meter has stopped
        for s, dropping in self.dropping.items():  # Note [Drops measured]: only what the plain step saw freed
            outlived = self.outlived.get(s, ())
            mem[s]["in_dropped_from"] = by_origin(v for i, v in dropping.items() if i not in outlived)
        # what profiling itself allocated at its peak on the device (on the CPU the host copies of the
        # stages' inputs, host_copies_bytes, are the same memory and counted too)
        reference["memory_pass_peak_bytes"] = int(meter.total.peak)
        for s in range(n):
            ng = meter.between(*ng_marks[s])
            g = meter.between(*g_marks[s])
            x = 0 if mem[s]["aliases"] else max(0, ng.delta)
            xbar = max(0, g.delta, mem[s].get("saved_bytes", 0))
            mem[s].update(x=int(x), xbar=int(xbar), fwd_peak_nograd=int(max(ng.peak, x)),
                          fwd_peak_grad=int(max(g.peak, xbar)))
        for s in range(1, n + 1):
            span = spans[s - 1]
            if span is None:  # no gradient reached a_s: nothing of the stage runs backward
                mem[s - 1].update(bwd_peak=0, bwd_delta=0)
                continue
            # A stage whose output is its input tensor itself (a no-op view such as Flatten of a 2-D
            # input) has both hooks on one tensor: they fire at the same instant, in registration
            # order; its backward is then empty.
            start, stop = span
            reading = meter.between(start, max(start, stop))
            peak, delta, ready_delta = reading.peak, reading.delta, 0
            if ready[s - 1] is not None:  # Note [Gradients ready one by one] (gpusolve/chain.py)
                first, dropped, last = ready[s - 1]
                ready_delta = meter.between(first, max(first, last)).delta
                if dropped is not None:  # read from a start without what was held of a_s for stage s + 1
                    before, held = meter.between(first, dropped), -meter.between(dropped, last).delta
                    peak = max(before.peak, before.delta + meter.between(last, max(last, stop)).peak)
                    delta, ready_delta = delta + held, before.delta
            mem[s - 1].update(bwd_peak=int(peak), bwd_delta=int(delta), grad_ready_delta=int(ready_delta))
        return mem, reference

    def nograd_memory(self, meter, mem: list, ng_marks: list) -> None:
        """The no-grad forward, marked around each stage: x, the output's new bytes; the peak above the
        bytes before it; what the output holds and where it was made. When ``isolated``, each stage's
        input is copied to the host first (``stash``), outside the marks."""
        n = self.n
        if self.isolated:
            self.stash = HostCopies(self.device, pinned=False).step()
            self.in_keys = []  # shared through the stages: a storage passed on keeps its number
            self.out_keys, self.numbered = [], {}
        state = clone(make_leaf(self.sample, False))  # an in-place first stage must not touch the sample
        devices = cuda_devices(state)
        origin = dict.fromkeys(storages(state), 0)  # storage -> the stage that made it (0: the input)
        # storage -> a number for it while it lives: storage keys of freed storages come back (addresses)
        ident = {key: i for i, key in enumerate(storages(state))}
        if self.isolated:
            self.numbered.update({i: (block_bytes(key), key in self.excluded) for key, i in ident.items()})
        param_marks = _parameter_marks(self.params)  # Note [Parameters a forward writes]
        with torch.no_grad():
            for s, fn in enumerate(self.fns):
                if self.isolated:
                    self.stash.offload(s, state)
                    self.stash.release(s)
                    self.in_keys.append([ident.get(storage_key(t)) for t in tensors(state)])  # across stages
                versions = _versions(state)
                buffer_versions = [b._version for b in self.buffers]
                watched = _stage_buffers(fn, self.buffers)  # Note [Buffers written behind their versions]
                values = [b.detach().clone() for b in watched]
                rng_before = RngState.capture(devices, self.generators)
                host_before = host_rng_state()  # Note [Python's and NumPy's generators] in torch_exec/_util.py
                a = meter.mark()
                out = fn(state)
                ng_marks.append((a, meter.mark()))
                moved = host_rng_moved(host_before) if self.refuse_host_draws else []
                if moved:
                    raise host_rng_error(moved, f"stage {s + 1}'s forward ({_callable_name(fn)})",
                                         "a recomputation of the stage cannot replay (it would draw the next numbers: "
                                         "other noise, other layers skipped), and profiling's runs move on")
                drawn = rng_before.advanced(RngState.capture(devices, self.generators))
                param_marks = _refuse_parameter_writes(s, self.params, param_marks)  # the next stage's before
                alias = aliases(out, state)
                # Does the stage draw random numbers? Only such stages get their RNG state
                # recorded by the executor (and counted in its reserved bytes).
                # held_nbytes: what a caller holding the output keeps (Note [The caller holds a_N])
                # held_from: those storages by the stage that made them (Note [Outputs passed through])
                origin = {key: origin.get(key, s + 1) for key in storages(out)}
                ident = {key: ident.get(key, (s + 1, i)) for i, key in enumerate(storages(out))}
                if self.isolated:  # Note [Storages a stage drops]
                    self.out_keys.append([ident.get(storage_key(t)) for t in tensors(out)])
                    for key, number in ident.items():
                        self.numbered.setdefault(number, (block_bytes(key), key in self.excluded))
                mem[s].update(x_nbytes=state_nbytes(out), held_nbytes=held_nbytes(out), aliases=bool(alias),
                              held_from=held_from(out, origin),
                              rng=drawn is not None,
                              # what a record of the generators it advanced holds on the device (Note [Draws found
                              # at the first run] in torch_exec/_util.py)
                              rng_bytes=0 if drawn is None else drawn.nbytes(self.device.type),
                              buffer_writes=(buffer_versions != [b._version for b in self.buffers]
                                             or _buffers_changed(watched, values)))
                del values
                if not all(copyable(t) for t in tensors(out)):  # never moved to the host (Chain.swappable)
                    mem[s]["device_only"] = True
                if s == n - 1:  # the model's output: what the executor's byte model needs of it
                    external = self.excluded | {key for key, stage in origin.items() if stage == 0}
                    mem[s]["outputs"] = output_facts(out, external)
                del rng_before, drawn
                # in place, aliased or not (a view alone writes nothing): False said too, so that a profile without
                # the field is known to be older (torch_exec.join._writes_its_input)
                mem[s]["writes_input"] = versions != _versions(state)
                if mem[s]["writes_input"] and not alias:
                    mem[s]["mutates_input"] = True
                state = out
            del state, out

    def whole_memory(self, meter, mem: list) -> tuple:
        """A forward with grad holding every stage's output, its backward as plain autograd runs it, and
        plain autograd's step: (the forward's marks per stage, ``readings()``: the backward's span per
        stage, when the gradients of each a_s were first and last ready, and the plain steps' reference figures,
        once the meter has stopped)."""
        n = self.n
        g_marks = []
        # forward with grad, outputs of all earlier stages held: xbar is what the stage adds
        bounds = _Boundaries(n, meter.mark, grads=True)
        a0 = make_leaf(self.sample, self.rg)
        outs = [a0]
        with torch.enable_grad(), _closed_on_error(bounds):
            held_input = state = clone(a0)  # held as the caller holds its input
            self.readers.enter(state)
            # Note [Storages a stage drops]: storage -> the stage that made it (0: the input); what a backward saved
            origin, ever_saved = dict.fromkeys(storages(state), 0), set()
            for s, fn in enumerate(self.fns):
                versions = _versions(state)
                with self.saved_hooks() as saved:
                    a = meter.mark()
                    out = fn(state)
                    g_marks.append((a, meter.mark()))
                check_state(out, f"stage {s + 1}'s output")  # with grad: what carries one (U.check_state)
                self.note_saved(mem[s], out, state, saved)
                self.note_storages(mem[s], out, state, saved, origin, ever_saved, s + 1)
                # what the stage saved of its input stays until the input's gradient is ready (Note [Inputs
                # held through a backward]; the caller's input is held anyway)
                kept = set(saved)
                bounds.hold(s, [t for t in tensors(state) if storage_key(t) in kept])
                mem[s]["out_requires_grad"] = [t.requires_grad for t in tensors(out)]  # Note [Segment inputs]
                self.readers.note(s + 1, out)
                del saved
                bounds.watch(out, s + 1, versions)
                outs.append(out)
                state = out
        self.readers.leave()
        del state, out
        # backward as plain autograd runs it: no stage output referenced from here
        final = [t for t in tensors(outs[n]) if t.requires_grad]
        del outs, a0
        self.readers.split = True  # Note [Leaves summed stage by stage]
        self.readers.expect(final)
        bounds.done = self.readers.stage_done
        try:
            bounds.backward(final)
        finally:
            self.readers.split = False
            self.readers.flush()
        del final, held_input
        for s in range(1, n):
            mem[s - 1]["grad_held_bytes"] = bounds.grad_held_bytes(s)  # Note [Gradients that are views] (chain.py)
        # plain autograd's step, for the reference figures
        ref_start, retained, ref_end = self.metered_plain_step(meter, loss_only=False)
        loss_marks = self.metered_plain_step(meter, loss_only=True) if self.loss_only else None

        def readings():
            reference = {"store_all_peak_bytes": int(meter.between(ref_start, ref_end).peak),
                         "retained_after_forward_bytes": int(meter.between(ref_start, retained).delta)}
            if loss_marks is not None:
                reference["loss_only_peak_bytes"] = int(meter.between(loss_marks[0], loss_marks[2]).peak)
            return [bounds.span(s) for s in range(1, n + 1)], [bounds.ready(s) for s in range(1, n + 1)], reference
        return g_marks, readings

    def isolated_memory(self, meter, mem: list) -> tuple:
        """Each stage alone (Note [Profiling stage by stage]): (the forward's marks per stage,
        ``readings()``: the backward's span per stage, no ready times (each stage's
        seeds are there at its start), and what the host copies took; no plain step)."""
        g_marks = self.isolated_forward(meter.mark, mem)
        bwd_marks = self.isolated_backward(meter.mark, mem)
        host = int(self.stash.host_bytes())
        return g_marks, lambda: ([(c, d) if c is not None else None for _, _, c, d in bwd_marks], [None] * self.n,
                                 {"host_copies_bytes": host})

    def _stage_input(self, s: int):
        """Stage s's input brought back from ``stash`` (Note [Profiling stage by stage]): (the leaf, the
        state the stage takes: a non-leaf clone where it needs a gradient, as a whole pass hands it
        over, so that an in-place first op works)."""
        self.stash.prefetch(s)
        leaf = make_leaf(self.stash.acquire(s), self.flags[s])
        return leaf, map_state(lambda t: t.clone() if t.requires_grad else t, leaf)

    def isolated_forward(self, mark, mem: list) -> list:
        """Each stage's forward with grad alone, marked: ``(start, end)`` per stage; notes what each
        saves (:meth:`note_saved`), which input tensors require grad (``flags``), and which storages of
        the no-grad pass (``in_keys``) each stage's backward holds (``saved``) for :meth:`isolated_backward`."""
        marks = []
        self.flags = [self.rg]
        self.saved = []
        ever_saved: set = set()  # numbers of the storages a backward saved so far
        n = self.n
        for s, fn in enumerate(self.fns):
            leaf, state = self._stage_input(s)
            self.readers.enter(state)
            with torch.enable_grad(), self.saved_hooks() as saved:
                a = mark()
                out = fn(state)
                b = mark()
            self.readers.note(s + 1, out)
            self.readers.leave()
            self.note_saved(mem[s], out, state, saved)
            keys = set(saved)
            out_keys = self.in_keys[s + 1] if s + 1 < n else []
            self.saved.append({self.in_keys[s][i] for i, t in enumerate(tensors(state)) if storage_key(t) in keys}
                              | {out_keys[i] for i, t in enumerate(tensors(out)) if storage_key(t) in keys
                                 and i < len(out_keys)})
            self.flags.append([t.requires_grad for t in tensors(out)])
            mem[s]["out_requires_grad"] = self.flags[-1]  # Note [Segment inputs] in the executor
            # Note [Storages a stage drops], by the no-grad pass's numbers (each stage runs on copies here)
            number = {storage_key(t): self.in_keys[s][i] for i, t in enumerate(tensors(state))}
            number.update({storage_key(t): self.out_keys[s][i] for i, t in enumerate(tensors(out))
                           if i < len(self.out_keys[s])})
            number.pop(None, None)
            ever_saved |= {number[key] for key in keys if key in number}
            self.note_numbered(mem[s], {number.get(key) for key in storages(out)},
                               {number.get(key) for key in storages(state)},
                               {number[key] for key in keys if key in number}, ever_saved)
            del saved, state, out, leaf
            marks.append((a, b))
        self.stash.restart(frozenset(range(n)))  # the host copies serve the next pass again
        return marks

    def isolated_backward(self, mark, mem: list | None = None) -> list:
        """Each stage alone, last to first: its forward with grad, then its backward from the gradient
        of its output that the stage after it made, as that stage's backward handed it over (a hook on
        the input: a broadcast gradient stays one), the last stage's seeded with ones and held to the
        end as a whole pass seeds a_N; ended by the gradient of its input: ``(forward start, forward
        end, backward start, backward end)`` per stage, the backward's None when no gradient reaches the
        stage. As in a whole pass, its output is gone before its backward unless the stage saved it,
        its input is held until its gradient is ready (Note [Inputs held through a backward]), and the
        input tensors an earlier stage's backward saved (or, for the first stage, the caller's input)
        stay held after it. With ``mem`` (the memory pass), each stage's ``grad_held_bytes``: the
        storages behind the gradient of its output (Note [Gradients that are views] in gpusolve/chain.py)."""
        n = self.n
        marks = [None] * n
        grad = None  # the gradient of the current stage's output, made by the stage after it
        earlier = [set()]  # per stage: storages the stages before it saved
        for s in range(n - 1):
            earlier.append(earlier[-1] | self.saved[s])
        for s in range(n - 1, -1, -1):
            leaf, state = self._stage_input(s)
            held = [t for t, key in zip(tensors(state), self.in_keys[s], strict=False) if s == 0 or key in earlier[s]]
            bounds = _Boundaries(1, mark)
            bounds.watch(state, 0)  # its input's gradient ends its backward
            if mem is not None:  # what the stage saved of its input: Note [Inputs held through a backward]
                bounds.hold(0, [t for t, key in zip(tensors(state), self.in_keys[s], strict=False)
                                if key in self.saved[s]])
            got = {}
            hooks = [t.register_hook(lambda g, i=i: got.__setitem__(i, g))
                     for i, t in enumerate(tensors(state)) if t.requires_grad]
            if mem is not None:
                self.readers.enter(state)
            with torch.enable_grad(), _closed_on_error(bounds):
                a = mark()
                out = self.fns[s](state)
                b = mark()
            if mem is not None:  # the parts of shared leaves this backward makes (Note [A leaf read twice in one
                self.readers.note(s + 1, out, count=False)  # stage] in gpusolve/chain.py)
                self.readers.leave()
            count = len(tensors(state))
            del state
            final = [t for t in tensors(out) if t.requires_grad]
            seeds = None if grad is None else [g for t, g in zip(tensors(out), grad, strict=False) if t.requires_grad]
            del out, grad
            if seeds is not None and any(g is None for g in seeds):  # no gradient reached some: leave them out
                final, seeds = [t for t, g in zip(final, seeds) if g is not None], [g for g in seeds if g is not None]
            bounds.backward(final, seeds=seeds)
            del final, seeds, held
            for hook in hooks:
                hook.remove()
            span = bounds.span(1)
            marks[s] = (a, b) + (span if span is not None else (None, None))
            grad = [got.get(i) for i in range(count)]
            if s > 0 and mem is not None:  # the gradients of a_s as the next stage's backward handed them over
                mem[s - 1]["grad_held_bytes"] = sum(grad_storages(grad).values())
            del leaf  # the leaf's .grad (AccumulateGrad may have made a dense copy) goes with it
        del grad
        self.stash.restart(frozenset(range(n)))
        return marks

    def metered_plain_step(self, meter, loss_only: bool) -> tuple:
        """One plain autograd step (forward, backward), marked: (start, after the forward, end). The
        caller holds every output through the backward and seeds a gradient for each (what any loop
        uses at most), or with ``loss_only`` keeps and back-propagates only the scalar outputs (its
        loss: ``caller_keeps="loss"``, Note [The caller holds a_N] in torch_exec/executor.py). The
        input is not part of the step's peak, and it stays held through the step as the caller's tensor
        does (a first stage that does not save it would otherwise free it inside the measured region
        and lower every later reading by its size)."""
        held_input = state = clone(make_leaf(self.sample, self.rg))
        check = not loss_only  # Note [Drops measured]: once, in the step that holds every output
        start = meter.mark()
        with torch.enable_grad():
            for s, fn in enumerate(self.fns):
                watch = self.dropping.get(s) if check else None
                refs = {i: _storage_ref(tensors(state)[i]) for i in watch} if watch else None
                state = fn(state)
                if refs:
                    self.outlived[s] = {i for i, ref in refs.items() if ref is None or not ref.expired()}
                del refs
            self.drops_checked = self.drops_checked or check
            final = [t for t in tensors(state) if t.requires_grad and (t.numel() == 1 or not loss_only)]
            del state
            retained = meter.mark()
            if final:
                torch.autograd.backward(final, [torch.ones_like(t) for t in final])
        del final
        end = meter.mark()
        del held_input
        return start, retained, end

    @contextlib.contextmanager
    def saved_hooks(self):
        """Yields the storage keys of the tensors autograd saves inside the block. Only identities
        are recorded: a pack hook is kept alive by every tensor it packed, so holding the tensors
        here would keep them all until the stage's last node has run. Each is packed detached: an
        output saved as itself (with its grad_fn) keeps its graph alive through C++ references no
        collector sees until a backward releases it, which never comes for the stage-by-stage forward
        pass, nor for a whole pass that a later stage ended by raising (out of memory: the fallback
        to profiling stage by stage then ran beside the failed pass's tensors; found by a review)."""
        keys: list = []

        def pack(t):
            keys.append(storage_key(t))
            return t.detach()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield keys

    def note_saved(self, mem: dict, out, inp, saved_keys) -> None:
        """``saved_bytes``: output and saved storages that are neither the input's nor parameters or
        buffers (what the stage adds, counted from the tensors); ``out_saved_bytes`` and
        ``in_saved_bytes``: the output's and the input's storages that the stage's own backward saved
        (see ``bwd_tape_bytes`` and the fusion of stages in :mod:`gpusolve.chain`)."""
        inp_keys = set(storages(inp))
        saved = set(saved_keys)
        held = {}
        for key in list(storages(out)) + list(saved_keys):
            if key is None or key in inp_keys or key in self.excluded:
                continue
            held[key] = key[2]
        mem["saved_bytes"] = int(sum(held.values()))
        mem["out_saved_bytes"] = int(sum(nbytes for key, nbytes in storages(out).items() if key in saved))
        mem["in_saved_bytes"] = int(sum(nbytes for key, nbytes in storages(inp).items() if key in saved))

    def note_storages(self, mem: dict, out, inp, saved_keys, origin: dict, ever_saved: set, number: int) -> None:
        """``out_saved_from`` of measured stage ``number``, and the storages of its input it drops (Note [Storages a
        stage drops]; ``dropping``, which the memory pass turns into ``in_dropped_from`` once the plain step has
        checked them: Note [Drops measured]), from a pass holding every stage's output: ``origin`` maps each storage
        to the stage that made it (the chain's input: 0) and gets this stage's new ones; ``ever_saved`` holds the
        storages any backward so far saved and gets this stage's."""
        ever_saved.update(key for key in saved_keys if key is not None)
        outs = storages(out)
        for key in outs:
            origin.setdefault(key, number)
        saved = set(saved_keys)
        mem["out_saved_from"] = by_origin((origin[key], block_bytes(key)) for key in outs
                                          if key in saved and key not in self.excluded)
        dropped = {key for key in storages(inp) if origin.get(key) and key not in outs and key not in ever_saved
                   and key not in self.excluded}
        position = {}  # Note [Drops measured]: a tensor of the input that holds each
        for i, t in enumerate(tensors(inp)):
            key = storage_key(t)
            if key in dropped:
                position.setdefault(key, i)
        self.dropping[number - 1] = {position[key]: (origin[key], block_bytes(key)) for key in dropped}

    def note_numbered(self, mem: dict, outs: set, ins: set, saved: set, ever_saved: set) -> None:
        """:meth:`note_storages` stage by stage (Note [Profiling stage by stage]): storages by their numbers in
        the no-grad pass (``outs``, ``ins``: the output's and the input's; ``saved``: what this stage's
        backward saved; ``ever_saved``: what any backward so far saved), their bytes that pass's."""
        outs, ins = outs - {None}, ins - {None}

        def origin(num) -> int:  # the input's storages are numbered by ints, a stage's by (stage, index)
            return num[0] if isinstance(num, tuple) else 0

        def pairs(numbers):  # (origin, bytes) of the storages not excluded (parameters, buffers)
            return [(origin(num), self.numbered[num][0]) for num in numbers if not self.numbered[num][1]]

        mem["out_saved_from"] = by_origin(pairs(outs & saved))
        mem["in_dropped_from"] = by_origin((o, b) for o, b in pairs(ins - outs - ever_saved) if o)

    # timing passes ----------------------------------------------------------
    def nograd_pass(self):
        marks = []
        state = clone(make_leaf(self.sample, False))
        with torch.no_grad():
            marks.append(self.mark())
            for fn in self.fns:
                state = fn(state)
                marks.append(self.mark())
            del state
        self.sync()
        return self._spans((marks[s], marks[s + 1]) for s in range(self.n))

    def nograd_forward(self) -> float:
        """One no-grad forward through every stage, timed whole."""
        state = clone(make_leaf(self.sample, False))
        with torch.no_grad():
            start = self.mark()
            for fn in self.fns:
                state = fn(state)
            stop = self.mark()
            del state
        self.sync()
        return max(0.0, self.elapsed(start, stop))

    def grad_pass(self):
        n = self.n
        if self.isolated:
            marks = self.isolated_backward(self.mark)
            self.sync()
            return (self._spans((a, b) for a, b, _, _ in marks),
                    self._spans(None if c is None else (c, d) for _, _, c, d in marks))
        spans = []  # (start, end) per stage: the pass's own bookkeeping between stages is in neither (below)
        bounds = _Boundaries(n, self.mark)
        a0 = make_leaf(self.sample, self.rg)
        with torch.enable_grad():
            state = clone(a0)
            for s, fn in enumerate(self.fns):
                # what the backward marks need (the input's versions, hooks on the output) costs the host about
                # 9 us per stage with one tensor and 190 us with 32 (a review, 2026-11-29): outside the stage's
                # span, else a host-bound network's stages read the profiler's own work (Note [Host time of a
                # stage]), and on CUDA the device's wait for it
                versions = _versions(state)
                start = self.mark()
                state = fn(state)
                spans.append((start, self.mark()))
                bounds.watch(state, s + 1, versions)
        final = [t for t in tensors(state) if t.requires_grad]
        del state, a0
        bounds.backward(final)
        del final
        self.sync()
        return self._spans(spans), self._spans(bounds.span(s) for s in range(1, n + 1))

    def plain_step(self) -> float:
        start = self.mark()
        with torch.enable_grad():
            state = clone(make_leaf(self.sample, self.rg))
            for fn in self.fns:
                state = fn(state)
            final = [t for t in tensors(state) if t.requires_grad]
            if final:
                torch.autograd.backward(final, [torch.ones_like(t) for t in final])
        del state, final
        stop = self.mark()
        self.sync()
        return self.elapsed(start, stop)


def _storage_ref(t) -> StorageWeakRef | None:
    """A weak reference to ``t``'s storage; None where it has none to refer to (a wrapper subclass)."""
    try:
        return StorageWeakRef(t.untyped_storage())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


@contextlib.contextmanager
def _closed_on_error(bounds):
    """Closes ``bounds`` (:meth:`_Boundaries.close`) when the block raises: no backward will."""
    try:
        yield
    except BaseException:
        bounds.close()
        raise


class _Boundaries:
    """The stage boundaries of one backward pass, as marks of a clock or meter (``mark()``).

    ``watch(out, s)`` puts a gradient hook on a_s = ``out`` as the stage making it has run: a mark
    when its gradient is ready (stage s's backward starts). The hook stays on the node that made
    the tensor, so an in-place stage after it does not move it. ``backward(final)`` seeds the
    gradient of a_N (held when its backward starts) and runs the backward; ``span(s)`` is stage s's
    (start, stop): it ends when the gradient of a_{s-1} is ready, or with the whole backward when
    nothing upstream needs a gradient (a first stage taking integer ids still runs its backward: it
    reaches the stage's parameters). None when no gradient reached a_s.

    ``hold(s, tensors)`` (the memory passes) keeps tensors of a_s referenced until the last hooked
    gradient of a_s is ready, and drops them just before that mark (Note [Inputs held through a
    backward]). ``close()`` drops what is held and removes the hooks (also where no backward runs:
    a held tensor's hook refers back to this object, a cycle through C++ no collector sees).
    """

    def __init__(self, n: int, mark, grads: bool = False):
        self.n, self.mark, self.grads = n, mark, grads
        self.held: list = [[] for _ in range(n + 1)]  # tensors of a_s kept until its gradients are ready
        self.waiting = [0] * (n + 1)                   # hooked gradients of a_s not ready yet
        self.at: list = [None] * (n + 1)    # when a gradient of a_s is first ready: stage s may start
        self.last: list = [None] * (n + 1)  # when the last one is: stage s + 1's backward is done
        self.dropped: list = [None] * (n + 1)  # what is held of a_s dropped after stage s started: just before
        # the storages behind the gradients of a_s as the engine hands them over (Note [Gradients that are
        # views] in gpusolve/chain.py): keys only, no tensor kept
        self.grad_buffers: list = [{} for _ in range(n + 1)]
        self.handles: list = []
        # (id, version) of a hooked tensor -> (a weak reference to it, the boundaries s it is a_s of): one hook for
        # a tensor several alias stages pass on as itself (Note [Inputs held through a backward])
        self.hooked: dict = {}
        self.end = None
        self.done = None  # called with s once stage s's backward has ended (the last gradient of a_{s-1} ready)

    def watch(self, out, s: int, passed: dict | None = None) -> None:
        """Hook a_s = ``out``. Tensors the stage passed on untouched from its input (``passed``:
        :func:`_versions` of the input) are left out: their gradient is complete only after
        this stage's own backward has added to it, so their hook would move the mark past that
        backward (the stage's backward would read as empty and be charged to the next stage).
        When every tensor was passed on, all are hooked."""
        if s >= self.n:
            return
        grads = [t for t in tensors(out) if t.requires_grad]
        made = [t for t in grads if passed is None or passed.get(id(t)) != t._version]
        hooked = made or grads
        self.waiting[s] = len(hooked)
        for t in hooked:
            key = (id(t), t._version)
            known = self.hooked.get(key)
            if known is not None and known[0]() is t:  # passed on as itself by the stages since: its hook serves s too
                known[1].append(s)
                continue
            boundaries = [s]
            self.hooked[key] = (weakref.ref(t), boundaries)
            self.handles.append(register_grad_hook(t, lambda g, boundaries=boundaries:
                                                   self._reached_last_first(boundaries)))
        if self.grads:  # the memory pass (a timing pass runs no more Python in the backward than it must)
            self.handles += [register_grad_hook(t, lambda g, s=s: self.grad_buffers[s].update(grad_storages([g])))
                             for t in grads]

    def hold(self, s: int, held: list) -> None:
        """Keep ``held`` (tensors of a_s) referenced until the last hooked gradient of a_s is ready."""
        self.held[s] += held

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.hooked = {}
        self.held = [[] for _ in range(self.n + 1)]

    def grad_held_bytes(self, s: int) -> int:
        """Bytes the gradients of a_s held, in the allocator's blocks (Note [Gradients that are views] in
        gpusolve/chain.py)."""
        return sum(self.grad_buffers[s].values())

    def _reached_last_first(self, boundaries: list) -> None:
        """The gradient of a tensor that is a_s for every s of ``boundaries`` is ready: the latest boundary first,
        so what is held of it for a later stage is dropped before an earlier stage's start mark (Note [Inputs
        held through a backward])."""
        for s in reversed(boundaries):
            self._reached(s)

    def _reached(self, s: int) -> None:
        """A gradient of a_s is ready. With a tuple state the engine may run part of stage s's backward
        before the gradient of another of its tensors is ready (seen under float16 autocast): stage s
        starts at the first, stage s + 1 ends at the last, and both count what runs in between. What
        :meth:`hold` keeps of a_s is dropped at the last, before its mark: stage s + 1's backward reads
        the freeing at its end (Note [Inputs held through a backward])."""
        if self.waiting[s]:
            self.waiting[s] -= 1
            if not self.waiting[s]:
                if self.held[s] and self.at[s] is not None:  # stage s has started with them held
                    self.dropped[s] = self.mark()
                self.held[s] = []
        if not self.waiting[s] and self.done is not None:  # before the mark: stage s + 1 reads what it frees
            self.done(s + 1)
        mark = self.mark()
        if self.at[s] is None:
            self.at[s] = mark
        self.last[s] = mark

    def backward(self, final: list, seeds: list | None = None) -> None:
        """``seeds``: the gradients of ``final`` that a later stage's backward made (Note [Profiling
        stage by stage]): freed as the engine consumes them, with ``final`` (both lists are emptied).
        Without, ones held to the end, as a caller's seed of a_N is."""
        release = seeds is not None
        if seeds is None:
            seeds = [torch.ones_like(t) for t in final]
        try:
            if release:  # both lists emptied (the caller's references go too); the output is then gone,
                # unless the stage saved it, when its gradient is ready: as in a whole pass
                tape = [tuple(final)]
                final.clear()
                backward_segment(tape, seeds, started=lambda: self._reached(self.n))
            else:
                self.at[self.n] = self.mark()
                if final:
                    torch.autograd.backward(final, seeds)
            del seeds
            self.end = self.mark()
        finally:
            self.close()  # what is held of an a_s no gradient reached goes after the last mark

    def ready(self, s: int):
        """(first, dropped, last): when the first and the last hooked gradient of a_s were ready, and when what
        :meth:`hold` kept of a_s was dropped between them (None where it was not: nothing held, or one gradient);
        None when no gradient of a_s was ready (or a_N, whose seed is there at the start). Note [Gradients ready
        one by one] in gpusolve/chain.py."""
        return None if self.at[s] is None or self.last[s] is None else (self.at[s], self.dropped[s], self.last[s])

    def span(self, s: int):
        start = self.at[s]
        if start is None:
            return None
        return start, next((self.last[r] for r in range(s - 1, -1, -1) if self.last[r] is not None), self.end)


class _CpuProfiler(_Passes):
    """CPU times from ``time.perf_counter``; memory from the CPU allocator's events."""

    def __init__(self, fns, sample, device=None, state=None, loss_only: bool = False, isolated: bool = False):
        super().__init__(fns, sample, torch.device("cpu"), state, loss_only, isolated)

    def mark(self):
        return time.perf_counter()

    def elapsed(self, a, b):
        return (b - a) * 1e3


class _Stamp(NamedTuple):
    """A mark of :class:`_CudaProfiler`: a CUDA event recorded on the stream, and the host's clock then."""
    event: object
    host: float


class _CudaProfiler(_Passes):
    """CUDA events for times; the caching allocator's counters for memory (no synchronisation); the host's
    clock beside each event (Note [Host time of a stage])."""

    host_clock = True

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return _Stamp(event, time.perf_counter())

    def elapsed(self, a, b):
        return a.event.elapsed_time(b.event)

    def host_elapsed(self, a, b):
        return (b.host - a.host) * 1e3

    def sync(self):
        torch.cuda.synchronize(self.device)
