"""Host copies of checkpoints for plans that offload (``OFFLOAD``/``RELEASE``/``PREFETCH``/``ACQUIRE``),
and the measurement of the host link those plans are solved for.

:class:`HostCopies` belongs to one plan (one :class:`~torch_exec.executor.Entry`): a pool of host buffers
and one copy stream. Each step makes a :class:`StepCopies` (``copies.step()``), which is what the
interpreter (:func:`torch_exec.executor.interpret`) calls for the four copy ops of the schedule IR
(``gpusolve/schedule.py``). The op semantics are those of the offload spec (``shared/specs/offload.md``
B.4.1, "Executor") and of the simulator's copy timeline (:mod:`gpusolve.simulate`: one FIFO copy channel,
``RELEASE`` and ``ACQUIRE`` block the compute timeline until their copy has ended):

- ``offload(s, a_s)``: the copy stream waits for the compute stream (a_s is complete), then copies a_s
  into host buffers (non-blocking) and records ``done[s]``. a_s stays held and readable.
- ``release(s, a_s)``: the compute stream waits for ``done[s]`` (no host synchronisation, Note [Release
  in stream order]); the caller has dropped its reference to a_s, and this drops the last one.
- ``prefetch(s)``: allocate a_s's device blocks on the compute stream (their memory counts from now),
  make the copy stream wait for the compute stream (a block may have been freed by kernels still
  queued), copy host -> device on the copy stream and record ``pdone[s]``.
- ``acquire(s)``: the compute stream waits for ``pdone[s]`` (no host synchronisation); returns a_s.
  The blocks were allocated on the compute stream and are freed there after this wait: no
  ``record_stream`` needed.

Every copy is issued on the one copy stream, in schedule order: the FIFO channel the simulator assumes
(offloads and prefetches never overlap each other). On the CPU (tests, no CUDA) the "host" copy is a
plain second CPU tensor and every copy is synchronous: the same ops, the same order, exact copies, so
gradients are checked against plain autograd there. That path only exercises the logic: host and
"device" are the same memory, nothing is saved.

Note [Release in stream order]
    a_s was allocated on the compute stream and read by the copy stream. ``release`` makes the compute
    stream wait for the copy's event, then a_s's last reference goes: the caching allocator returns its
    blocks to the compute stream's pool at once, and whatever kernel later reuses them is queued on the
    compute stream behind that wait, so it runs after the copy has read them. The plan's peak stays
    honest (the blocks are reused, not replaced by fresh memory as ``record_stream`` would have the
    allocator do while the copy runs), the compute timeline blocks until the copy has ended, as the
    simulator's RELEASE does, and the host goes on queueing kernels. The first version waited on the
    host (``done.synchronize()``): the GPU could drain its queue at every release and wait for what
    the host queued next wherever launching is slower than the GPU. A suspect, not yet confirmed, for
    DenseNet-121's combined plans measuring 28-37 % above their prediction on the H100 (2026-11-26).
    This relies on a_s's blocks belonging to the stream that is current at ``release`` (the stages run
    on it): a tensor a stage made under another stream of its own goes back to that stream's pool,
    whose next allocations are not ordered after the wait.

Note [Pinned buffers once per plan]
    Pinning host memory is slow (it maps pages for DMA), so host buffers are allocated the first time
    they are needed and reused by every later step of the same plan: a pool keyed by (shape, strides,
    dtype), shared by the stages. A step takes buffers at ``offload`` and gives them all back when it
    ends (:meth:`StepCopies.close`, called when the step's backward has run without ``retain_graph``),
    so two steps alive at once (two forwards before their backwards) never share a buffer: the pool then
    grows to what they hold together. A step that is never closed (its graph dropped without backward)
    just keeps its buffers until it is garbage-collected. A new plan builds a new :class:`HostCopies`.

Note [Exact copies]
    A checkpoint is a detached no-grad tensor (or tuple of tensors); copying it out and back is exact
    (bitwise). What moves is each distinct storage behind its tensors, whole, as bytes, and each tensor
    comes back as the same view of the storage's copy (same offset, shape and strides, on its own
    device). So a channels-last activation comes back channels-last (later kernels are the same ones);
    two tensors of one state that view one storage (``(h, h[:, -1])``) come back sharing one copy, not
    two; and a view that is not dense (``h[:, ::2]``) is copied without the contiguous device
    temporary ``copy_`` would make on the copy stream, which no plan counts. The bytes copied and
    re-allocated are exactly those the byte model counts for the state (``held_nbytes``: every storage,
    whole). A tensor whose values are not just its storage's bytes (sparse, nested, quantized) or that
    has no plain storage (a wrapper subclass) is not copied (``torch_exec._util.copyable``): it stays
    referenced, as in Note [Shared storages]; the profiler marks such an output ``device_only`` and the
    solver never moves it (``Chain.swappable``). RNG replay and BatchNorm handling of the stages around
    it are unaffected.

Note [Shared storages]
    A tuple state may pass a tensor through from an earlier state (``(x, f(h))``). A storage of a_s that
    another held state also holds (an earlier checkpoint, the input, a tape) when a_s is offloaded or
    released is not copied: releasing a_s would not free it, and re-allocating it at the prefetch would
    hold it twice. It stays referenced and comes back as itself. The plans never ask for that: the
    profile says which outputs share a storage (``held_from``), and the solver never moves those to
    the host (``Chain.swappable``; Note [Outputs passed through] in ``gpusolve/chain.py``), since the
    byte model would count the shared storage as freed. This rule still guards a hand-written
    schedule, or a chain read from a profile without ``held_from``.
"""
from __future__ import annotations

