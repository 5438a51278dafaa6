"""Memory meters: peaks of allocated bytes between moments of a run, on the CPU or a CUDA device.

The same meter measures every method (plain autograd, the executor, ``checkpoint_sequential``), so
their peaks compare like with like:

- CUDA: the caching allocator's counters. A mark reads ``memory_allocated`` and the peak since the
  previous mark (``max_memory_allocated``, whose statistic is then reset); no device synchronisation.
- CPU: the allocator events of ``torch.profiler`` (``profile_memory=True``): every allocation and
  free of the CPU allocator with its size, in order. Their running sum is the bytes allocated at
  each moment. A mark is a profiler event of its own, on the same clock and in the same stream as
  the allocator events. This sees what tensors cannot show: workspace allocated and freed inside an
  operator, the intermediate results of a backward, buffers the autograd engine holds.

A reading between two marks is the peak of allocated bytes between them above the bytes allocated
at the first (``peak``), and the change from the first to the second (``delta``). Marks can be taken
anywhere, including inside autograd hooks during a backward (the profiler uses this for per-stage
backward peaks). Readings are available once the meter's ``with`` block has ended; ``meter.total``
covers the whole block. The CPU meter slows the code it watches (every allocation is recorded):
use it to measure memory, never to time.

Note [One profiler per thread]
    The CPU meter is a ``torch.profiler`` session, and torch runs one per thread: a meter started
    while the user's profiler records (``torch.profiler.profile``, ``torch.autograd.profiler.profile``)
    ended the user's session, whose trace came back empty (0 events), and then found none of its own
    marks ("internal error: 3 marks taken but 0 found"); one started in a scheduled profiler's wait or
    warmup step crashed the process (SIGSEGV) at the profiler's next ``step()`` (torch 2.13;
    bench/repros/user_profiler.py). So a CPU meter refuses to start while a profiler records
    (:class:`ProfilerBusyError`, naming the remedy): the first call of a wrapper (which profiles) must
    run before the profiler starts, and a measured step under it is not measured (a warning; it stays
    due). A scheduled profiler that has not started recording cannot be seen from Python: do not run a
    wrapper's first call, or a measured step, inside its wait or warmup steps on the CPU. On CUDA the
    meter reads the allocator's counters and runs under any profiler. Our own sessions count too: a
    measured step's meter runs after its backward until its record is made (Note [Ending a measurement
    inside a backward] in torch_exec/report.py), so before another CPU meter starts it is recorded (one
    whose backward has not come is given up and stays due, with a warning), or stopped unread where its
    wrapper is gone (:func:`room_for_a_cpu_meter`); a meter started inside another running ``with
    MemoryMeter()`` block is refused the same way as under the user's profiler. A profiler the user
    starts while a measured step's meter waits for its record ends that session: the record is lost,
    with a warning (:class:`MarksLostError`); read ``memory_report()`` before profiling.
"""
from __future__ import annotations

import atexit
import contextlib
from dataclasses import dataclass

import warnings

import torch

__all__ = ["MarksLostError", "MemoryMeter", "ProfilerBusyError", "Reading", "measure_peak"]

_MARK = "gpusolve::meter::mark"


class ProfilerBusyError(RuntimeError):
    """A CPU memory measurement was asked for while a ``torch.profiler`` records on this thread, the user's
    or (``meter=True``) another running :class:`MemoryMeter` around this call (Note [One profiler per
    thread])."""

    def __init__(self, meter: bool = False):
        what = ("a MemoryMeter (measure_peak) is already running on this thread, around this call" if meter else
                "a profiler is already recording on this thread (torch runs one at a time: starting ours would end "
                "yours and empty its trace)")
        super().__init__(
            f"a CPU memory measurement records the allocator with torch.profiler, and {what}. Run the wrapper's first "
            f"call (or model.prepare(*inputs)) before starting your {'meter' if meter else 'profiler'}, and measure "
            f"a wrapped step with model.measure_memory() (Note [One profiler per thread] in torch_exec/meter.py)")


class MarksLostError(RuntimeError):
    """A CPU meter's profiler session lost its marks: another profiler started on this thread while it
    ran (Note [One profiler per thread])."""


def profiler_recording() -> bool:
    """Whether a ``torch.profiler`` (or the autograd profiler) records on this thread now."""
    return bool(torch._C._autograd._profiler_enabled())


_RUNNING: set = set()  # CPU meters started and not stopped (held: a session outlives its owner)
_WAITING: list = []  # callables recording measured steps whose meters wait for it (report.StepMeter)


def room_for_a_cpu_meter() -> None:
    """Before a CPU meter starts: a measured step's meter keeps running after its backward until its
    record is made (at that wrapper's next step or report; Note [Ending a measurement inside a
    backward] in torch_exec/report.py), so it is recorded now, and one whose wrapper is gone is
    stopped. Then a profiler still recording is another meter of ours running (nesting is refused) or
    the user's (:class:`ProfilerBusyError`): Note [One profiler per thread]."""
    if not profiler_recording():
        return
    for record in list(_WAITING):
        record()
    _stop_abandoned()
    if not profiler_recording():
        return
    raise ProfilerBusyError(meter=bool(_RUNNING))


