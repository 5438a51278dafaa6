"""Measured memory of training steps, beside the plan's prediction and the budget.

:class:`StepMeter` is owned by a :class:`~torch_exec.CheckpointedSequential`. While armed, it
measures each step of the wrapper (from the start of its forward to the end of its backward) with
a :class:`~torch_exec.meter.MemoryMeter`: the CUDA allocator's counters on a GPU (armed for the
first steps by default: reading them costs nothing), the CPU allocator's events on the CPU (only
when asked: the CPU meter slows the step it watches). :meth:`StepMeter.report` is what
``model.memory_report()`` returns.

The budget does not count parameter gradients (nor the parameters, the optimizer state or the input
a_0): plans are made with parameter gradients already allocated, so that each new gradient is the
workspace of the stage whose backward computes it until it is added into ``.grad``. A step that
starts with ``.grad`` None (``optimizer.zero_grad()`` sets them to None by default) allocates them
during its backward: Note [Gradients set during the step].

Note [Gradients set during the step]
    Taking every gradient the step allocated off its peak (as this report once did) gives a lower
    bound: gradients set after the peak were not there at it. On a two-tower model under autocast
    that read 0.47 x the prediction where the step with gradients allocated read 0.996 x, and it could
    hide a step over its budget. So while a step is measured, a hook on each parameter without a
    gradient (``register_post_accumulate_grad_hook``) takes a meter mark when its ``.grad`` is first
    set. Between two such marks the step's allocated bytes are its own plus the gradients set before
    the first of them, plus at most the one being set (the stage's workspace until it is set, as the
    plans count it). The step's figure is the largest peak up to a mark minus the gradients set
    before that mark's interval began: what the same step measures with its gradients allocated,
    where each new gradient is a transient copy added into ``.grad``.

    The CPU path of an offloading plan counts the same way: its "host" buffers are the same memory as
    the "device" it measures, and the plan's pool allocates them in the first step of a plan (later
    steps take them from the pool, made before their meter started). A mark is taken before each new
    buffer, which counts below from then on (:meth:`StepMeter.note_host_buffer`): every step of the plan
    reads alike. Before, the first step read over its budget by exactly the buffers (a review's MLP:
    1311752 B against a 721412 B budget, then 656392 B from step 2 on).

    A call that names the parameters (``torch.autograd.grad(loss, params)``) sets no ``.grad``: the schedule
    hands the engine the gradients it makes (Note [Autograd calls that name tensors] in the executor), and
    each is marked as it is first made (:meth:`StepMeter.note_param_grad`). Before, they counted as the
    step's own bytes: a residual MLP within its budget by ``backward()`` read 516 380 B against 191 388 B,
    with a warning to re-profile (a review, 2026-11-28: bench/repros/rv7_train_autograd_grad_budget.py).
"""
from __future__ import annotations

import atexit
import warnings
import weakref
from dataclasses import asdict, dataclass

import torch

from gpusolve.errors import warn_once
from gpusolve.units import exact_bytes, format_bytes

from ._util import allocator_reserve_bytes, grad_storages, storage_key
from . import meter as _meter_module
from .meter import MarksLostError, MemoryMeter, ProfilerBusyError


class MemoryBudgetWarning(UserWarning):
    """A measured step peak exceeded the budget the plan was made for."""