import statistics
import weakref

import torch

from . import _util as U


class HostCopies:
    """Host buffer pool and copy stream of one plan on one device (see the module docstring)."""

    def __init__(self, device: torch.device | str, pinned: bool = True):
        device = torch.device(device)
        self.cuda = device.type == "cuda"
        self.pinned = pinned and self.cuda  # pageable host buffers for the profiler's stash (many, used once)
        if self.cuda and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.pool: dict[int, list[torch.Tensor]] = {}  # bytes -> free host buffers (uint8)
        self.allocations = 0                           # host buffers ever allocated (tests, reports)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.meter = None   # the wrapper's StepMeter: on the CPU, new buffers are the measured memory

    def step(self) -> "StepCopies":
        """The copy state of one step (what the interpreter's copy ops call)."""
        return StepCopies(self)

    def take(self, nbytes: int) -> torch.Tensor:
        """A host buffer of ``nbytes`` bytes (uint8), from the pool or new (pinned on CUDA)."""
        free = self.pool.get(nbytes)
        if free:
            return free.pop()
        self.allocations += 1
        if not self.cuda and self.meter is not None:  # Note [Gradients set during the step] in report.py
            self.meter.note_host_buffer(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=self.pinned)

    def give(self, buf: torch.Tensor) -> None:
        self.pool.setdefault(buf.numel(), []).append(buf)

    def copy(self, pairs: list):
        """Copy every ``(destination, source)`` pair: on the CPU now (returns None); on CUDA on the copy
        stream, after what the compute stream has issued so far, returning the event that marks the end.
        A copy records no graph, whatever the grad mode around it."""
        if not self.cuda:
            with torch.no_grad():
                for dst, src in pairs:
                    dst.copy_(src)
            return None
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.no_grad(), torch.cuda.stream(self.stream):
            for dst, src in pairs:
                dst.copy_(src, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        return done

    def wait(self, event) -> None:
        """The compute stream (the device's current one) waits for a copy's ``event``, with no host
        synchronisation (Note [Release in stream order]); None (a synchronous CPU copy) waits for nothing."""
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)

    def host_bytes(self) -> int:
        """Bytes of the free host buffers in the pool (pinned on CUDA)."""
        return sum(b.numel() for free in self.pool.values() for b in free)

    def buffers(self) -> list[torch.Tensor]:
        """The free host buffers of the pool (tests: the same objects step after step)."""
        return [b for free in self.pool.values() for b in free]


class _Storage:
    """One storage of an offloaded state (Note [Exact copies]): its host copy and its device."""

    __slots__ = ("host", "device")

    def __init__(self, host: torch.Tensor, device: torch.device):
        self.host, self.device = host, device


class _Slot:
    """One tensor of an offloaded state: the view of its storage's copy (``storage``: an index into the
    state's :class:`_Storage` list) that rebuilds it, or the tensor itself (``kept``) when its storage
    is not copied (Note [Shared storages])."""

    __slots__ = ("storage", "offset", "size", "stride", "dtype", "conj", "neg", "kept")

    def __init__(self, storage: int | None = None, t=None, kept=None):
        self.storage, self.kept = storage, kept
        if t is not None:
            self.offset, self.size, self.stride, self.dtype = t.storage_offset(), t.shape, t.stride(), t.dtype
            self.conj, self.neg = t.is_conj(), t.is_neg()  # lazy views: the bytes hold the values before them

    def view(self, block: torch.Tensor) -> torch.Tensor:
        """The tensor this slot describes, viewing the storage of ``block`` (its storage's copy)."""
        t = torch.empty(0, dtype=self.dtype, device=block.device).set_(
            block.untyped_storage(), self.offset, self.size, self.stride)
        if self.neg:
            t = torch._neg_view(t)
        return t.conj() if self.conj else t


