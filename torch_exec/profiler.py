"""Measure a chain of stages and write it in the ``measured-chain/1`` format (see shared profiles README).

On CUDA, per-stage times come from CUDA events recorded between stages inside whole forward and
backward passes (no synchronisation inside a pass; backward boundaries from gradient hooks on each
stage's output), medians over several passes; memory comes from the caching allocator's counters
(``memory_allocated`` / ``max_memory_allocated``) read between stages, with parameter gradients
allocated beforehand so that no stage counts them.

On the CPU sizes are exact, from the tensors themselves: ``x`` is the bytes of the output's new
storages (0 when it only shares storage with the input), ``xbar`` adds the storages autograd saved
for the stage (seen through ``torch.autograd.graph.saved_tensors_hooks``) that are neither the
input's nor parameters/buffers, deduplicated by storage; the peaks are these sizes. Times come from
``time.perf_counter`` and are CPU times (a :class:`CPUTimingWarning` says so).

Profiling leaves the model exactly as it found it: parameters, buffers, gradients, RNG state and
training flags are restored afterwards.
"""
from __future__ import annotations

import json
import statistics
import time
import warnings
from pathlib import Path

import torch

from gpusolve.chain import PROFILE_FORMAT, Chain

from ._util import (ModelSnapshot, aliases, clone, grad_nbytes, make_leaf, modules_of, params_of, buffers_of,
                    stage_list, state_nbytes, storage_key, storages, tensors)


class CPUTimingWarning(UserWarning):
    """The profile was taken on the CPU: its times are CPU times, not GPU times."""


class InputMutationWarning(UserWarning):
    """A stage modified its input in place without returning it (not executable safely)."""


def profile(stages, sample_input, passes: int = 5, warmup: int = 1, path=None, network: str | None = None,
            fuse_aliasing: bool = True, names: list[str] | None = None) -> Chain:
    """Profile ``stages`` on ``sample_input`` and return the :class:`gpusolve.Chain` (aliasing stages fused).

    ``stages``: an ``nn.Sequential`` or a list of modules/callables, each mapping the state (a tensor or
    a tuple of tensors) to the next. The device is the sample input's. ``path`` also writes the
    ``measured-chain/1`` JSON (readable by ``gpusolve`` CLI and :func:`load_profile`).
    When the input does not require grad, ``chain.input_grad_bytes`` is 0.
    """
    data = profile_dict(stages, sample_input, passes=passes, warmup=warmup, network=network, names=names)
    if path is not None:
        save_profile(data, path)
    return chain_from_profile(data, fuse_aliasing=fuse_aliasing)


def chain_from_profile(data: dict, fuse_aliasing: bool = True) -> Chain:
    """``Chain.from_profile`` of a profile dict (kept as the profiler's name for it)."""
    return Chain.from_profile(data, fuse_aliasing=fuse_aliasing)


def save_profile(data: dict, path) -> None:
    Path(path).write_text(json.dumps(data, indent=1))


def load_profile(path, fuse_aliasing: bool = True) -> Chain:
    """Read a ``measured-chain/1`` file written by :func:`profile` (or the shared profiles)."""
    data = json.loads(Path(path).read_text())
    data.setdefault("_source", str(path))
    return chain_from_profile(data, fuse_aliasing=fuse_aliasing)