@dataclass
class StepRecord:
    """One measured step. Sizes in bytes."""

    step: int
    device: str
    budget: int | None
    predicted_peak: int
    measured_peak: int
    param_grad_bytes_allocated: int
    plan: str
    held_before: int = 0    # made before the meter started and held through the step (the wrapper's held_bytes)
    # the peak of the code run before the meter started, above the step's start (auto_checkpoint's
    # prologue: Note [Side values nothing reads] in torch_exec/auto.py); 0 when there is none
    before_peak: int = 0
    # the peak beyond the gradients set before each moment (Note [Gradients set during the step]); None:
    # only the whole peak is known, and the gradients the step allocated are taken off it
    peak_beyond_set_grads: int | None = None
    # the wrapper's calls the step made before its backward (two views of a batch, R-Drop): every call's
    # checkpoints are held until the backward, where the plan is for one call (Note [Calls before one backward])
    calls: int = 1

    @property
    def beyond_param_grads(self) -> int:
        """The measured peak beyond parameter gradients (Note [Gradients set during the step]), plus
        what the caller made before the step's meter started and holds through it (``held_before``:
        auto_checkpoint's side data, the exact bytes of its storages), which the budget counts; or the
        peak of the code run before the meter started (``before_peak``), where that is higher."""
        if self.peak_beyond_set_grads is not None:
            beyond = self.peak_beyond_set_grads + self.held_before
        else:
            beyond = self.measured_peak + self.held_before - self.param_grad_bytes_allocated
        return max(beyond, self.before_peak)

    @property
    def within_budget(self) -> bool:
        return self.budget is None or self.beyond_param_grads <= self.budget

    def to_dict(self) -> dict:
        return asdict(self) | {"beyond_param_grads": self.beyond_param_grads, "within_budget": self.within_budget}


class MemoryReport(list):
    """The measured steps (a list of :class:`StepRecord`); ``str()`` is a table."""

    def __str__(self) -> str:
        if not self:
            return ("no step measured yet: on a GPU the first steps are measured; on the CPU call "
                    "model.measure_memory() before a step")
        lines = [f"{'step':>4}  {'budget':>12}  {'predicted':>12}  {'measured':>12}  {'param grads':>12}  "
                 f"{'beyond grads':>12}  ok  plan"]
        for r in self:
            budget = "-" if r.budget is None else format_bytes(r.budget)
            lines.append(f"{r.step:>4}  {budget:>12}  {format_bytes(r.predicted_peak):>12}  "
                         f"{format_bytes(r.measured_peak):>12}  {format_bytes(r.param_grad_bytes_allocated):>12}  "
                         f"{format_bytes(r.beyond_param_grads):>12}  {'yes' if r.within_budget else 'NO ':>3} {r.plan}"
                         + (f" ({r.calls} calls before one backward)" if r.calls > 1 else ""))
        return "\n".join(lines)


# Note [Calls before one backward]
#     Several calls of a wrapper before one backward (two views of a batch, R-Drop, micro-batches summed) are one
#     step: every call's checkpoints and call data stay held until the backward, while a plan is made for one
#     call. A measurement requested for the step (``measure_memory``) began at the first call, and the second
#     call's start abandoned it as a forward without backward: no record, no warning, and the request used up
#     (a review, 2026-11-28: bench/repros/rv7_train_two_forwards_unmeasured.py, a step measured apart at 1.66x
#     the budget). A call while a measurement waits for its backward now joins it where an earlier call's step
#     still waits (its runtime in the executor's ``IN_FLIGHT``; a plain step leaves none and joins): one record
#     for the calls and their backward (``StepRecord.calls``), held to the budget like any step, its warning
#     naming the calls. A forward whose graph was dropped without a backward is given up, as before.


def _calls_hint(record: StepRecord) -> str:
    if record.calls <= 1:
        return ""
    return (f"; the step made {record.calls} calls of the model before one backward, and each call's checkpoints "
            f"are held until it, where the plan is for one call: back-propagate each call's loss before the next "
            f"call (the gradients accumulate the same), or lower the budget for the calls (Note [Calls before one "
            f"backward] in torch_exec/report.py)")