def _give_stores(copies: HostCopies, stores: list) -> None:
    """One host copy's buffers go back to the plan's pool."""
    for store in stores:
        if store.host is not None:
            copies.give(store.host)


def _give_back(copies: HostCopies, slots: dict) -> None:
    """The host buffers a dropped :class:`StepCopies` still holds go back to the plan's pool."""
    for _, _, stores in slots.values():
        _give_stores(copies, stores)
    slots.clear()


class StepCopies:
    """The copy ops of one step (module docstring); ``close()`` gives its host buffers back to the plan's
    pool. A stage may be offloaded again after its acquire (a second backward that keeps the graph
    prefetches from the same host copy)."""

    def __init__(self, copies: HostCopies):
        self.copies = copies
        self.slots: dict[int, tuple] = {}     # stage -> (state template, [_Slot], [_Storage]) of its host copy
        # a step dropped without its backward (a forward whose graph went unused) gives its buffers back when it
        # goes: before, every such step took new ones from then on (a review, 2026-11-28:
        # bench/repros/rv7_offload_dropped_step_pool.py)
        weakref.finalize(self, _give_back, copies, self.slots)
        self.done: dict[int, object] = {}     # stage -> event of its D2H copy (CUDA)
        self.pdone: dict[int, object] = {}    # stage -> event of its H2D copy (CUDA)
        self.incoming: dict[int, object] = {}  # stage -> device state being prefetched
        self.released: set[int] = set()       # stages on the host (released, not yet prefetched)

    # ------------------------------------------------------------ the four ops
    def offload(self, s: int, state, held=frozenset()) -> None:
        """Issue the copy of a_s (``state``) to the host: each of its storages once, whole (Note [Exact
        copies]). ``held``: storage keys of the other states held now (Note [Shared storages])."""
        if s in self.done or s in self.released or s in self.incoming:
            raise RuntimeError(f"internal error: offload({s}) while a_{s} is already being copied or on the host")
        self._drop(s)  # an earlier copy of this stage (a graph kept for another backward): refreshed
        copies = self.copies
        index: dict = {}  # storage key -> its position in `stores`
        pairs, slots, stores = [], [], []
        for t in U.tensors(state):
            key = U.storage_key(t)
            if not U.copyable(t) or key in held:
                slots.append(_Slot(kept=t))
                continue
            if key not in index:
                index[key] = len(stores)
                raw = _raw(t)
                stores.append(_Storage(copies.take(raw.numel()), t.device))
                pairs.append((stores[-1].host, raw))
            slots.append(_Slot(index[key], t=t))
        self.slots[s] = (_template(state), slots, stores)
        self.done[s] = copies.copy(pairs)

    def release(self, s: int, state=None, held=frozenset()) -> None:
        """The compute stream waits for a_s's copy to the host (Note [Release in stream order]); then the
        caller's reference to ``state`` (a_s, passed here so that storages now shared with ``held`` are
        kept, not re-allocated later) is the last one the executor drops."""
        if s not in self.done:
            raise RuntimeError(f"internal error: release({s}) without offload({s})")
        self.copies.wait(self.done.pop(s))
        if state is not None and held:
            _, slots, stores = self.slots[s]
            shared = {slot.storage for slot, t in zip(slots, U.tensors(state), strict=True)
                      if slot.kept is None and U.storage_key(t) in held}  # shared since the offload
            for slot, t in zip(slots, U.tensors(state), strict=True):
                if slot.storage in shared:
                    slot.storage, slot.kept = None, t
            for i in shared:
                self.copies.give(stores[i].host)
                stores[i].host = None
        self.released.add(s)

    def prefetch(self, s: int) -> None:
        """Allocate a_s's device blocks (held from now) and issue the copy back."""
        if s not in self.released:
            raise RuntimeError(f"internal error: prefetch({s}) but a_{s} is not on the host (offload and "
                               f"release it first)")
        self.released.discard(s)
        template, slots, stores = self.slots[s]
        blocks, pairs = {}, []
        for i, store in enumerate(stores):
            if store.host is not None:
                blocks[i] = torch.empty(store.host.numel(), dtype=torch.uint8, device=store.device)
                pairs.append((blocks[i], store.host))
        dev = [slot.kept if slot.kept is not None else slot.view(blocks[slot.storage]) for slot in slots]
        self.incoming[s] = _fill(template, dev)
        pdone = self.copies.copy(pairs)
        if pdone is not None:
            self.pdone[s] = pdone

    def acquire(self, s: int):
        """The compute stream waits for a_s's copy back; returns a_s (a held checkpoint again)."""
        if s not in self.incoming:
            raise RuntimeError(f"internal error: acquire({s}) without prefetch({s})")
        state = self.incoming.pop(s)
        self.copies.wait(self.pdone.pop(s, None))
        return state

    # ------------------------------------------------------------ kept graphs, the end of the step
    def on_host(self) -> frozenset:
        """The stages on the host now (the state a backward that keeps the graph starts again from)."""
        return frozenset(self.released)

    def restart(self, on_host: frozenset) -> None:
        """Start again from :meth:`on_host`'s state: a later backward of a kept graph prefetches the
        forward's host copies again (their buffers are this step's until :meth:`close`)."""
        self.done.clear()
        self.pdone.clear()
        self.incoming.clear()
        self.released = set(on_host)

    def close(self) -> None:
        """Give every host buffer of this step back to the plan's pool. On CUDA the copy stream is
        FIFO: a later step's offload into a buffer runs after this step's prefetch from it."""
        for s in list(self.slots):
            self._drop(s)
        self.done.clear()
        self.pdone.clear()
        self.incoming.clear()
        self.released.clear()

    def _drop(self, s: int) -> None:
        entry = self.slots.pop(s, None)
        if entry is not None:
            _give_stores(self.copies, entry[2])

    def host_bytes(self) -> int:
        """Bytes of host buffers this step holds."""
        return sum(store.host.numel() for _, _, stores in self.slots.values() for store in stores
                   if store.host is not None)