@atexit.register
def _stop_abandoned() -> None:
    """Stop the step meters nothing will record (their wrapper is gone); at exit every one, since a
    profiler still running then crashed the interpreter (SIGSEGV)."""
    for meter in list(_RUNNING):
        if meter.abandonable:
            try:
                meter.__exit__(None, None, None)
            except Exception:  # noqa: BLE001, S110 - its readings are not wanted
                pass


def held_rounding(device, which: str = "current") -> int:
    """The CUDA caching allocator's allocated minus requested bytes, ``which`` = ``"current"`` (now: the rounding of
    what is held) or ``"peak"`` (their peaks since the last reset); 0 where the allocator does not report requested
    bytes (cudaMallocAsync reports 0, a pluggable allocator nothing): unknown, not all of it rounding."""
    stats = torch.cuda.memory_stats(device)
    requested = int(stats.get(f"requested_bytes.all.{which}", 0))
    return max(0, int(stats.get(f"allocated_bytes.all.{which}", 0)) - requested) if requested else 0


def unsplit_bytes(device, held: int = 0) -> int:
    """How far the CUDA caching allocator's peak of allocated bytes since its last reset is above the peak of the
    bytes asked for (``requested_bytes``), at least: what the blocks it handed over held beyond the requests at the
    allocated peak, blocks served unsplit among it (Note [Allocator blocks learned] in torch_exec/executor.py). The
    two peaks may fall at different moments; allocated bytes are never below requested ones, so the difference is
    a lower bound of the allocator's rounding at the allocated peak. ``held``: the rounding of what was allocated
    before the measurement (:func:`held_rounding` at its start), which the measured peaks above it do not contain."""
    return max(0, held_rounding(device, "peak") - int(held))


@dataclass
class Reading:
    """Bytes between two marks: ``peak`` above ``start`` (bytes allocated at the first mark, relative
    to the meter's start) and ``delta``, the change from the first mark to the second."""

    peak: int = 0
    delta: int = 0
    start: int = 0