class _GradientsSet:
    """Meter marks taken when each parameter's ``.grad`` is first set during a measured step, with the
    gradient's bytes (Note [Gradients set during the step])."""

    def __init__(self, meter: MemoryMeter, params, device):
        self.meter = meter
        self.marks: list[tuple[int, int]] = []  # (mark, bytes set just before it, or allocated just after it)
        self.host = 0                            # bytes of the host buffers among them (CPU offloading)
        self.named = 0                           # bytes of the gradients an autograd.grad call returned among them
        self.seen: set = set()                   # buffers counted for gradients that are views of them
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(device)) for p in params]

    def _hook(self, device):
        done = [False]

        def hook(p):
            if done[0] or p.grad is None or p.grad.device != device:
                return
            done[0] = True
            # CUDA: the peak counter is left alone, so a caller's max_memory_allocated() still reads the step
            self.marks.append((self.meter.mark(reset_peak=False), _held_by_grad(p.grad, self.seen)))
        hook.meter_hook = True  # never deferred (torch_exec._util.leaf_hooks_deferred)
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def peak_beyond(self, closing: int, grads: int) -> int:
        """The largest peak up to each mark (the closing one last) minus the gradients set (and host
        buffers allocated) before that mark's interval began; ``grads``: the bytes of every gradient the
        step allocated, for the part after the last mark (no gradient is set there unless a hook missed
        it: then it counts too)."""
        first, below, best = self.meter.first_mark, 0, 0
        for mark, nbytes in self.marks:
            best = max(best, self.meter.between(first, mark).peak - below)
            below += nbytes
        return int(max(best, self.meter.between(first, closing).peak - max(below, grads + self.host)))


_LIVE: "weakref.WeakSet[StepMeter]" = weakref.WeakSet()


@atexit.register
def _finalize_all() -> None:
    """A measured step whose record was never read leaves its CPU meter (torch.profiler) running: stopped
    at the interpreter's exit, where a running profiler crashed it (SIGSEGV)."""
    for meter in list(_LIVE):
        try:
            meter.finalize()
        except Exception:  # noqa: BLE001, S110 - exiting: nothing to report to
            pass


def _record_waiting() -> None:
    """Another CPU meter is about to start (Note [One profiler per thread] in torch_exec/meter.py)."""
    for meter in list(_LIVE):
        meter.give_way()


_meter_module._WAITING.append(_record_waiting)


def _grad_bytes(pending) -> int:
    """Bytes of the gradients a measured step allocated (its parameters without one when it began),
    read when its backward ends: by the time the record is made (the next step, or the report read) an
    optimizer loop's ``zero_grad()`` has freed them."""
    without_grad, device, seen = pending[1], pending[4], set()
    return sum(_held_by_grad(p.grad, seen) for p in without_grad if p.grad is not None and p.grad.device == device)


def _held_by_grad(grad: torch.Tensor, seen: set) -> int:
    """Bytes a parameter's gradient holds: its storage's, once (``seen``: the storages counted). Autograd may keep a
    slice of a larger buffer as ``.grad`` (a ``cat``'s gradient: MobileBERT's head reads ``cat([decoder.weight.t(),
    dense.weight])``, and ``dense.weight.grad`` is half of that gradient's storage); counted by the tensor's size
    alone, such a step measured 1.068 x its budget at its least (a review: bench/repros/
    rv19d_hf_mobilebert_grad_view_storage_over_budget.py)."""
    nbytes = grad.numel() * grad.element_size()
    strided = isinstance(grad, torch.Tensor) and grad.layout == torch.strided  # not sparse, not a test's stand-in
    key = storage_key(grad) if strided else None  # (device, address, bytes); None where it has no storage
    if key is None:
        return nbytes
    if key in seen:
        return 0
    seen.add(key)
    return max(key[2], nbytes)


PLAIN_TURN = "plain"  # StepMeter.plain_turn's reading: the step's shortfall alone