def _raw(t: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``t`` as a 1-D uint8 tensor (a view: nothing is copied or allocated)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


_HOLE = object()  # where a tensor of an offloaded state goes back


def _template(state):
    """``state`` with its tensors replaced by holes (its structure and non-tensor items, None included)."""
    return U.map_state(lambda t: _HOLE, state)


def _fill(template, tensors: list):
    if template is _HOLE:
        return tensors[0]
    it = iter(tensors)
    return U.rebuilt(template, [next(it) if item is _HOLE else item for item in template])


# ---------------------------------------------------------------------------- the link
DEFAULT_LINK_SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)


def measure_link(device=None, sizes=DEFAULT_LINK_SIZES, repeats: int = 7) -> dict:
    """Measure host <-> device copies with pinned host buffers on a side stream, as the executor runs
    them: median time of each size and direction (CUDA events), then a least-squares fit
    ``time = latency + bytes / bandwidth`` per direction. Returns ``{"d2h_bytes_per_ms",
    "h2d_bytes_per_ms", "latency_ms", "channels", "device", "points": [...]}`` (latency: the mean of the
    two intercepts, at least 0); ``gpusolve.offload.link.Link.from_dict`` reads it. Needs a CUDA device:
    on the CPU there is no link to measure."""
    if device is None:
        if not torch.cuda.is_available():
            raise ValueError("measure_link needs a CUDA device (none is available); give the link's figures "
                             "yourself, e.g. offload='12GB/s' or gpusolve.offload.link.Link.parse('12GB/s')")
        device = torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"measure_link needs a CUDA device, got {device}; give the link's figures yourself, "
                         f"e.g. offload='12GB/s'")
    if repeats < 1 or not sizes or any(int(n) <= 0 for n in sizes):
        raise ValueError(f"measure_link needs repeats >= 1 and positive sizes, got repeats={repeats}, sizes={sizes}")
    stream = torch.cuda.Stream(device)
    points = []
    fits = {}
    for direction in ("d2h", "h2d"):
        xs, ys = [], []
        for n in sizes:
            n = int(n)
            host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(n, dtype=torch.uint8, device=device)
            src, dst = (dev, host) if direction == "d2h" else (host, dev)
            times = []
            for rep in range(repeats + 1):  # the first is a warm-up
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    start.record(stream)
                    dst.copy_(src, non_blocking=True)
                    end.record(stream)
                end.synchronize()
                if rep:
                    times.append(start.elapsed_time(end))
            ms = statistics.median(times)
            points.append({"direction": direction, "bytes": n, "ms": ms})
            xs.append(float(n))
            ys.append(ms)
            del host, dev
        slope, intercept = _fit_line(xs, ys)
        if slope <= 0:
            raise RuntimeError(f"measure_link: {direction} copy times do not grow with size ({points}); "
                               "use larger sizes")
        fits[direction] = (1.0 / slope, intercept)
    return {"device": torch.cuda.get_device_name(device), "d2h_bytes_per_ms": fits["d2h"][0],
            "h2d_bytes_per_ms": fits["h2d"][0], "latency_ms": max(0.0, (fits["d2h"][1] + fits["h2d"][1]) / 2),
            "channels": 1, "points": points}


def _fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = slope * x + intercept``."""
    n = len(xs)
    if n == 1:
        return ys[0] / xs[0], 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:  # every size the same: no slope to fit, the mean rate through the origin
        return my / mx, 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


__all__ = ["HostCopies", "StepCopies", "measure_link"]