class MemoryMeter:
    """Measure allocated-bytes peaks on ``device`` (``"cpu"`` or a CUDA device) while it runs.

    ``with MemoryMeter(device) as meter:`` then ``a = meter.mark()`` ... ``b = meter.mark()``; after
    the block, ``meter.between(a, b)`` is the :class:`Reading`. ``with meter.region() as r:`` marks
    around a block and fills ``r`` when the meter stops. ``meter.total``: the whole block.
    """

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"MemoryMeter measures 'cpu' or 'cuda' devices, got {self.device}")
        self.total = Reading()
        self._pending: list[tuple[int, int, Reading]] = []
        self._levels: list[int] | None = None   # allocated bytes at each mark
        self._peaks: list[int] | None = None    # peak between mark i-1 and mark i (index 0: = level 0)
        self._cuda_marks: list[tuple[int, int]] = []
        self._held_rounding = 0                 # CUDA: allocated minus requested bytes at the meter's start
        self._unsplit: dict[int, int] = {}     # CUDA closing marks (mark(unsplit=True)): unsplit_bytes() there
        self._prof = None
        self._active = False
        self._count = 0
        self.abandonable = False  # a step's meter (report.StepMeter): stopped unread when another must start

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> "MemoryMeter":
        if self._active:
            raise RuntimeError("this MemoryMeter is already running")
        if self.device.type == "cpu":
            room_for_a_cpu_meter()
        self._active = True
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._held_rounding = held_rounding(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile
            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            # torch 2.11 warns at the first start ("Profiler clears events at the end of each cycle"), a line on the
            # user's stderr from every process that measures; the meter runs one cycle. acc_events=True silenced it
            # but made every stop build the whole event list (0.165 s a stop against 0.019 s: review rv21r,
            # bench/results/repros_session21r_cpu_before.md), and older torch has no such argument
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*[Pp]rofiler clears events")
                self._prof.__enter__()
            _RUNNING.add(self)
        self._first = self.mark()
        return self

    def __exit__(self, *exc):
        try:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            # The last mark leaves CUDA's peak counter alone, so a caller who reset it before the step
            # still reads the step's peak from torch.cuda.max_memory_allocated() afterwards.
            last = self._mark(reset=False)
            if self.device.type == "cpu":
                self._prof.__exit__(*exc)
            if exc[0] is None:
                self._finish()
                self.total = self.between(self._first, last)
                for a, b, reading in self._pending:
                    reading.__dict__.update(self.between(a, b).__dict__)
        finally:
            self._active = False
            _RUNNING.discard(self)
        return False

    @property
    def first_mark(self) -> int:
        """The mark taken when the meter started."""
        return self._first

    # ------------------------------------------------------------ marks
    def mark(self, reset_peak: bool = True, unsplit: bool = False) -> int:
        """A moment of the run; returns its index for :meth:`between`. On CUDA a mark resets the
        allocator's peak counter (the next mark reads the peak since this one); ``reset_peak=False``
        leaves it alone, for the closing mark of a measurement whose caller reads
        ``torch.cuda.max_memory_allocated()`` after it (a later mark then reads the peak since the
        mark before this one). ``unsplit`` (with ``reset_peak=False``, a measurement's closing mark): read
        :func:`unsplit_bytes` there too, for :meth:`unsplit_at` (one ``memory_stats`` call, not made at other marks)."""
        return self._mark(reset=reset_peak, unsplit=unsplit)

    def _mark(self, reset: bool, unsplit: bool = False) -> int:
        if not self._active:
            raise RuntimeError("MemoryMeter.mark() must be called inside the meter's `with` block")
        index = self._count
        self._count += 1
        if self.device.type == "cuda":
            now = torch.cuda.memory_allocated(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
            if reset:
                torch.cuda.reset_peak_memory_stats(self.device)
            elif unsplit:
                self._unsplit[index] = unsplit_bytes(self.device, self._held_rounding)
            self._cuda_marks.append((now, max(peak, now)))
        else:
            with torch.profiler.record_function(_MARK):
                pass
        return index

    @contextlib.contextmanager
    def region(self):
        """Marks around the block; yields a :class:`Reading` filled when the meter stops."""
        reading = Reading()
        a = self.mark()
        try:
            yield reading
        finally:
            self._pending.append((a, self.mark(), reading))

    def between(self, a: int, b: int) -> Reading:
        """The reading from mark ``a`` to mark ``b`` (after the meter stopped)."""
        if self._levels is None:
            raise RuntimeError("readings are available once the meter's `with` block has ended")
        if not 0 <= a <= b < len(self._levels):
            raise ValueError(f"marks {a}, {b} are not marks of this meter (0..{len(self._levels) - 1})")
        start = self._levels[a]
        peak = max([start] + self._peaks[a + 1:b + 1])
        return Reading(peak=int(peak - start), delta=int(self._levels[b] - start), start=int(start))

    def unsplit_at(self, mark: int) -> int:
        """:func:`unsplit_bytes` read at ``mark`` (a CUDA mark taken with ``unsplit=True``); 0 elsewhere."""
        return self._unsplit.get(mark, 0)

    def rose_between(self, a: int, b: int) -> bool:
        """Whether :meth:`between` ``(a, b)``'s peak was reached after mark ``a`` (after the meter stopped): always on
        the CPU, whose marks split the peaks exactly; on CUDA a mark that leaves the peak counter alone
        (``reset_peak=False``) carries the peak since the last reset, reached after ``a`` only where it rose above
        the one at ``a``."""
        if self._levels is None:
            raise RuntimeError("readings are available once the meter's `with` block has ended")
        return self.device.type == "cpu" or max(self._peaks[a + 1:b + 1], default=0) > self._peaks[a]

    # ------------------------------------------------------------ post-processing
    def _finish(self) -> None:
        if self.device.type == "cuda":
            base = self._cuda_marks[0][0]
            self._levels = [now - base for now, _ in self._cuda_marks]
            self._peaks = [peak - base for _, peak in self._cuda_marks]
            return
        # Walk the events in order: allocator events move the running sum, marks record it.
        events = []
        for e in self._prof.profiler.kineto_results.events():
            name = e.name()
            if name == "[memory]":
                if "CPU" in str(e.device_type()).upper():
                    events.append((e.start_ns(), 1, int(e.nbytes())))
            elif name == _MARK:
                events.append((e.start_ns(), 0, 0))
        events.sort(key=lambda ev: (ev[0], ev[1]))
        levels, peaks = [], []
        running = 0
        since = 0  # peak since the previous mark
        for _, kind, nbytes in events:
            if kind == 1:
                running += nbytes
                since = max(since, running)
            else:
                levels.append(running)
                peaks.append(max(since, running))
                since = running
        if len(levels) != self._count:  # another profiler started while this one ran: it ended this session
            raise MarksLostError(f"this CPU meter took {self._count} marks and its profiler session kept "
                                 f"{len(levels)}: another profiler started on this thread while it ran (Note [One "
                                 f"profiler per thread] in torch_exec/meter.py)")
        self._levels, self._peaks = levels, peaks


def measure_peak(fn, *args, device="cpu", **kwargs):
    """Run ``fn(*args, **kwargs)`` under a :class:`MemoryMeter`; returns ``(result, Reading)``."""
    with MemoryMeter(device) as meter:
        result = fn(*args, **kwargs)
    return result, meter.total