def profile_dict(stages, sample_input, passes: int = 5, warmup: int = 1, network: str | None = None,
                 names: list[str] | None = None) -> dict:
    """The ``measured-chain/1`` dict of ``stages`` on ``sample_input`` (see :func:`profile`).

    Extra fields beyond the shared format: ``input_requires_grad``, and per stage ``aliases``
    (the output shares all its storage with the input) — readers ignore them.
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
    snapshot = ModelSnapshot(modules_of(fns))
    try:
        if device.type == "cuda":
            measured = _CudaProfiler(fns, sample_input, device).run(passes, warmup)
        else:
            warnings.warn("profiling on the CPU: stage times are CPU times (perf_counter), sizes are exact",
                          CPUTimingWarning, stacklevel=3)
            measured = _CpuProfiler(fns, sample_input).run(passes, warmup)
    finally:
        snapshot.restore()
    per_stage, reference = measured
    requires_grad = any(t.requires_grad for t in inputs)
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in inputs})
    params = params_of(modules_of(fns))
    data = {
        "format": PROFILE_FORMAT,
        "network": network or "chain",
        "args": {"input_shapes": [list(t.shape) for t in inputs], "passes": passes},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": dtypes[0] if len(dtypes) == 1 else ",".join(dtypes),
        "input_bytes": state_nbytes(sample_input),
        "param_bytes": sum(p.numel() * p.element_size() for p in params),
        "input_requires_grad": requires_grad,
        "reference": reference,
        "stages": [dict(name=name, **fields) for name, fields in zip(names, per_stage)],
    }
    for s, stage in enumerate(data["stages"]):
        if stage.pop("mutates_input", False):
            warnings.warn(f"stage {s + 1} ({stage['name']}) modifies its input in place but returns new storage: "
                          f"a checkpoint before it would be overwritten; make it return its input or avoid in-place",
                          InputMutationWarning, stacklevel=2)
    return data


def _median(values):
    return float(statistics.median(values)) if values else 0.0


def _versions(state):
    return [t._version for t in tensors(state)]


class _Passes:
    """The pass structure shared by both devices; subclasses supply the clock and memory readings."""

    def __init__(self, fns, sample, device=None):
        self.fns = fns
        self.n = len(fns)
        self.sample = sample
        self.device = device
        self.rg = [t.requires_grad for t in tensors(sample)]

    # clock ----------------------------------------------------------------
    def mark(self):
        raise NotImplementedError

    def elapsed(self, a, b) -> float:
        raise NotImplementedError

    def sync(self):
        pass

    def run(self, passes: int, warmup: int):
        n = self.n
        t_ng = [[] for _ in range(n)]
        t_f = [[] for _ in range(n)]
        t_b = [[] for _ in range(n)]
        ref = {"store_all_step_ms": [], "nograd_forward_ms": []}
        self.mem = [dict() for _ in range(n)]
        self.prepare_grads()
        try:
            for it in range(warmup + passes):
                keep = it >= warmup
                ng = self.nograd_pass(measure=keep and it == warmup)
                fwd, bwd = self.grad_pass(measure=keep and it == warmup)
                if keep:
                    for s in range(n):
                        t_ng[s].append(ng[s])
                        t_f[s].append(fwd[s])
                        t_b[s].append(bwd[s])
                    ref["nograd_forward_ms"].append(sum(ng))
                    ref["store_all_step_ms"].append(self.plain_step())
            reference = {k: _median(v) for k, v in ref.items()}
            reference.update(self.memory_reference())
        finally:
            self.restore_grads()
        stages = []
        for s in range(n):
            stages.append(dict(t_fwd=_median(t_f[s]), t_fwd_nograd=_median(t_ng[s]), t_bwd=_median(t_b[s]),
                               **self.mem[s]))
        return stages, reference

    def prepare_grads(self):
        pass

    def restore_grads(self):
        pass

    # passes ---------------------------------------------------------------
    def nograd_pass(self, measure: bool):
        marks = []
        state = clone(make_leaf(self.sample, False))  # an in-place first stage must not touch the sample
        with torch.no_grad():
            marks.append(self.mark())
            for s, fn in enumerate(self.fns):
                before = self.mem_before() if measure else None
                versions = _versions(state) if measure else None
                out = fn(state)
                marks.append(self.mark())
                if measure:
                    alias = aliases(out, state)
                    x, peak = self.mem_after_nograd(before, out, state)
                    if alias:
                        x = 0
                    mutated = versions != _versions(state) and not alias
                    self.mem[s].update(x=int(x), x_nbytes=state_nbytes(out), fwd_peak_nograd=int(max(peak, x)),
                                       aliases=bool(alias))
                    if mutated:
                        self.mem[s]["mutates_input"] = True
                state = out
            del state, out
        self.sync()
        return [max(0.0, self.elapsed(marks[s], marks[s + 1])) for s in range(self.n)]

    def grad_pass(self, measure: bool):
        n = self.n
        fmarks = []
        a0 = make_leaf(self.sample, self.rg)
        outs = [a0]
        with torch.enable_grad():
            state = clone(a0)
            fmarks.append(self.mark())
            for s, fn in enumerate(self.fns):
                before = self.mem_before() if measure else None
                with self.saved_hooks(measure) as saved:
                    out = fn(state)
                fmarks.append(self.mark())
                if measure:
                    xbar, peak = self.mem_after_grad(before, out, state, saved)
                    self.mem[s].update(xbar=int(xbar), fwd_peak_grad=int(max(peak, xbar)))
                outs.append(out)
                state = out
        del state
        # backward: bmarks[s] = the gradient of a_s is ready (start of stage s's backward)
        bmarks = [None] * (n + 1)
        started = [None] * (n + 1)
        bwd_peak = [None] * (n + 1)

        def boundary(s):
            bmarks[s] = self.mark()
            if s < n and started[s + 1] is not None and bwd_peak[s + 1] is None:
                bwd_peak[s + 1] = self.bwd_peak(started[s + 1])
            started[s] = self.bwd_start()

        handles = []
        for s in range(n - 1, -1, -1):
            for t in tensors(outs[s]):
                if t.requires_grad:
                    handles.append(t.register_hook(lambda g, s=s: boundary(s)))
        final = [t for t in tensors(outs[n]) if t.requires_grad]
        try:
            boundary(n)
            if final:
                torch.autograd.backward(final, [torch.ones_like(t) for t in final])
            end = self.mark()
        finally:
            for h in handles:
                h.remove()
        for s in range(n, 0, -1):
            if started[s] is not None and bwd_peak[s] is None:
                bwd_peak[s] = self.bwd_peak(started[s])
        del outs, final
        self.sync()
        fwd = [max(0.0, self.elapsed(fmarks[s], fmarks[s + 1])) for s in range(n)]
        bwd = []
        for s in range(1, n + 1):
            if bmarks[s] is None:
                bwd.append(0.0)
                continue
            stop = next((bmarks[r] for r in range(s - 1, -1, -1) if bmarks[r] is not None), end)
            bwd.append(self.elapsed(bmarks[s], stop))
        if measure:
            for s in range(1, n + 1):
                self.mem[s - 1]["bwd_peak"] = self.bwd_peak_value(s, bwd_peak[s])
        return fwd, bwd

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


class _CpuProfiler(_Passes):
    exact = True

    def __init__(self, fns, sample):
        super().__init__(fns, sample)
        self.excluded = set()
        modules = modules_of(fns)
        for t in params_of(modules) + buffers_of(modules):
            key = storage_key(t)
            if key is not None:
                self.excluded.add(key)

    def mark(self):
        return time.perf_counter()

    def elapsed(self, a, b):
        return (b - a) * 1e3

    def prepare_grads(self):
        self.params = params_of(modules_of(self.fns))
        for p in self.params:  # the snapshot keeps the caller's .grad objects; accumulate elsewhere
            p.grad = None

    def mem_before(self):
        return None

    def mem_after_nograd(self, before, out, inp):
        new = {k: v for k, v in storages(out).items() if k not in storages(inp)}
        x = sum(new.values())
        return x, x

    def saved_hooks(self, measure):
        saved: list = []
        if not measure:
            return _NullHooks(saved)

        def pack(t):
            saved.append(t)
            return t
        return _SavedHooks(pack, saved)

    def mem_after_grad(self, before, out, inp, saved):
        inp_keys = set(storages(inp))
        held = {}
        for t in tensors(out) + list(saved):
            key = storage_key(t)
            if key is None or key in inp_keys or key in self.excluded:
                continue
            held[key] = key[2]
        xbar = sum(held.values())
        return xbar, xbar

    def bwd_start(self):
        return None

    def bwd_peak(self, started):
        return None

    def bwd_peak_value(self, s, measured):
        # The gradient of the stage's input: what its backward allocates (saved tensors only shrink).
        inp = self.sample if s == 1 else None
        if inp is not None:
            return grad_nbytes(inp) if any(self.rg) else 0
        return self.mem[s - 2]["x_nbytes"]

    def memory_reference(self):
        # Exact sizes, no allocator: every tape held plus the largest pair of gradients in flight.
        tapes = sum(m["xbar"] for m in self.mem)
        grads = [m["bwd_peak"] + m["x_nbytes"] for m in self.mem]
        return {"store_all_peak_bytes": int(tapes + max(grads)), "retained_after_forward_bytes": int(tapes)}


class _SavedHooks:
    def __init__(self, pack, saved):
        self.saved = saved
        self.ctx = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)

    def __enter__(self):
        self.ctx.__enter__()
        return self.saved

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc)


class _NullHooks:
    def __init__(self, saved):
        self.saved = saved

    def __enter__(self):
        return self.saved

    def __exit__(self, *exc):
        return False


class _CudaProfiler(_Passes):
    """Allocator counters and CUDA events. Reading the counters does not synchronise the device."""

    exact = False

    def __init__(self, fns, sample, device):
        super().__init__(fns, sample, device)
        self.cuda = torch.cuda

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed(self, a, b):
        return a.elapsed_time(b)

    def sync(self):
        torch.cuda.synchronize(self.device)

    def prepare_grads(self):
        # Allocate every parameter gradient before measuring so that no stage counts it; the
        # snapshot keeps the caller's .grad objects and puts them back afterwards.
        self.params = params_of(modules_of(self.fns))
        for p in self.params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        self.sync()

    def mem_before(self):
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        return before

    def mem_after_nograd(self, before, out, inp):
        now = torch.cuda.memory_allocated(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        return max(0, now - before), max(0, peak - before)

    def saved_hooks(self, measure):
        return _NullHooks([])

    def mem_after_grad(self, before, out, inp, saved):
        return self.mem_after_nograd(before, out, inp)

    def bwd_start(self):
        started = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        return started

    def bwd_peak(self, started):
        return max(0, torch.cuda.max_memory_allocated(self.device) - started)

    def bwd_peak_value(self, s, measured):
        return measured

    def memory_reference(self):
        self.sync()
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        with torch.enable_grad():
            state = clone(make_leaf(self.sample, self.rg))
            for fn in self.fns:
                state = fn(state)
            retained = torch.cuda.memory_allocated(self.device) - base
            final = [t for t in tensors(state) if t.requires_grad]
            if final:
                torch.autograd.backward(final, [torch.ones_like(t) for t in final])
        del state, final
        self.sync()
        peak = torch.cuda.max_memory_allocated(self.device) - base
        return {"store_all_peak_bytes": int(peak), "retained_after_forward_bytes": int(retained)}