class StepMeter:
    """Arms, runs and records step measurements for one wrapper (see the module docstring).

    Note [Ending a measurement inside a backward]: autograd's engine runs nodes and queued callbacks
    under the thread-local state captured when ``backward()`` began, profiler state included, so a
    CPU meter cannot be stopped from inside the backward. :meth:`end` (called there) only takes the
    closing mark; :meth:`finalize` stops the meter and records the step later, outside it (at the
    next step, or when the report is read).
    """

    def __init__(self, cuda_steps: int = 3):
        _LIVE.add(self)
        self.cuda_steps = cuda_steps    # steps measured automatically on a CUDA device
        self.armed = 0                  # steps measured on request (any device)
        self._records = MemoryReport()
        self.steps = 0
        self._pending = None            # measuring: (meter, params without grad, plan, budget, device)
        self._opened = None             # started at the model's call, for begin() to adopt (open)
        self._postponed = False         # the next begin() starts no meter (postpone)
        self._ended = None              # ended, not yet recorded: (the same, closing mark)
        self._calls = 0                 # calls in the pending measurement (Note [Calls before one backward])
        self._pending_armed = False     # whether the pending measurement took one of ``armed``
        self._ended_calls = 0
        self._warned = False
        self._before_peak = 0           # the next step's code before its meter starts (note_before_peak)
        self._turn = None               # Note [The caller's turn]: [step, mark at the forward's return, (mark, grads)
        #                                 at the backward's start, what learns from them]

    def due(self, device: torch.device) -> bool:
        """Whether the next step on ``device`` is measured."""
        return self.armed > 0 or (device.type == "cuda" and self.cuda_steps > 0)

    def note_host_buffer(self, nbytes: int) -> None:
        """A CPU offloading plan is about to allocate a "host" buffer of ``nbytes`` in the memory this
        step's meter reads: from now on the step's figure leaves it out (Note [Gradients set during
        the step]). Nothing when no step is measured."""
        if self._pending is not None:
            sets = self._pending[-1]
            sets.marks.append((sets.meter.mark(reset_peak=False), int(nbytes)))
            sets.host += int(nbytes)

    def join_call(self) -> None:
        """A call of another input signature of the same model joins the pending measurement (Note [Calls
        before one backward])."""
        if self._pending is not None:
            self._calls += 1

    def note_param_grad(self, grad: torch.Tensor) -> None:
        """A parameter's gradient that an autograd call naming the parameters (``autograd.grad``) gets, made just
        now: counted as a gradient set on ``.grad`` is (Note [Gradients set during the step]). Nothing when no
        step is measured."""
        if self._pending is not None and grad.device == self._pending[4]:
            sets = self._pending[-1]
            nbytes = grad.numel() * grad.element_size()
            sets.marks.append((sets.meter.mark(reset_peak=False), nbytes))
            sets.named += nbytes

    def turn_start(self, learn) -> None:
        """At the return of the wrapper's forward in a measured step of one call: mark it (Note [The caller's
        turn] in torch_exec/executor.py); ``learn(peak, kept, grads, over, excess, unsplit)`` gets the reading when
        the step is recorded over its budget (:meth:`_learn_turn`)."""
        if self._pending is not None and self._calls == 1:
            self._turn = [self._pending, self._pending[0].mark(reset_peak=False), None, learn]

    def turn_end(self, grads) -> None:
        """At the start of the wrapper's backward (``grads``: a_N's gradients it got, their bytes read only where a
        turn is being measured): the turn's closing mark."""
        turn = self._turn
        if turn is not None and turn[0] is self._pending and turn[2] is None and self._calls == 1:
            turn[2] = (self._pending[0].mark(reset_peak=False), sum(grad_storages(grads).values()))

    def plain_turn(self, learn) -> None:
        """At the return of a plain autograd step's forward in a measured step of one call: ``learn(short)`` gets
        how far the step's peak was above its prediction when the step is recorded over its budget (Note [The
        caller's turn] in torch_exec/executor.py: no mark splits a plain step's turn from its backward)."""
        if self._pending is not None and self._calls == 1:
            self._turn = [self._pending, None, PLAIN_TURN, learn]

    def _learn_turn(self, step, meter: MemoryMeter, room: int | None, excess: int, unsplit: int = 0,
                    slack: int = 0) -> None:
        """Hand the recorded step's turn reading to its learner where the caller's code itself went over the
        budget (``room``: the budget less what was held before the meter started; None: no budget): the peak
        above the forward's return (where the meter knows it: :meth:`MemoryMeter.rose_between`), what was still
        held at the backward's start, a_N's gradients among it, how far the turn's own peak went over, and the
        step's ``excess`` over the budget (what that code still holds at the backward's start is held through the
        backward, where the step's peak may be), and what the CUDA allocator's blocks held beyond the bytes asked for
        at the step's peak (``unsplit``, :func:`torch_exec.meter.unsplit_bytes`; Note [Allocator blocks learned] in
        torch_exec/executor.py)."""
        turn, learns, self._turn = self._turn, self._learns_turn(step), None
        if not learns or room is None or excess <= 0:
            return  # a step within its budget teaches nothing: its record counts host buffers and gradients set,
            # which the raw levels below do not take off (a review: rv12c_diff_caller_turn_cpu_host_buffers)
        if turn[2] is PLAIN_TURN:
            turn[3](excess + slack)
            return
        (closing, grads), start = turn[2], turn[1]
        reading = meter.between(start, closing)
        peak = reading.peak if meter.rose_between(start, closing) else max(reading.delta, 0)
        over = reading.start + peak - room  # the turn's own level against the budget (raw: an upper bound)
        turn[3](peak, reading.delta, grads, over, excess, unsplit, slack)

    def _learns_turn(self, step) -> bool:
        """Whether the recorded ``step`` has a turn reading (the wrappers that mark it: Note [The caller's turn])."""
        turn = self._turn
        return turn is not None and turn[0] is step and turn[2] is not None

    def note_before_peak(self, peak: int) -> None:
        """The peak the next step reaches before its meter starts (auto_checkpoint's prologue, measured by
        its caller when :meth:`due`): the step's record counts it (``StepRecord.before_peak``)."""
        self._before_peak = int(peak)

    @property
    def measuring(self) -> bool:
        return self._pending is not None

    @property
    def records(self) -> MemoryReport:
        self.finalize()
        return self._records

    def arm(self, steps: int = 1) -> None:
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        self.armed = steps

    # ------------------------------------------------------------ one step
    def open(self, device: torch.device, params) -> None:
        """At the start of the model's call, before the code that runs ahead of the wrapper's stages: start
        the step's meter there when one is due and nothing is measured (auto_checkpoint's block fallback: Note
        [A step measured from the model's call]); :meth:`begin` then adopts it, taking nothing as held before."""
        if self._pending is None and self._opened is None and self.due(device):
            self._opened = self._start(device, params)

    def postpone(self) -> None:
        """The next :meth:`begin` (this call's, which profiles before it) starts no meter: the step stays due, and
        the next call is measured from the model's call (auto_checkpoint's block fallback on the CPU: Note [A step
        measured from the model's call] in torch_exec/auto.py); :meth:`resume` undoes it."""
        self._postponed = True

    def resume(self) -> None:
        """Undo :meth:`postpone` where no step began since."""
        self._postponed = False

    def withdraw(self) -> None:
        """Give up a meter :meth:`open` started, whose step now profiles (a CPU meter cannot run beside the
        profiler's own): the step stays due, measured as it was before the model's call was metered."""
        if self._opened is not None:
            self._opened, (meter, _, _, armed) = None, self._opened
            self._undo_start(meter, device_type=meter.device.type, armed=armed)

    def begin(self, device: torch.device, params, plan, budget, plain: bool, held: int = 0,
              join: bool = True) -> None:
        """At the start of a step's forward: start a meter when one is due (``plain``: the step runs
        as plain autograd; ``held``: bytes made before it and held through the step). A call while a
        measurement waits for its backward joins it where ``join`` (an earlier call's step is still
        waiting: Note [Calls before one backward]); otherwise that measurement is given up. A meter
        :meth:`open` started at the model's call is this step's: it has seen what was made before, so
        nothing is added as held."""
        if self._pending is not None and join:
            self.join_call()
            return
        if self._postponed:  # :meth:`postpone`: the step counts, its measurement stays due
            self._postponed = False
            self.steps += 1
            return
        started, self._opened = self._opened, None
        if started is not None:
            held = 0
        else:
            started = self._start(device, params)
        self.steps += 1
        before, self._before_peak = self._before_peak, 0
        if started is None:
            return
        meter, without_grad, device, self._pending_armed = started
        kind = "store-all (plain autograd)" if plain else plan.backend
        sets = _GradientsSet(meter, without_grad, device)
        self._pending = (meter, without_grad, plan, budget, device, self.steps, kind, (held, before), sets)
        self._calls = 1

    def _start(self, device: torch.device, params):
        """A new step's meter (the step before it recorded), started when one is due, as ``(meter, parameters
        without a gradient, device, whether it took one of armed)``; None when none is due or the user's profiler
        records. :meth:`begin` counts the step."""
        self.finalize()
        if not self.due(device):
            return None
        without_grad = [p for p in params if p.requires_grad and p.grad is None]
        meter = MemoryMeter(device)
        meter.abandonable = True  # stopped unread when its wrapper is gone and another meter must start
        try:
            meter.__enter__()
        except ProfilerBusyError:  # the user's torch.profiler or MemoryMeter records: the step stays due
            warn_once("a measured step is not measured while your torch.profiler or memory meter records (on the CPU "
                      "the meter is a profiler, and torch runs one at a time); it is measured at the next step outside "
                      "it (Note [One profiler per thread] in torch_exec/meter.py)", MemoryBudgetWarning, stacklevel=4)
            return None
        armed = self.armed > 0
        if armed:
            self.armed -= 1
        elif device.type == "cuda":
            self.cuda_steps -= 1
        return meter, without_grad, device, armed

    def _undo_start(self, meter: MemoryMeter, device_type: str, armed: bool) -> None:
        """A started measurement given up unread: the step it took stays due."""
        if armed:
            self.armed += 1
        elif device_type == "cuda":
            self.cuda_steps += 1
        try:
            meter.__exit__(None, None, None)
        except Exception:  # noqa: BLE001, S110 - the readings of an abandoned step are not needed
            pass

    def end_with_backward_of(self, outputs) -> None:
        """End the pending measurement when the backward pass through ``outputs`` has finished: a
        hook on them that fires when the backward reaches any of them queues :meth:`end` on autograd's
        engine, which runs its queued callbacks once the whole backward pass is done. (A hook on the first
        output alone never fired for a loss on another one, RAFT's last flow prediction: the step was not
        recorded, and its CPU meter kept recording into the next step; a review, 2026-11-28:
        bench/repros/rv11_tv_plain_step_meter_first_output.py.)"""
        outputs = [t for t in outputs if t.requires_grad]
        if not outputs or self._pending is None:
            return
        step = self._pending

        def ended():  # each backward through the outputs (heads back-propagated one by one) moves the step's end
            if self._pending is step:
                self.end()
            elif self._ended is not None and self._ended[0] is step:
                self._ended = (step, step[0].mark(reset_peak=False, unsplit=True), _grad_bytes(step) + step[-1].named)

        def hook(grads):
            torch.autograd.Variable._execution_engine.queue_callback(ended)
        torch.autograd.graph.register_multi_grad_hook(outputs, hook, mode="any")

    def end(self) -> None:
        """At the end of the step's backward: the closing mark (Note [Ending a measurement inside a
        backward])."""
        if self._pending is None:
            return
        # The step's last mark leaves CUDA's peak counter alone: a caller who reset it before the step
        # reads the step's peak from torch.cuda.max_memory_allocated() after its backward.
        self._ended = (self._pending, self._pending[0].mark(reset_peak=False, unsplit=True),
                       _grad_bytes(self._pending) + self._pending[-1].named)
        self._ended_calls = self._calls
        self._pending[-1].remove()
        self._pending = None

    def give_way(self) -> None:
        """Another CPU meter must start (Note [One profiler per thread] in torch_exec/meter.py): an ended
        CPU measurement is recorded; one whose backward has not come is given up and stays due."""
        started = self._pending or self._opened
        if started is not None and started[0].device.type == "cpu":
            self.finalize()  # given up: the step stays due
            warn_once("a measured step was not measured: another wrapper's CPU memory meter started during it "
                      "(torch runs one profiler per thread); the wrapper's next step is measured instead",
                      MemoryBudgetWarning, stacklevel=3)
        elif self._ended is not None and self._ended[0][0].device.type == "cpu":
            self.finalize()

    def finalize(self) -> None:
        """Stop an ended measurement and record its step; abandon one whose backward never came (a forward
        without a backward is no step: the measurement it took stays due)."""
        self.withdraw()  # a model's call that never reached the stages
        if self._pending is not None:  # forward without backward: nothing to record
            pending, self._pending = self._pending, None
            pending[-1].remove()
            self._undo_start(pending[0], pending[4].type, self._pending_armed)
        self.record_ended()

    def record_ended(self) -> None:
        """Stop an ended measurement and record its step (a measurement still waiting for its backward waits on):
        at the start of a call, so that what the step showed (Note [The caller's turn] in torch_exec/executor.py)
        plans this call, not the one after."""
        if self._ended is None:
            return
        ended_step = self._ended[0]
        (meter, without_grad, plan, budget, device, step, kind, (held, before), sets), closing, grads = self._ended
        self._ended = None
        try:
            meter.__exit__(None, None, None)
        except MarksLostError:  # the user started a profiler before this step was recorded
            warn_once("a measured step's record was lost: a profiler started on this thread before it was recorded "
                      "(read model.memory_report() before profiling; Note [One profiler per thread] in "
                      "torch_exec/meter.py)", MemoryBudgetWarning, stacklevel=3)
            return
        reading = meter.between(meter.first_mark, closing)
        record = StepRecord(step=step, device=str(device), budget=budget,
                            predicted_peak=int(plan.predicted_peak_bytes), measured_peak=int(reading.peak),
                            param_grad_bytes_allocated=int(grads), plan=kind, held_before=int(held),
                            peak_beyond_set_grads=(sets.peak_beyond(closing, grads)
                                                   if without_grad or sets.host or sets.named else None),
                            before_peak=int(before), calls=self._ended_calls)
        self._records.append(record)
        if not record.within_budget and not self._warned:
            self._warned = True
            over = record.beyond_param_grads - budget
            learns = (" and, where its peak goes over the budget, counted from the next step on (Note [The caller's "
                      "turn] in torch_exec/executor.py)" if self._learns_turn(ended_step) else
                      " but not planned for")
            blocks = ""
            if allocator_reserve_bytes(device.type):  # the rule of Note [Allocator blocks]
                learned = (", and the next steps what a step showed beyond it: Note [Allocator blocks learned] in "
                           "torch_exec/executor.py" if self._learns_turn(ended_step) else "")
                blocks = ("; on CUDA, cached blocks the allocator hands over unsplit hold up to 1 MiB more than asked "
                          f"for each (the plans reserve one: Note [Allocator blocks] in torch_exec/_util.py{learned}): "
                          "expandable_segments:True in the allocator settings (PYTORCH_CUDA_ALLOC_CONF, or "
                          "PYTORCH_ALLOC_CONF in newer torch), set before CUDA starts, makes it split every block")
            warnings.warn(
                f"step {record.step}: measured peak {format_bytes(record.beyond_param_grads)} "
                f"({record.beyond_param_grads} B, beyond parameter gradients) exceeds the budget "
                f"{exact_bytes(budget)} by {over} B; the plan predicted "
                f"{format_bytes(record.predicted_peak)}. What the caller computes from the model's output (its loss) "
                f"is measured too{learns}; beyond that, the profile under-estimated a stage's memory: re-profile "
                f"(model.replan(profile=True)) or lower the budget by the excess; model.memory_report() has every "
                f"measured step{blocks}{_calls_hint(record)}", MemoryBudgetWarning, stacklevel=4)
        self._learn_turn(ended_step, meter, None if budget is None else budget - int(held),
                         0 if budget is None else record.beyond_param_grads - budget, meter.unsplit_at(closing),
                         0 if budget is None else max(0, budget - record.predicted_peak))
