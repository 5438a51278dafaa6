"""Small helpers shared by the profiler and the executor: stage lists, states, storages, model state."""
from __future__ import annotations

import contextlib
import dis
import functools
import itertools
import math
import sys
import threading
import types
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.modules.dropout import _DropoutNd
from torch.utils import _pytree as pytree

from gpusolve.errors import FallbackWarning, warn_once


# ---------------------------------------------------------------------------- stages
def stage_list(stages) -> tuple[list[str], list]:
    """Names and callables of ``stages``: an ``nn.Sequential`` or a list of modules/callables.

    Names are unique (the Sequential's child names, or ``"<index>:<class>"`` for a list): the
    executor maps a profile's fused stages back to callables through them.
    """
    if isinstance(stages, nn.Sequential):
        # what Sequential.forward runs: every position, a module at several of them each time (named_children()
        # yields it once: a Linear at positions 0, 6 and 10 made 10 stages, outputs 0.44 off plain autograd's,
        # bench/repros/rv10_diff_sequential_repeated_module.py)
        items = [(name, m) for name, m in stages._modules.items() if m is not None]
    elif isinstance(stages, (list, tuple, nn.ModuleList)):
        items = [(f"{i}:{_callable_name(f)}", f) for i, f in enumerate(stages)]
    else:
        raise TypeError(f"stages must be an nn.Sequential or a list of modules/callables, got {type(stages).__name__}")
    if not items:
        raise ValueError("stages is empty: the chain needs at least one stage")
    names: list[str] = []
    fns: list = []
    seen: set[str] = set()
    for name, fn in items:
        if not callable(fn):
            raise TypeError(f"stage {name!r} is not callable: {fn!r}")
        unique, k = name, 1
        while unique in seen:
            unique, k = f"{name}#{k}", k + 1
        seen.add(unique)
        names.append(unique)
        fns.append(fn)
    return names, fns


def _callable_name(fn) -> str:
    if isinstance(fn, nn.Module):
        return type(fn).__name__
    return getattr(fn, "__name__", type(fn).__name__)


def modules_of(fns) -> list[nn.Module]:
    """The distinct modules among ``fns`` (callables that are not modules are skipped)."""
    out, seen = [], set()
    for fn in fns:
        if isinstance(fn, nn.Module) and id(fn) not in seen:
            seen.add(id(fn))
            out.append(fn)
    return out


# How far reachable_state follows callables and containers from a stage, and how many items of one
# container it looks at: enough for closures over closures and lists of layers, bounded for huge globals.
_REACH_DEPTH = 4
_REACH_ITEMS = 4096


def reachable_state(fn, generators: bool = False) -> list[tuple[str, object]]:
    """``(where, value)`` for every ``nn.Module`` and every tensor requiring grad that the plain
    (non-module) callable ``fn`` reaches: its ``__self__`` (bound methods), ``__closure__`` cells,
    ``__defaults__``/``__kwdefaults__``, a ``functools.partial``'s func/args/keywords, the attributes
    of a callable object, the globals its code loads (looked up in ``__globals__``, one
    level: a global callable is not followed), and the items of lists, tuples, sets and dicts found
    there. Modules are not looked into (their state is theirs); an ``nn.Module`` ``fn`` gives [].
    ``generators``: the ``torch.Generator`` objects reached too (Note [Generators of the model's own])."""
    found: list[tuple[str, object]] = []
    if isinstance(fn, nn.Module):
        return found
    seen: set[int] = set()

    def visit(value, where: str, depth: int, follow: bool) -> None:
        if id(value) in seen or value is None or isinstance(value, (str, bytes, int, float, bool, type,
                                                                       types.ModuleType)):
            return
        seen.add(id(value))
        if isinstance(value, nn.Module):
            found.append((where, value))
        elif isinstance(value, torch.Tensor):
            if value.requires_grad:
                found.append((where, value))
        elif isinstance(value, torch.Generator):
            if generators:
                found.append((where, value))
        elif depth >= _REACH_DEPTH:
            return
        elif isinstance(value, (list, tuple, set, frozenset)):
            for i, item in enumerate(itertools.islice(value, _REACH_ITEMS)):
                visit(item, f"{where}[{i}]", depth + 1, follow)
        elif isinstance(value, dict):
            for key, item in itertools.islice(value.items(), _REACH_ITEMS):
                visit(item, f"{where}[{key!r}]", depth + 1, follow)
        elif follow and (callable(value) or isinstance(getattr(value, "__dict__", None), dict)):
            callee(value, where, depth + 1)  # a callable, or an object whose attributes a bound method uses

    def callee(f, where: str, depth: int) -> None:
        if isinstance(f, functools.partial):
            visit(f.func, f"{where} > partial func", depth, True)
            for i, arg in enumerate(f.args):
                visit(arg, f"{where} > partial argument {i}", depth, True)
            for key, arg in f.keywords.items():
                visit(arg, f"{where} > partial keyword {key!r}", depth, True)
            return
        owner = getattr(f, "__self__", None)
        if owner is not None and not isinstance(owner, (type, types.ModuleType)):
            visit(owner, f"{where} > __self__", depth, True)
        if isinstance(f, types.MethodType):
            f = f.__func__
        if isinstance(f, types.FunctionType):
            code = f.__code__
            for name, cell in zip(code.co_freevars, f.__closure__ or ()):
                try:
                    content = cell.cell_contents
                except ValueError:  # an empty cell (a name not bound yet)
                    continue
                visit(content, f"{where} > closure variable {name!r}", depth, True)
            for i, default in enumerate(f.__defaults__ or ()):
                visit(default, f"{where} > default argument {i}", depth, True)
            for key, default in (f.__kwdefaults__ or {}).items():
                visit(default, f"{where} > default argument {key!r}", depth, True)
            for name in _code_names(code):
                if name in f.__globals__:
                    visit(f.__globals__[name], f"{where} > global {name!r}", depth, False)
        elif not isinstance(f, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            attrs = getattr(f, "__dict__", None)  # a callable object: its attributes, and its __call__'s
            for key, item in (attrs.items() if isinstance(attrs, dict) else ()):
                visit(item, f"{where} > attribute {key!r}", depth, True)
            call = getattr(type(f), "__call__", None)  # noqa: B004 (the class's function, not callability)
            if isinstance(call, types.FunctionType):
                callee(call, f"{where} > __call__", depth + 1)

    callee(fn, "", 0)
    return [(where.removeprefix(" > "), value) for where, value in found]


@functools.lru_cache(maxsize=4096)
def _code_names(code) -> frozenset[str]:
    """The global names ``code`` and the code objects nested in it (comprehensions, lambdas) load. Not all of
    ``co_names``, which holds the attribute names too: a forward calling ``self.g()`` beside a module-level
    generator named ``g`` recorded that generator in every stage (bench/repros/rv7_rev_generator_in_container.py
    then needed 46.6 % where 40 % had fitted). Cached per code object: a module's forward is read at every
    discovery."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return frozenset(names)


def _has_state(module: nn.Module) -> bool:
    return next(module.parameters(), None) is not None or next(module.buffers(), None) is not None


def stage_state(fns, modules=()) -> tuple[list[nn.Module], list[torch.Tensor]]:
    """Everything whose state the stages ``fns`` use: (modules, loose tensors).

    The modules: the stages that are modules, then ``modules`` (given explicitly), then those with
    parameters or buffers that plain callables reach (:func:`reachable_state`). The loose tensors:
    leaves requiring grad that plain callables reach and that are no parameter of those modules.
    Profiling snapshots and restores all of it (:class:`ModelSnapshot`)."""
    out = modules_of(list(fns) + list(modules))
    loose = []
    for fn in fns:
        for _, value in reachable_state(fn):
            if isinstance(value, nn.Module):
                if _has_state(value):
                    out = modules_of(out + [value])
            elif value.is_leaf:
                loose.append(value)
    known = {id(p) for p in params_of(out)}
    loose = [t for t in {id(t): t for t in loose}.values() if id(t) not in known]
    return out, loose


def hidden_state(fn, visible_modules) -> list[str]:
    """What the plain callable ``fn`` reaches that a wrapper registering ``visible_modules`` would not
    see: modules with parameters or buffers outside them, tensors requiring grad that are not their
    parameters (descriptions, for an error message)."""
    modules = {id(m) for mod in visible_modules for m in mod.modules()}
    params = {id(p) for p in params_of(visible_modules)}
    hidden = []
    for where, value in reachable_state(fn):
        if isinstance(value, nn.Module):
            if id(value) not in modules and _has_state(value):
                params_, buffers_ = len(list(value.parameters())), len(list(value.buffers()))
                hidden.append(f"{where}: {type(value).__name__} ({params_} parameter(s), {buffers_} buffer(s))")
        elif id(value) not in params:
            kind = "nn.Parameter" if isinstance(value, nn.Parameter) else "tensor requiring grad"
            hidden.append(f"{where}: {kind} of shape {tuple(value.shape)}")
    return hidden


# ---------------------------------------------------------------------------- states
def tensors(state) -> list[torch.Tensor]:
    """Tensors of a state (a tensor or a tuple/list of tensors); anything else is skipped."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, (tuple, list)):
        return [t for t in state if isinstance(t, torch.Tensor)]
    return []


class Sizes(tuple):
    """A tensor's shape inside an input signature's key: equal to (and hashed as) the plain tuple, and told apart
    from the key's other tuples by :func:`sizes_cover` (Note [Sizes that vary between calls] in
    torch_exec/executor.py)."""
    __slots__ = ()


def sizes_cover(big, small) -> float | None:
    """How many times as many elements the tensors of input signature key ``big`` hold as those of ``small``, where
    the two keys are the same but for their :class:`Sizes`, and each of ``small``'s sizes is at most ``big``'s
    (same number of dimensions); None where they differ otherwise, or a size of ``small`` is larger (Note [Sizes that
    vary between calls] in torch_exec/executor.py)."""
    elements = [0, 0]

    def walk(a, b) -> bool:
        if isinstance(a, Sizes) or isinstance(b, Sizes):
            if not (isinstance(a, Sizes) and isinstance(b, Sizes)) or len(a) != len(b) or any(
                    x < y for x, y in zip(a, b)):
                return False
            elements[0] += math.prod(a)
            elements[1] += math.prod(b)
            return True
        if type(a) is tuple and type(b) is tuple:
            return len(a) == len(b) and all(walk(x, y) for x, y in zip(a, b))
        return a == b

    if not walk(big, small):
        return None
    return 1.0 if elements[0] == elements[1] else (elements[0] / elements[1] if elements[1] else math.inf)


def closest_cover(candidates, key, within: float) -> tuple | None:
    """``(ratio, known, item)`` of the ``(known key, item)`` pairs of ``candidates`` whose key covers ``key``
    (:func:`sizes_cover`) holding at most ``within`` times its elements, the one holding the fewest; None where none
    does (Note [Sizes that vary between calls] in torch_exec/executor.py)."""
    best = None
    for known, item in candidates:
        ratio = sizes_cover(known, key)
        if ratio is not None and ratio <= within and (best is None or ratio < best[0]):
            best = (ratio, known, item)
    return best


def check_state(state, where: str) -> None:
    """Refuse a state between stages, made with grad, that holds a tensor requiring grad where :func:`tensors` does
    not see it (a dict, a tuple inside the tuple): no checkpoint of it was made a leaf and no gradient crossed it,
    and every stage before it trained without a gradient, silently (a review:
    bench/repros/rv20a_seq_dict_state_grads_dropped.py). A tensor there that needs no gradient (a mask) is passed on
    as it is, as before (review rv20r: bench/repros/rv20r_seq_constant_mask_in_nested_state_refused.py)."""
    seen = {id(t) for t in tensors(state)}
    hidden = [t for t in pytree.tree_leaves(state)
              if isinstance(t, torch.Tensor) and t.requires_grad and id(t) not in seen]
    if hidden:
        raise TypeError(f"{where} is a {type(state).__name__} holding {len(hidden)} tensor(s) that need a gradient "
                        f"in a structure the stages cannot pass on (a dict, or a tuple or list inside the tuple): pass "
                        f"a tensor or a flat tuple of tensors (and other values) between stages, e.g. return (h, h2, "
                        f"tag) and unpack it in the next stage")


def map_state(fn, state):
    """Apply ``fn`` to every tensor of ``state``, keeping its structure."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, (tuple, list)):
        return rebuilt(state, [fn(t) if isinstance(t, torch.Tensor) else t for t in state])
    return state


def rebuilt(sequence, items: list):
    """A tuple or list of ``sequence``'s type holding ``items``: a namedtuple's constructor takes its fields one
    by one (``type(s)(iterable)`` raised "missing 1 required positional argument" for a namedtuple state, a
    review: bench/repros/rv12_offload_namedtuple_state.py)."""
    if isinstance(sequence, tuple) and hasattr(type(sequence), "_fields"):
        return type(sequence)(*items)
    return type(sequence)(items)


def detach(state):
    return map_state(lambda t: t.detach(), state)


def differentiable(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def make_leaf(state, requires_grad):
    """Detached copy of ``state`` whose float tensors require grad (``requires_grad`` a bool or list per tensor)."""
    flags = iter(requires_grad) if isinstance(requires_grad, (list, tuple)) else None

    def leaf(t):
        flag = next(flags) if flags is not None else requires_grad
        out = t.detach()
        if flag and differentiable(t):
            out.requires_grad_(True)
        return out
    return map_state(leaf, state)


_ANCHORS: dict = {}  # device -> an empty leaf requiring grad (_anchor)


def _anchor(device) -> torch.Tensor:
    """An empty leaf requiring grad on ``device``, never given a gradient: what makes a :class:`_Grip`'s
    outputs require grad (one per device: making one per segment cost a few microseconds). Under a
    dispatch mode (``torch.export``'s fake tensors) one is made for the call, never kept."""
    if torch._C._len_torch_dispatch_stack():
        return torch.empty(0, device=device, requires_grad=True)
    anchor = _ANCHORS.get(device)
    if anchor is None:
        anchor = _ANCHORS[device] = torch.empty(0, device=device, requires_grad=True)
    return anchor


class _Grip(torch.autograd.Function):
    """The node a segment's input tensors hang from (:class:`SegmentInput`): ``forward(box, anchor, *ts)``
    returns aliases of ``ts``; ``backward`` puts the gradients in the box as the engine hands them over.
    ``anchor`` (:func:`_anchor`) makes the outputs require grad."""

    @staticmethod
    def forward(ctx, box, anchor, *ts):
        ctx.box = box
        ctx.set_materialize_grads(False)
        return tuple(t.detach() for t in ts)

    @staticmethod
    def backward(ctx, *grads):
        ctx.box[:] = grads
        return (None, None) + (None,) * len(grads)


class SegmentInput:
    """The input of an autograd segment (Note [Segment inputs] in torch_exec/executor.py): ``state``, what its
    first stage reads (``state`` with the tensors that need a gradient, ``requires_grad`` a bool or a list
    per tensor, made outputs of one :class:`_Grip` node), and after the segment's backward :meth:`take_grads`,
    each tensor's gradient as the engine handed it over (None where it needs none or none arrived)."""

    __slots__ = ("state", "inputs", "box", "slots", "versions")

    def __init__(self, state, requires_grad):
        flat = tensors(state)
        flags = list(requires_grad) if isinstance(requires_grad, (list, tuple)) else [requires_grad] * len(flat)
        self.slots = [i for i, (t, flag) in enumerate(zip(flat, flags, strict=False)) if flag and differentiable(t)]
        self.box = []
        if not self.slots:
            self.state, self.inputs, self.versions = detach(state), [], []
            return
        with torch.enable_grad():
            self.inputs = list(_Grip.apply(self.box, _anchor(flat[0].device), *(flat[i].detach() for i in self.slots)))
        by_slot = dict(zip(self.slots, self.inputs, strict=True))
        position = iter(range(len(flat)))

        def pick(t):
            i = next(position)
            return by_slot[i] if i in by_slot else t.detach()
        self.state = map_state(pick, state)
        self.versions = [t._version for t in self.inputs]

    def written(self) -> bool:
        """Whether something wrote in place into a tensor that needs a gradient (a leaf made by ``detach()``
        raised on that; these alias the held input, which must not change)."""
        return any(t._version != v for t, v in zip(self.inputs, self.versions, strict=True))

    def take_grads(self) -> list:
        """The gradient of each tensor of ``state`` (None where none), leaving none held here. A gradient
        that is part of a storage the gradients handed over do not cover (a slice of a ``cat``'s gradient
        whose other part was consumed inside the segment) is copied, so the rest can go."""
        out = [None] * len(tensors(self.state))
        for i, g in zip(self.slots, self.box, strict=False):
            out[i] = g
        self.box.clear()
        if not any(g is not None and g._is_view() for g in out):  # each owns its storage (the usual case)
            return out
        covered: dict = {}
        for g in out:
            if g is not None and (key := storage_key(g)) is not None:
                covered[key] = covered.get(key, 0) + g.numel() * g.element_size()
        for i, g in enumerate(out):
            if g is not None and (key := storage_key(g)) is not None and key[2] > covered[key]:
                out[i] = g.clone()
        return out


def clone(state):
    return map_state(lambda t: t.clone(), state)


class Feed(torch.autograd.Function):
    """Root of a segment's backward: hands the boxed gradients to the engine (Note [Releasing the
    incoming gradient] in torch_exec/executor.py). ``forward(box, *outs)`` returns an empty tensor;
    ``backward`` pops the box."""

    @staticmethod
    def forward(ctx, box, *outs):
        ctx.box = box
        return outs[0].new_empty(0)

    @staticmethod
    def backward(ctx, _unused):
        grads = ctx.box.pop()
        ctx.box = None
        return (None, *grads)


def take_output_and_gradients(tape: list, grad: list):
    """Empty ``tape[1]`` (a segment's output) and ``grad`` (its gradients) into (the output tensors
    that get a gradient, ``[their gradients]``): a one-element box for :class:`Feed`, so that no
    reference to a gradient is left here once the engine has it."""
    out = tape.pop()
    pairs = [(t, g) for t, g in zip(tensors(out), grad, strict=False) if g is not None and t.requires_grad]
    del out
    grad.clear()
    outs = [t for t, _ in pairs]
    box = [[g for _, g in pairs]]
    del pairs
    return outs, box


def backward_segment(tape: list, grad: list, started=None) -> None:
    """Back-propagate ``grad`` (one entry per tensor of the tape's output, None for none) from the
    output, the last item of ``tape``. Both lists are emptied before the engine runs, so neither the
    output nor the gradient stays referenced here: plain autograd frees them when their nodes ran
    (the executor's BWD, the profiler's stage-by-stage backward). ``started()`` is called once the
    output's last reference here is gone, just before the engine runs."""
    outs, box = take_output_and_gradients(tape, grad)
    if not outs:
        if started is not None:
            started()
        return
    with torch.enable_grad():
        root = Feed.apply(box, *outs)
        del outs
        if started is not None:
            started()
        torch.autograd.backward(root, root.new_empty(0))


def graph_nodes(roots):
    """Each node of the autograd graph from the nodes ``roots`` (``grad_fn``; None ignored), once."""
    seen, stack = set(), list(roots)
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(next_node for next_node, _ in node.next_functions)


def accumulated_leaf(node):
    """The leaf an ``AccumulateGrad`` node adds into, else None (a custom Function's node is its ctx, which
    may have a ``variable`` of its own)."""
    return node.variable if type(node).__name__ == "AccumulateGrad" else None


def state_nbytes(state) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(state))


def device_block_bytes(device, nbytes: int) -> int:
    """``nbytes`` on ``device`` in the allocator's blocks (512 B on CUDA, exact on the CPU;
    :func:`gpusolve.chain.allocator_bytes`)."""
    from gpusolve.chain import ALLOCATOR_GRANULE, allocator_bytes
    return allocator_bytes(nbytes, 1 if str(device) == "cpu" else ALLOCATOR_GRANULE)


# Note [Allocator blocks]
#     The byte model counts each tensor in the CUDA caching allocator's 512-byte blocks
#     (gpusolve.chain.ALLOCATOR_GRANULE), which is what the allocator hands out when it carves a request
#     from a segment or splits a cached block. A request of over 1 MiB that the allocator serves from a
#     cached free block is split only where more than 1 MiB would remain (``should_split`` in
#     c10/cuda/CUDACachingAllocator.cpp, without expandable segments): the request then holds up to 1 MiB
#     more than it asked for, and ``max_memory_allocated`` (what the budget is measured by) counts it.
#     Which cached block a request meets depends on the cache, not on the plan. On the H100 (2026-11-26)
#     a DenseNet plan at its least budget measured 1 049 088 B above it: most likely 1 MiB of one such
#     block, plus the 512-byte block of the caller's loss, which no plan counts (not yet confirmed on a
#     GPU: the test now records the requested bytes beside). So every plan on a CUDA device reserves one
#     remainder for the step (ALLOCATOR_REMAINDER); more than one at the peak is possible, and the
#     wrapper's step meter warns when a measured step goes over, and the next steps reserve what it showed
#     (Note [Allocator blocks learned] in torch_exec/executor.py). With
#     ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (``PYTORCH_ALLOC_CONF`` in newer torch) the
#     allocator splits every block at 512 B and nothing is reserved (:func:`expandable_segments` asks
#     torch what it parsed).
ALLOCATOR_REMAINDER = 1 << 20


def expandable_segments() -> bool:
    """Whether the caching allocator runs with expandable segments: the last ``expandable_segments``
    entry of the settings torch parsed (``torch._C._accelerator_getAllocatorSettings``, torch 2.13; torch 2.11
    has no such accessor), else of the variable torch reads: ``PYTORCH_CUDA_ALLOC_CONF`` where it is set, else
    ``PYTORCH_ALLOC_CONF`` in a torch with the accelerator's allocator settings
    (``torch._C._accelerator_setAllocatorSettings``: torch 2.11 and 2.13 read that variable when the other is
    unset, checked 2026-11-29), which older torch does not read. Torch takes only ``True`` (exact case). In
    doubt: no, and the reserve stays."""
    import os
    import re
    settings = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    text = None
    if settings is not None:
        try:
            text = settings()
        except Exception:  # a torch whose accessor fails: the variable torch reads
            text = None
    if text is None:
        text = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if text is None and hasattr(torch._C, "_accelerator_setAllocatorSettings"):
        text = os.environ.get("PYTORCH_ALLOC_CONF")
    if text is None:
        text = ""
    values = re.findall(r"expandable_segments\s*:\s*(\w+)", text)
    return bool(values) and values[-1] == "True"


def allocator_reserve_bytes(device_type: str) -> int:
    """Bytes a step on a ``device_type`` device reserves for the allocator's unsplit blocks (Note
    [Allocator blocks]): ALLOCATOR_REMAINDER on CUDA without expandable segments, else 0."""
    return ALLOCATOR_REMAINDER if device_type == "cuda" and not expandable_segments() else 0


def block_bytes(key) -> int:
    """Bytes of one storage (its :func:`storage_key`) in the allocator's blocks."""
    device, _, nbytes = key
    return device_block_bytes(device, nbytes)


def output_facts(out, external=frozenset()) -> dict:
    """What the executor's byte model needs to know of a model's output ``out`` (Note [Outputs without a
    gradient] and Note [The caller holds a_N] in torch_exec/executor.py), per tensor in :func:`tensors`
    order: ``grad_nbytes`` (its gradient in the allocator's blocks; 0 when it carries none: not a
    floating or complex dtype), ``scalar`` (one element: a loss) and ``storage`` (the index of its
    storage among the output's distinct storages, None without a plain one); ``storage_nbytes``: those
    storages' bytes in the allocator's blocks (:func:`held_nbytes`'s rule); ``storage_external``: whether
    each storage is in ``external`` (storage keys of the model's input, parameters and buffers: alive
    whatever the caller keeps)."""
    keys = list(storages(out))
    index = {key: i for i, key in enumerate(keys)}
    ts = tensors(out)
    return {"grad_nbytes": [device_block_bytes(t.device, t.numel() * t.element_size()) if differentiable(t) else 0
                            for t in ts],
            "scalar": [t.numel() == 1 for t in ts],
            "storage": [index.get(storage_key(t)) for t in ts],
            "storage_nbytes": [block_bytes(key) for key in keys],
            "storage_external": [key in external for key in keys]}


def copyable(t: torch.Tensor) -> bool:
    """Whether the executor can move ``t`` to host memory and back as raw bytes (Note [Exact copies] in
    torch_exec/offload.py): its values are its storage's bytes viewed with its offset, shape and strides
    (and its lazy conjugate/negative bits), and it has a plain storage. Not a sparse, nested or quantized
    tensor, nor a wrapper subclass without a storage."""
    return t.layout == torch.strided and not t.is_nested and not t.is_quantized and storage_key(t) is not None


def held_nbytes(state) -> int:
    """Bytes a holder of ``state`` keeps allocated: every distinct storage behind its tensors, whole
    (a view keeps its base's storage), in the allocator's blocks."""
    return sum(map(block_bytes, storages(state)))


def by_origin(pairs) -> list[list[int]]:
    """``(stage, bytes)`` pairs summed per stage, as a profile lists them: ``[[stage, bytes], ...]`` in stage order."""
    by_stage: dict[int, int] = {}
    for stage, nbytes in pairs:
        by_stage[stage] = by_stage.get(stage, 0) + nbytes
    return [[stage, nbytes] for stage, nbytes in sorted(by_stage.items())]


def held_from(state, origin: dict) -> list[list[int]]:
    """:func:`held_nbytes` of ``state`` split by where each storage was made (:func:`by_origin`), ``origin``
    mapping a storage key to its stage (0 for the chain's input)."""
    return by_origin((origin[key], block_bytes(key)) for key in storages(state))


def grad_nbytes(state) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(state) if differentiable(t))


def storage_key(t: torch.Tensor):
    """Identity of the storage behind ``t`` (device, data pointer), or None when it has none."""
    try:  # a wrapper subclass (FSDP2's DTensor parameters) has a storage whose data_ptr() raises
        storage = t.untyped_storage()
        return (str(t.device), storage.data_ptr(), storage.nbytes())
    except (RuntimeError, NotImplementedError):
        return None


def grad_storages(grads) -> dict:
    """``{(device, base address): bytes in the allocator's blocks}`` of the buffers behind gradient tensors
    ``grads``: a view's (a slice of a cat's gradient) is its base's, whole (Note [Gradients that are views] in
    gpusolve/chain.py). Read from the base tensor's extent, not through ``untyped_storage()``: on the CPU the
    storage object that call makes for a gradient kept memory the next readings of a stage-by-stage
    profile then saw (a pass-through model's backward peak read 30 720 B higher)."""
    out = {}
    for g in grads:
        if g is None or g.layout != torch.strided or g.numel() == 0:
            continue  # a sparse gradient (no storage of its own): counted by its tensor's size, as before
        base = g._base if g._base is not None else g
        try:  # a wrapper subclass's data pointer may raise (as in storage_key)
            address = base.data_ptr() - base.storage_offset() * base.element_size()
        except (RuntimeError, NotImplementedError):
            continue
        extent = base.storage_offset() + 1 + sum((d - 1) * st for d, st in zip(base.shape, base.stride()) if d > 0)
        out[(str(base.device), address)] = device_block_bytes(base.device, extent * base.element_size())
    return out


def register_grad_hook(t, fn):
    """``t.register_hook(fn)``, with ``t.grad_fn`` read first: a view whose base was written in place since it was
    taken has a stale grad_fn until it is read, and registering a hook on it then kills the process (SIGSEGV, torch
    2.13: ``y = fc(x); v = y[:h]; y[h:].mul_(0.5); v.register_hook(f)``, a review: bench/repros/
    rv16_review_inplace_view_hook_segfault.py). Reading it regenerates the view's grad_fn, as autograd would."""
    t.grad_fn  # noqa: B018 (read for its effect)
    return t.register_hook(fn)


def storages(state) -> dict:
    """``{storage key: bytes}`` of the tensors of ``state``."""
    out = {}
    for t in tensors(state):
        key = storage_key(t)
        if key is not None:
            out[key] = key[2]
    return out


def aliases(out, inp) -> bool:
    """True when every storage of ``out`` is one of ``inp``'s (in-place ops, views, pass-through)."""
    outs = storages(out)
    return bool(outs) and set(outs) <= set(storages(inp))


# ---------------------------------------------------------------------------- data bound to a call
class CallData:
    """What a wrapper's stages read beside the chain's state that belongs to one call of the model:
    auto_checkpoint's side values (masks, position ids, a frozen encoder's output), the block fallback's
    other arguments. Note [Data bound to a call] in torch_exec/executor.py: the caller binds it around
    its call (:meth:`bound`), a step's runtime keeps what was bound when its forward ran and binds it
    again around its recomputations. Per thread (a backward may run on another thread than its forward);
    copies and pickles start unbound."""

    def __init__(self):
        self._local = threading.local()

    def get(self):
        """What is bound on this thread (None: nothing)."""
        return getattr(self._local, "value", None)

    @contextlib.contextmanager
    def bound(self, value):
        was = self.get()
        self._local.value = value
        try:
            yield
        finally:
            self._local.value = was

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self._local = threading.local()


class HeldCallData:
    """What a :class:`CallData` (None: none) had bound when a step's forward ran, kept by the step's
    runtime, and gone with it (Note [Data bound to a call] in torch_exec/executor.py)."""

    __slots__ = ("slot", "value")

    def __init__(self, slot: CallData | None):
        self.slot, self.value = slot, (None if slot is None else slot.get())

    def bound(self):
        return contextlib.nullcontext() if self.slot is None else self.slot.bound(self.value)


# ---------------------------------------------------------------------------- RNG
def cuda_devices(state) -> list[int]:
    return sorted({t.device.index if t.device.index is not None else torch.cuda.current_device()
                   for t in tensors(state) if t.is_cuda})


# Note [Generators of the model's own]
#     A forward may draw from a ``torch.Generator`` of its own (``torch.randn(shape, generator=self.gen)``: noise
#     kept reproducible apart from the data pipeline's RNG). Recording and replaying only torch's default
#     generators, a stage recomputed in the backward drew other noise than its forward had: its gradient was
#     taken at other values (7.7e-3 off plain autograd's at 45 %), the generator ended the step elsewhere, and
#     preparing moved it on (a review, 2026-11-28: bench/repros/rv7_train_own_generator.py). So the generators
#     the wrapped modules reach (:func:`generators_of`) are recorded, replayed and forked beside the default ones
#     (:class:`RngState`, :func:`fork_rng`), by the profiler (which stages draw random numbers), the executor, the
#     model's snapshot and auto_checkpoint's preparation. A module reaches, each submodule's:
#
#     - attributes, and the lists, tuples, sets and dicts there (a review found ``self.gens = [g]`` unseen,
#       rv7_rev_generator_in_container.py), and the attributes of plain objects there (``self.sampler.g``, a
#       sampler or config object: rv21d_seq_generator_in_plain_object_unseen.py), to :data:`_REACH_DEPTH` levels
#       and :data:`_REACH_ITEMS` items of one container;
#     - the globals, closure variables and defaults of its ``forward`` (the class's, or one set on the instance):
#       the global names its code uses, as :func:`reachable_state` reads a plain callable's (``torch.randn(shape,
#       generator=NOISE_GEN)`` with a module-level generator: rv21d_seq_global_generator_unseen.py);
#     - what its forward hooks and forward pre-hooks reach, and the global ones (``register_module_forward_hook``):
#       a noise hook's closure (rv21d_hook_closure_generator_unseen.py);
#
#     and the stages' plain callables reach what :func:`reachable_state` finds. Each value is looked at once per
#     discovery, and :data:`_REACH_VISITS` values at most; the modules' parameter, buffer and submodule dicts are
#     not looked into as attributes: on GPT-2 small (164 modules, CPU) a walk takes 1.07 ms against 3.37 ms before
#     (bench/results/generators_walk_cpu.md). Each wrapper finds the generators when it profiles an input
#     signature, and where: :func:`generator_sites` keeps, for each generator reached through the modules'
#     attributes, the containers there and plain objects' attributes, the module and the steps from it
#     (:class:`GeneratorSites`), and each call looks them up there again (:meth:`GeneratorSites.now`): one the
#     training loop put there since (``self.gen = new``, ``self.gens[0] = new``, ``self.sampler.g = new``; a new
#     generator per step or epoch) is recorded and replayed by the step's runtime (torch_exec/executor.py
#     Runtime) with the same profile and plan. The profile does not depend on which generator it is (its records'
#     sizes are those of a state of the same device). One rule for every place the walk sees: a generator was keyed
#     by the signature where a module held it directly, only, which re-profiled every step when the loop made one
#     per step (12 profiles in 12 steps, rv21r_seq_new_generator_each_step_reprofiles.py) and missed one replaced
#     inside a list (0.09-0.11 off plain autograd's gradients, rv21r_seq_generator_in_list_replaced_unseen.py;
#     reviews rv21d, rv21r). A graph torch.export captured holds the generator as a constant: auto_checkpoint keys
#     the generators at the sites (:meth:`GeneratorSites.key`, the sites found at its first call) and captures
#     again when one is replaced (its many-captures warning names the generators and the remedy, reseeding one:
#     ``self.gen.manual_seed(step)``). Looking the sites up costs 0.011 ms a call with 24 of them on GPT-2 small,
#     and the signature's walk without the scan of every module's attributes for generators 0.16 ms instead of 0.31
#     (module_state_key; captured_state_key 0.44 instead of 0.61: bench/results/generator_sites_cost_cpu.md). Not followed: a generator put where profiling found none, one in a set (no place to look it up),
#     and one reached only through a function (a forward's global or closure variable, a hook's, a plain
#     callable's: kept as the object found). Not seen: a generator
#     reached only some other way (a global that a helper function or method other than ``forward`` names, a
#     generator made inside the forward, a forward argument; auto_checkpoint refuses the last under either capture,
#     and torch.export a generator in its graph that is not among these: Note [Probing the model] in
#     torch_exec/auto.py).

_REACH_VISITS = 1 << 16
"""The most values one :func:`generators_of` walk looks at (each once), bounding a model that holds huge plain
objects (a dataset, a tokenizer) on its modules."""

_ATOMS = (str, bytes, int, float, bool, complex, type(None), type, types.ModuleType, torch.dtype, torch.device)
_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)


def generators_of(modules=(), fns=()) -> tuple:
    """The ``torch.Generator`` objects, other than torch's default ones, that ``modules`` (and their submodules)
    and the plain callables ``fns`` reach (Note [Generators of the model's own])."""
    return generator_sites(modules, fns).found


class GeneratorSites:
    """Where :func:`generator_sites` found the model's own generators (Note [Generators of the model's own]):
    ``found``, the generators then; ``sites``, (a module, the steps from it) for each one reached through the
    modules' attributes, the containers there and plain objects' attributes, which :meth:`now` looks up again;
    ``fixed``, those reached only through a function (a forward's globals or closure, a hook's, a plain callable's),
    kept as the objects found."""

    __slots__ = ("found", "sites", "fixed")

    def __init__(self, found: tuple, sites: list, fixed: tuple):
        self.found, self.sites, self.fixed = found, sites, fixed

    def now(self) -> tuple:
        """The generators at the sites now (one the training loop put there since replaces the one found), and the
        fixed ones, each once, torch's default ones left out; ``found`` itself where nothing was replaced."""
        if not self.sites:
            return self.found
        out: dict = {}
        for root, steps in self.sites:
            value = root
            try:
                for attribute, key in steps:
                    value = value.__dict__[key] if attribute else value[key]
            except (KeyError, IndexError, TypeError, AttributeError):  # the site is gone: nothing to record there
                continue
            if isinstance(value, _GENERATOR):
                out[id(value)] = value
        for g in self.fixed:
            out.setdefault(id(g), g)
        defaults = _default_generator_ids()
        now = tuple(g for key, g in out.items() if key not in defaults)
        if len(now) == len(self.found) and all(a is b for a, b in zip(now, self.found)):
            return self.found
        return now

    def key(self) -> tuple:
        """The identities of :meth:`now`'s generators: part of a captured graph's input signature, which holds the
        generators as constants (Note [Generators of the model's own])."""
        return tuple(map(id, self.now()))


def _default_generator_ids() -> set:
    defaults = {id(torch.default_generator)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        defaults |= {id(g) for g in torch.cuda.default_generators}
    return defaults


def generator_sites(modules=(), fns=()) -> GeneratorSites:
    """:func:`generators_of`'s walk, keeping where each generator was found (:class:`GeneratorSites`)."""
    found: dict = {}
    sites: list = []
    fixed: dict = {}
    seen: set[int] = set()  # the values looked at (containers, objects, functions)
    walked: set[int] = set()  # the modules walked
    left = [_REACH_VISITS]
    pending: list = []  # modules reached some other way than as a submodule (a hook's closure)

    def take(reached) -> None:  # what reachable_state found: generators, and modules to walk
        for _, value in reached:
            if isinstance(value, torch.Generator):
                found[id(value)] = fixed[id(value)] = value
            elif isinstance(value, nn.Module) and id(value) not in walked:
                pending.append(value)

    def callable_(f) -> None:  # a forward, a hook: its closure, defaults and the globals its code names
        if id(f) not in seen and left[0] > 0:
            seen.add(id(f))
            left[0] -= 1
            take(reachable_state(f, generators=True))

    def look(value, depth: int, root, steps) -> None:  # an attribute, containers' items, plain objects' attributes
        if isinstance(value, _ATOMS) or isinstance(value, torch.Tensor):
            return
        if isinstance(value, torch.Generator):
            found[id(value)] = value
            if steps is None:  # in a set: no place to look it up again
                fixed[id(value)] = value
            else:
                sites.append((root, steps))
            return
        if (depth >= _REACH_DEPTH or id(value) in seen or left[0] <= 0 or isinstance(value, (nn.Module, _FUNCTIONS))):
            return  # (a module: walked as one when it is a submodule; a function stored as an attribute: not followed)
        seen.add(id(value))
        left[0] -= 1
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(itertools.islice(value, _REACH_ITEMS)):
                look(item, depth + 1, root, None if steps is None else steps + ((False, i),))
        elif isinstance(value, (set, frozenset)):
            for item in itertools.islice(value, _REACH_ITEMS):
                look(item, depth + 1, root, None)
        elif isinstance(value, dict):
            for key, item in itertools.islice(value.items(), _REACH_ITEMS):
                look(item, depth + 1, root, None if steps is None else steps + ((False, key),))
        else:
            try:
                attrs = getattr(value, "__dict__", None)  # a plain object (a sampler, a config): its attributes
            except Exception:  # noqa: BLE001 - a proxy that raises on any attribute: not looked into
                attrs = None
            if isinstance(attrs, dict):
                for key, item in itertools.islice(attrs.items(), _REACH_ITEMS):
                    look(item, depth + 1, root, None if steps is None else steps + ((True, key),))

    def walk(mod) -> None:
        for m in mod.modules():
            if id(m) in walked:
                continue
            walked.add(id(m))
            d = m.__dict__
            for key, value in d.items():
                if key in _HOOK_DICTS:
                    for hook in value.values():
                        callable_(hook)
                elif key not in _MODULE_DICTS:
                    look(value, 0, m, ((True, key),))
            callable_(type(m).forward)
            forward = d.get("forward")  # one set on the instance (a wrapper's substitute calls the class's too)
            if callable(forward):
                callable_(forward)

    for mod in modules:
        walk(mod)
    from torch.nn.modules import module as module_module
    if modules:  # the global forward hooks run at every module's call
        for hooks in (module_module._global_forward_hooks, module_module._global_forward_pre_hooks):
            for hook in hooks.values():
                callable_(hook)
    for fn in fns:
        if not isinstance(fn, nn.Module):
            take(reachable_state(fn, generators=True))
    while pending:
        walk(pending.pop())
    defaults = _default_generator_ids()
    return GeneratorSites(tuple(g for key, g in found.items() if key not in defaults), sites,
                          tuple(g for key, g in fixed.items() if key not in defaults))


# a module's own dictionaries that generators_of does not look into as attributes: its parameters, buffers and
# submodules (walked as modules), and its hooks, of which the forward ones are followed as callables
_MODULE_DICTS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_backward_hooks",
                           "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
                           "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_forward_hooks_with_kwargs",
                           "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs"})
_HOOK_DICTS = frozenset({"_forward_hooks", "_forward_pre_hooks"})


def _same_state(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two generator states (host byte tensors: ``get_state()``'s, a CUDA generator's too) are equal: by
    their bytes, a third of ``torch.equal``'s time on the host (Note [Draws found at the first run])."""
    if type(a) is not torch.Tensor or type(b) is not torch.Tensor:  # traced (torch.export's fake tensors): no data
        return True
    try:
        if a.device.type == "cpu" and b.device.type == "cpu" and a.dtype == b.dtype == torch.uint8:
            return a.numpy().tobytes() == b.numpy().tobytes()
        return torch.equal(a, b)
    except RuntimeError:  # traced by torch.export (non-strict): the data cannot be read, and nothing runs again
        return True


@dataclass
class RngState:
    """CPU RNG state, the CUDA RNG states of ``devices``, and the states of ``generators`` (Note [Generators of
    the model's own]). ``cpu`` None: not recorded (a record of the generators a stage advanced:
    :meth:`advanced`)."""

    cpu: torch.Tensor | None
    devices: list[int]
    cuda: list[torch.Tensor]
    generators: tuple = ()
    states: list = field(default_factory=list)

    @classmethod
    def capture(cls, devices: list[int], generators: tuple = ()) -> "RngState":
        # the devices' default generators read directly (torch.cuda.get_rng_state's own checks cost more than the
        # read: a capture runs twice per recomputed stage and step, Note [Draws found at the first run])
        cuda = [torch.cuda.default_generators[d].get_state() for d in devices] if devices else []
        return cls(torch.get_rng_state(), list(devices), cuda, tuple(generators), [g.get_state() for g in generators])

    def restore(self) -> None:
        if self.cpu is not None:
            torch.set_rng_state(self.cpu)
        for d, st in zip(self.devices, self.cuda):
            torch.cuda.set_rng_state(st, d)
        for g, st in zip(self.generators, self.states):
            g.set_state(st)

    def equals(self, other: "RngState") -> bool:
        return self.advanced(other) is None and len(self.devices) == len(other.devices) \
            and [id(g) for g in self.generators] == [id(g) for g in other.generators]

    def advanced(self, after: "RngState") -> "RngState | None":
        """This state (captured before a run, ``after`` it, of the same generators) restricted to the generators
        that the run advanced, which are all a replay needs to put back (Note [Draws found at the first run]); None
        where none moved."""
        return _advanced(self, after, lambda a, b: not _same_state(a, b))

    def nbytes(self, device_type: str) -> int:
        """Bytes this record holds on ``device_type`` ("cpu" or "cuda")."""
        tensors_ = ([] if self.cpu is None else [self.cpu]) + list(self.cuda) + list(self.states)
        return sum(t.numel() * t.element_size() for t in tensors_ if t.device.type == device_type)


_CPU_STATE_BYTES = torch.default_generator.get_state().numel()  # a CPU generator's state (5 056 B)
_PROBES = threading.local()  # per thread: the small tensors a fingerprint draws into (RngMark)


def _fingerprint(gen: torch.Generator) -> tuple:
    """Numbers drawn from ``gen`` (a clone: it moves) into small tensors made once per thread: equal for equal
    states, and, for different ones, equal with a chance of about 2^-150 (a float and a double normal, which read
    the normal samples the generator caches, then two 64-bit integers). Nothing is allocated (Note [Draws found at
    the first run])."""
    bufs = getattr(_PROBES, "bufs", None)
    if bufs is None:
        bufs = _PROBES.bufs = (torch.empty(1), torch.empty(1, dtype=torch.float64), torch.empty(2, dtype=torch.int64))
    f, d, i = bufs
    f.normal_(generator=gen)
    d.normal_(generator=gen)
    i.random_(generator=gen)
    return f.item(), d.item(), *i.tolist()


_fingerprint(torch.Generator())  # this thread's tensors made at import, outside any measured step


def _read_state(gen: torch.Generator, free: bool, keep: bool):
    """A generator's state for :class:`RngMark`: bytes (its ``get_state()``, a host tensor turned into bytes at
    once), or where ``free`` (a CPU generator of a model on the CPU, whose meter sees every host allocation), a
    (clone where ``keep``, fingerprint) pair, which allocates nothing through torch."""
    if free:
        clone = gen.clone_state()
        return (clone if keep else None, _fingerprint(clone.clone_state() if keep else clone))
    return gen.get_state().numpy().tobytes()


def _state_tensor(state) -> torch.Tensor:
    if isinstance(state, tuple):
        return state[0].get_state()
    return torch.frombuffer(bytearray(state), dtype=torch.uint8)


class RngMark:
    """The states of the default generators (CPU, the CUDA ``devices``') and of ``generators``: what the first run of
    a stage that runs again is compared against, and its record (Note [Draws found at the first run]). A state is
    held as bytes (read one at a time: torch's allocator holds it for an instant, on the host), or, where ``free``
    (a model on the CPU, whose budget counts host memory), a CPU generator as a clone and a fingerprint
    (:func:`_fingerprint`): nothing through torch's allocator, so that a step's measured peak does not see it."""

    __slots__ = ("cpu", "devices", "cuda", "generators", "states")

    def __init__(self, cpu, devices: list, cuda: list, generators: tuple, states: list):
        self.cpu, self.devices, self.cuda, self.generators, self.states = cpu, devices, cuda, generators, states

    @classmethod
    def capture(cls, devices: list[int], generators: tuple = (), free: bool = False, keep: bool = True) -> "RngMark":
        """``keep``: a mark a run may be replayed from (before it); False: only compared (after it)."""
        cuda = [_read_state(torch.cuda.default_generators[d], False, keep) for d in devices] if devices else []
        return cls(_read_state(torch.default_generator, free, keep), list(devices), cuda, tuple(generators),
                   [_read_state(g, free and g.device.type == "cpu", keep) for g in generators])

    def advanced(self, after: "RngMark") -> "RngMark | None":
        """This mark (taken before a run; ``after`` it) restricted to the generators the run advanced; None where
        none moved."""
        return _advanced(self, after, _moved)

    def restore(self) -> None:
        if self.cpu is not None:
            torch.default_generator.set_state(_state_tensor(self.cpu))
        for d, st in zip(self.devices, self.cuda):
            torch.cuda.set_rng_state(_state_tensor(st), d)
        for g, st in zip(self.generators, self.states):
            g.set_state(_state_tensor(st))

    def nbytes(self, device_type: str) -> int:
        """Bytes of the states recorded, where they count on ``device_type``: every state is host memory (a CUDA
        generator's too), so on "cpu" only (a clone: a CPU generator's state)."""
        if device_type != "cpu":
            return 0
        states = ([] if self.cpu is None else [self.cpu]) + list(self.cuda) + list(self.states)
        return sum(_CPU_STATE_BYTES if isinstance(st, tuple) else len(st) for st in states)


def _advanced(before, after, moved):
    """``before`` (an :class:`RngState` or :class:`RngMark`, taken before a run; ``after`` it, of the same
    generators) restricted to the generators whose states ``moved(a, b)`` says the run advanced, as the same class;
    None where none moved (Note [Draws found at the first run])."""
    cpu = before.cpu if before.cpu is not None and after.cpu is not None and moved(before.cpu, after.cpu) else None
    cuda = [(d, a) for d, a, b in zip(before.devices, before.cuda, after.cuda) if moved(a, b)]
    gens = [(g, a) for g, a, b in zip(before.generators, before.states, after.states) if moved(a, b)]
    if cpu is None and not cuda and not gens:
        return None
    return type(before)(cpu, [d for d, _ in cuda], [a for _, a in cuda], tuple(g for g, _ in gens),
                        [a for _, a in gens])


def _moved(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a[1] != b[1]
    return a != b


# Note [Draws found at the first run]
#     Whether a stage draws random numbers was read once, off the profile (one call), and the executor recorded a
#     recomputed stage's RNG state only where the profile said so. A stage that draws on some calls only (noise
#     where the activations are large, ``if z.abs().mean() > 0.5``) or once an attribute the training loop sets
#     allows it (a timm ``DropPath`` whose ``drop_prob``, a plain float that the signature does not key, is raised
#     from 0; ``F.dropout(z, self.p)``) was recomputed from the backward's RNG state: other noise than its
#     forward's, gradients 1e-1 off plain autograd's, and the generator moved on by the recomputation, silently (a
#     review, 2026-11-29: bench/repros/rv21d_seq_data_dependent_draw_not_replayed.py,
#     rv21d_seq_drop_rate_attribute_from_zero_not_replayed.py, rv21d_join_live_stage_draws_not_replayed.py). So
#     the first run of every stage that runs again later (the profile's flag notwithstanding) marks the state of
#     the default generators and the model's own before it and compares after it (:class:`RngMark`): the record
#     keeps the generators that moved, only (a stage drawing from a generator of its own records that one: with a
#     generator per block, each stage had recorded all of them, 5 056 B each on the CPU, and no budget but plain
#     autograd's fitted: rv21d_seq_every_generator_recorded_per_stage.py; the profiler's ``rng_bytes`` per stage,
#     what the plan reserves, are read the same way). The recomputation replays it in the same step, so that step
#     is right too; a stage the profile did not see draw is marked as drawing from then on (the executor's
#     Entry.rng and the profile's ``rng``), said once (:class:`DrawsFoundWarning`), and the record's bytes, where
#     they are on the device the plan counts (a CPU model's), are reserved from the next call on, with the copy
#     ``fork_rng`` takes while the largest record is replayed grown to it: every stage found drawing counts there,
#     by the rule the plan reserves with (executor.rng_records_bytes, before and after; the copy was counted for the
#     first stage found only, tests/test_generators.py::test_every_stage_found_drawing_grows_the_replay_copy_the_plan_
#     reserves) (executor.learn_draws: as other learned sizes, a re-plan that no longer fits raises, naming them). A join re-plans
#     its draw order (Note [Draw order] in torch_exec/join.py). The marks allocate nothing on the device: on a
#     CUDA device the states are read as bytes (host memory; a CUDA generator's state is 16 B); on the CPU, whose
#     meter sees every host allocation (a 5 056 B state read at each stage boundary went over tight budgets of
#     small models), a CPU generator is cloned (``clone_state``) and compared by a fingerprint, a few numbers drawn
#     from a clone into tensors made once per thread (:func:`_fingerprint`). The host cost, timed inside the steps
#     (bench/rng_watch_cost.py --attribute: DenseNet-121's layout with tiny widths on the CPU, 15 of 65 stages
#     recomputed, on a loaded 2-core host, the check of Note [Python's and NumPy's generators] included): 0.41-0.43
#     ms of a 36-44 ms step (1.1 %) with the bytes a CUDA model's steps read, 0.63-0.88 ms (1.3-1.7 %) with the CPU's
#     clones and fingerprints; steps with the watch on and off, interleaved in one process (--ab), differed by less
#     than their noise (ratios 0.94-1.03; the tree without the watch, its control: 0.99-1.02).


class DrawsFoundWarning(UserWarning):
    """A stage drew random numbers at a call whose profile saw it draw none (Note [Draws found at the first
    run]): it is recorded and replayed from then on."""


class CaptureError(RuntimeError):
    """The model could not be turned into a chain (the message says why and what to do)."""


# Note [Python's and NumPy's generators]
#     Draws from Python's ``random`` or NumPy's global generator (LayerDrop as ``if random.random() < p``, noise from
#     ``np.random.randn``) cannot be recorded and replayed as torch's generators are: a recomputation draws the
#     next numbers (another block skipped, other noise), and profiling's runs move those generators on, so that
#     every step differs from plain autograd's, silently (a review, 2026-11-29:
#     bench/repros/rv21d_seq_python_numpy_random_not_refused.py). The one rule, :func:`host_rng_error`, refuses
#     them naming the fix, drawing with torch: in auto_checkpoint's probe (Note [Probing the model] in
#     torch_exec/auto.py), in the profiler per stage (its no-grad run: the stage named; a join's head, which never
#     runs again, is not refused; profiling puts both generators back as they were), and at run time once per
#     step, around the forward of a plan that recomputes anything (a draw at a later call only:
#     rv21d_auto_python_random_on_later_call_unrefused.py). The run-time check compares Python's state
#     (``random.getstate()``) and NumPy's Mersenne Twister words and position (read in place, a 2.5 KB copy: NumPy's
#     ``get_state()`` took 55 us here); a draw only of NumPy's cached second Gaussian (``np.random.randn()`` of
#     one number, every other call) moves neither and is seen by the profiler's check only.


def host_rng_state() -> tuple:
    """The state of Python's ``random`` and NumPy's global generator (whole: the profiler's and the probe's)."""
    import random

    import numpy as np
    return random.getstate(), np.random.get_state()


def set_host_rng_state(state: tuple) -> None:
    import random

    import numpy as np
    random.setstate(state[0])
    np.random.set_state(state[1])


def host_rng_moved(before: tuple) -> list[str]:
    """Which of Python's ``random`` and NumPy's global generator moved since ``before`` (:func:`host_rng_state`)."""
    now = host_rng_state()
    return _host_moved((now[0], now[1][1:]), (before[0], before[1][1:]))


HOST_RNG_NAMES = ("Python's random", "NumPy's global generator (np.random)")
_NUMPY_WORDS = [None, None]  # the legacy global generator, and where its words are (Note [Python's and NumPy's ...])


def host_rng_mark() -> tuple:
    """A cheap mark of Python's and NumPy's generators (Note [Python's and NumPy's generators]), for
    :func:`host_rng_moved_since`."""
    import ctypes
    import random
    np = sys.modules.get("numpy")
    words = None
    if np is not None:
        try:
            bits = np.random.mtrand._rand._bit_generator
            if _NUMPY_WORDS[0] is not bits:
                _NUMPY_WORDS[:] = [bits, int(bits.ctypes.state_address)]
            words = ctypes.string_at(_NUMPY_WORDS[1], 624 * 4 + 4)  # mt19937_state: key[624], pos
        except (AttributeError, TypeError, ValueError):  # another NumPy: its whole state
            words = np.random.get_state()[1:]
    return random.getstate(), words


def host_rng_moved_since(mark: tuple) -> list[str]:
    """Which of Python's ``random`` and NumPy's global generator moved since :func:`host_rng_mark`'s ``mark``."""
    return _host_moved(host_rng_mark(), mark)


def _host_moved(now: tuple, before: tuple) -> list[str]:
    """The names of the generators that differ between ``now`` and ``before``: (Python's state, NumPy's words as
    bytes, None where NumPy is not loaded, or the arrays and numbers of its state after the name)."""
    moved = [HOST_RNG_NAMES[0]] if now[0] != before[0] else []
    if isinstance(now[1], bytes) or now[1] is None:
        changed = now[1] != before[1]
    else:
        import numpy as np
        changed = any(not np.array_equal(a, b) for a, b in zip(now[1], before[1], strict=True))
    return moved + [HOST_RNG_NAMES[1]] if changed else moved


def host_rng_error(moved: list[str], what: str, why: str) -> CaptureError:
    """The one refusal of draws from Python's ``random`` or NumPy's global generator (Note [Python's and NumPy's
    generators]): ``what`` draws from ``moved``, which ``why`` (what cannot replay them)."""
    return CaptureError(f"{what} draws from {' and '.join(moved)}, which {why} (Note [Python's and NumPy's "
                        f"generators] in torch_exec/_util.py); draw with torch instead (torch.rand(()) < p, "
                        f"torch.randn_like), whose generators the executor records and replays")


@contextlib.contextmanager
def fork_rng(devices: list[int], generators: tuple = (), enabled: bool = True):
    """``torch.random.fork_rng(devices)`` that also puts back the states of ``generators`` (Note [Generators of
    the model's own])."""
    if not enabled:
        yield
        return
    states = [g.get_state() for g in generators]
    try:
        with torch.random.fork_rng(devices=devices, enabled=True):
            yield
    finally:
        for g, st in zip(generators, states):
            g.set_state(st)


def progress_setting() -> bool | None:
    """The ``progress`` of the solves and profiling a wrapper runs: None (gpusolve's default: shown when
    long) in a single process and on rank 0 of a distributed job, False on the other ranks, which would
    print the same lines again."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return False
    return None


def all_rng_devices() -> list[int]:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


# ---------------------------------------------------------------------------- autocast
def autocast_state() -> dict:
    """Autocast settings of the calling thread, per device type (as torch.utils.checkpoint records them)."""
    out = {}
    for device_type in ("cpu", "cuda"):
        try:
            enabled = torch.is_autocast_enabled(device_type)
        except (RuntimeError, TypeError):  # pragma: no cover - old torch
            continue
        if enabled:  # re-entered without the cast cache (Note [Autocast's cache] in the executor)
            out[device_type] = dict(dtype=torch.get_autocast_dtype(device_type), cache_enabled=False)
    return out


def without_caches(fn):
    """``fn`` runs with autocast's cast cache off (Note [Autocast's cache] in torch_exec/executor.py) and
    parametrize's cache off (:func:`parametrize_cache_off`)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        was = torch.is_autocast_cache_enabled()
        torch.set_autocast_cache_enabled(False)
        try:
            with parametrize_cache_off():
                return fn(*args, **kwargs)
        finally:
            torch.set_autocast_cache_enabled(was)
    return run


@contextlib.contextmanager
def parametrize_cache_off():
    """Inside ``torch.nn.utils.parametrize.cached()`` a parametrized weight (weight_norm, spectral_norm,
    orthogonal) is computed once and reused until the context ends: a stage run under ``no_grad`` cached a
    weight without a graph, which its recomputation and every later stage then read (their
    ``original0``/``original1`` got no gradient, 8 of 12 in a review's model, and the cache held each weight
    past the plan: 1.40x the budget), and a capture kept the first call's weights as constants, for every
    later step (a review, 2026-11-28: bench/repros/rv9_train_parametrize_cached_*.py). So the wrapper's steps,
    captures, profiling and backwards run with that cache off: each use computes the weight, as outside
    ``cached()``; the values are the same. The entries the caller's code made stay."""
    param = sys.modules.get("torch.nn.utils.parametrize")
    was = getattr(param, "_cache_enabled", 0)
    if not was:
        yield
        return
    param._cache_enabled = 0
    try:
        yield
    finally:
        param._cache_enabled = was


def nothing_requires_grad(values, module: nn.Module, fns=()) -> bool:
    """Whether a call on ``values`` (tensors, nested in tuples, lists and dicts) records no graph in grad mode:
    neither they nor ``module``'s parameters require grad (a frozen model's features read without
    ``torch.no_grad()``), nor a leaf tensor that the plain callables among ``fns`` reach (:func:`stage_state`; looked
    for only when the rest needs no gradient). The wrappers then run the model plainly, as under ``no_grad``: there
    is no backward to plan for, and profiling it would plan a training step that never comes (a review, 2026-11-29:
    refused with an InfeasibleBudgetError naming unsaved boundaries, bench/repros/rv18_input_frozen_no_grad_infeasible.py;
    with a function among the stages, or through a join, it still was: rv19_diff_callable_stage_frozen_no_grad.py,
    rv19_diff_join_frozen_no_grad.py). What a callable reaches only as it runs shows in its output
    (:func:`ran_without_grad`)."""
    if _any_requires_grad(values) or any(p.requires_grad for p in module.parameters()):
        return False
    callables = [fn for fn in fns if not isinstance(fn, nn.Module)]
    return not callables or not any(t.requires_grad for t in stage_state(callables)[1])


def _any_requires_grad(values) -> bool:
    """Whether a tensor among ``values`` (nested in tuples, lists and dicts) requires grad."""
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves(values))


def ran_without_grad(output, who: str):
    """``output`` of a call run plainly because :func:`nothing_requires_grad`; where it requires grad all the same
    (a tensor attribute requiring grad that is no parameter), that call was plain autograd's: said once."""
    if _any_requires_grad(output):
        warn_once(f"{who}: no parameter and no input requires grad, so the call ran the model plainly, but its output "
                  f"requires grad (a tensor requiring grad that is no nn.Parameter?): its backward is plain "
                  f"autograd's, without checkpointing; register such tensors as nn.Parameter", FallbackWarning,
                  stacklevel=3)
    return output


def refuse_inference_mode(who: str) -> None:
    """``prepare()`` profiles a training step: under ``torch.inference_mode()`` autograd records nothing
    and inference tensors cannot be used by it."""
    if torch.is_inference_mode_enabled():
        raise RuntimeError(f"{who}.prepare() profiles a training step (forward and backward) and cannot run under "
                           f"torch.inference_mode(): call it outside that block, with inputs made outside it")


def refuse_meta(who: str, values, module: nn.Module | None = None) -> None:
    """Profiling reads the allocator and times the passes: tensors on the ``meta`` device have neither.
    Raises ``ValueError`` naming the first such tensor (an input, or ``module``'s parameter or buffer)."""
    named = [(f"input {i}", t) for i, t in enumerate(tensors(values))]
    if module is not None:
        named += [(f"parameter {n}", t) for n, t in module.named_parameters()]
        named += [(f"buffer {n}", t) for n, t in module.named_buffers()]
    for name, t in named:
        if t.device.type == "meta":
            raise ValueError(f"{who}: {name} is on the meta device, which has no memory or time to profile; move the "
                             f"model and its inputs to the device it trains on (model.to_empty(device='cuda') and load "
                             f"its weights, or build it there)")


# Note [Keys of modules run live]
#     CheckpointedSequential and CheckpointedJoin call their stage modules as themselves: a module's scalar attribute
#     read by its code is read live, and a change needs no new profile (a temperature the loop anneals re-profiled
#     every step when every scalar attribute was keyed, and a stage caching its sequence length on its first call was
#     profiled twice: review rv20r, bench/repros/rv20r_seq_loop_scalar_reprofiles_every_step.py). What the profile
#     depends on is keyed: the training mode, and a dropout's probability, which decides whether the stage draws random
#     numbers (a dropout switched on after the first step kept the profile's "this stage draws nothing", and its
#     recomputations drew other masks than its forward: 2.2e-3 off plain autograd's gradients, review rv20b,
#     bench/repros/rv20b_dropout_enabled_after_profile_not_replayed.py). A captured graph fixes every scalar attribute
#     (:func:`captured_state_key`).
def module_state_key(module, trainable: list | None = None) -> tuple:
    """What of ``module``'s state a profile, a plan and a captured graph depend on beside the inputs, as
    part of an input signature: each submodule's training mode (a captured graph has its dropout and
    BatchNorm mode fixed), which parameters require grad (a frozen one gets no gradient: the profile
    holds none for it, and a captured graph computes it as data, without grad), the parameters'
    and buffers' dtypes and devices (``model.double()`` after the first call keeps the same
    Parameter objects: a float32 profile under-counted the float64 step by 84-93 %), and each dropout's
    probability (Note [Keys of modules run live])). ``trainable``: a list
    that gets the parameters requiring grad met in the same walk, each once, in ``module.parameters()``'s
    order (the parameter tap's: Note [One walk of the model per call] in torch_exec/executor.py)."""
    return _state_key(module, captured=False, trainable=trainable)


SCALAR_TYPES = (bool, int, float, str, type(None))
# the same types as a set: ``type(v) in`` a tuple compares with each in turn, which on the every-call walk of
# :func:`captured_state_key` was most of the key's cost: with it (and no tuple made of an empty hook dict) the key of
# 145 modules went from 0.55 to 0.36 ms a call (CPU; bench/results/host_overhead_cpu.md, "Per-call parts")
_SCALAR_TYPE_SET = frozenset(SCALAR_TYPES)
# torch's own flags no hook's removal resets: a full backward hook registered and removed left
# ``_is_full_backward_hook`` True, and the signature then named the capture made with the hook (review rv20b:
# bench/repros/rv20b_auto_removed_backward_hook_keeps_fallback.py); the hooks themselves are keyed
_UNKEYED = frozenset({"_is_full_backward_hook"})


def scalar_attributes(m) -> list:
    """``(name, value)`` of module ``m``'s scalar attributes (``training``, ``Dropout.p``, a temperature), for an
    input signature (:func:`_state_key`) and the profiler (Note [Attributes a forward writes] in
    torch_exec/profiler.py). None for a wrapper's own (its class sets ``OWN_SCALARS_UNKEYED``): its settings and
    caches are no state of the model's (its latest entry, None before the first call, made each signature twice)."""
    if getattr(type(m), "OWN_SCALARS_UNKEYED", False):
        return []
    return [(k, v) for k, v in m.__dict__.items() if type(v) in _SCALAR_TYPE_SET and k not in _UNKEYED]


def captured_state_key(module, tensor_ids: list | None = None, unkeyed: dict | None = None) -> tuple:
    """:func:`module_state_key` and what else a graph captured by ``torch.export`` has fixed in it: every
    submodule's scalar attributes (:func:`scalar_attributes`) and which forward and backward hooks each
    submodule and the global registries hold (Note [What a captured graph
    fixes] in torch_exec/auto.py). Modules called as themselves (CheckpointedSequential) run their hooks live.
    About 0.5 ms a call on GPT-2 small's 164 modules (CPU; bench/results/state_key_cost_cpu.md).
    ``tensor_ids``: a list that gets the ids of the parameters and buffers met in the same walk (Note
    [Sharing the model's state]). ``unkeyed``: ``{position in the walk: attribute names}`` left out, the scalar
    attributes the model's code writes at every call around a block fallback's blocks (Note [Attributes the forward
    writes at every call] in torch_exec/auto.py)."""
    return _state_key(module, captured=True, tensor_ids=tensor_ids, unkeyed=unkeyed), global_forward_hooks()


def global_forward_hooks() -> tuple:
    """The handle ids of the global forward hooks and forward pre-hooks (``register_module_forward_hook``)."""
    from torch.nn.modules import module as module_module
    return tuple(module_module._global_forward_hooks), tuple(module_module._global_forward_pre_hooks)


# Note [The signature's walk of the modules]
#     Every call of a wrapper walks its modules for the input signature (Note [One walk of the model per call] in
#     torch_exec/executor.py). ``modules()`` recurses through one ``named_modules`` generator per module, building
#     each one's dotted name: on DenseNet-121's layout with tiny widths (489 modules) that walk alone took 0.25 of
#     the key's 0.73 ms on the CPU. :func:`walked_modules` visits the same modules in the same order (depth first,
#     each once, the ``_modules`` dicts' order, None entries skipped) with a stack and no names: 0.08 ms. A module
#     whose class lists its submodules its own way (overrides ``named_modules``, or the root ``modules``) is walked
#     by ``modules()`` as before (tests/test_torch_api.py::test_the_signature_walk_visits_the_modules_as_modules_does;
#     A/B: bench/results/signature_walk_ab_cpu.md).
_NAMED_MODULES, _MODULES = nn.Module.named_modules, nn.Module.modules


def walked_modules(module) -> list:
    """``list(module.modules())``: each submodule once, in its order (Note [The signature's walk of the
    modules])."""
    if type(module).modules is not _MODULES:
        return list(module.modules())
    out, memo, stack = [], set(), [module]
    pop, push = stack.pop, stack.extend
    while stack:
        m = pop()
        if m is None or m in memo:
            continue
        if type(m).named_modules is not _NAMED_MODULES:  # a module that lists its submodules its own way
            return list(module.modules())
        memo.add(m)
        out.append(m)
        children = m.__dict__.get("_modules")
        if children:
            push(reversed(children.values()))
    return out


def _add_trainable(own_params: dict, seen: set, trainable: list) -> None:
    """Add to ``trainable`` the parameters of one module's ``_parameters`` that require grad and are not in ``seen``
    (ids), as ``parameters()`` lists them: each once, in the walk's order (:func:`trainable_parameters`)."""
    for p in own_params.values():
        if p is not None and id(p) not in seen:
            seen.add(id(p))
            if p.requires_grad:
                trainable.append(p)


def trainable_parameters(module) -> list:
    """``[p for p in module.parameters() if p.requires_grad]``, walked as the signature walks (Note [The signature's
    walk of the modules]): the parameter tap's list where no signature walk of the wrapper collects it (Note [One walk
    of the model per call] in torch_exec/executor.py)."""
    out: list = []
    seen: set = set()
    for m in walked_modules(module):
        own_params = m.__dict__.get("_parameters")
        if own_params:
            _add_trainable(own_params, seen, out)
    return out


def _state_key(module, captured: bool, tensor_ids: list | None = None, trainable: list | None = None,
               unkeyed: dict | None = None) -> tuple:
    """One pass over the submodules' own dictionaries (``modules()`` and ``parameters()`` recursing
    apart cost twice as much: this runs on every call of a wrapper; bench/results/executor_overhead_cpu.md)."""
    out = []
    seen: set = set()  # the parameters met (``trainable``)
    for position, m in enumerate(walked_modules(module)):
        d = m.__dict__
        own_params, own_buffers = d.get("_parameters") or {}, d.get("_buffers") or {}
        # list comprehensions, and none for an empty dict: generator expressions cost twice as much here
        params = tuple([(p.requires_grad, p.dtype, p.device) for p in own_params.values() if p is not None]
                       ) if own_params else ()
        buffers = tuple([(b.dtype, b.device) for b in own_buffers.values() if b is not None]) if own_buffers else ()
        if tensor_ids is not None:
            if own_params:
                tensor_ids.extend([id(t) for t in own_params.values()])
            if own_buffers:
                tensor_ids.extend([id(t) for t in own_buffers.values()])
        if trainable is not None and own_params:
            _add_trainable(own_params, seen, trainable)
        if captured:  # the scalar attributes include `training`
            scalars = scalar_attributes(m)
            if unkeyed and position in unkeyed:
                scalars = [(k, v) for k, v in scalars if k not in unkeyed[position]]
            forward, pre, backward, backward_pre = (d.get("_forward_hooks"), d.get("_forward_pre_hooks"),
                                                    d.get("_backward_hooks"), d.get("_backward_pre_hooks"))
            out.append((params, buffers, tuple(scalars), tuple(forward) if forward else (), tuple(pre) if pre else (),
                        tuple(backward) if backward else (), tuple(backward_pre) if backward_pre else ()))
        else:  # a module called as itself runs its code live: its mode, and whether it draws (Note [Keys of modules
            # run live])
            out.append((params, buffers, (m.training, m.p) if isinstance(m, _DropoutNd) else m.training))
    return tuple(out)


_GENERATOR = torch.Generator


def autocast_key() -> tuple:
    """The autocast settings of the calling thread as part of an input signature (plans differ per
    autocast dtype)."""
    return tuple(sorted((k, str(v["dtype"])) for k, v in autocast_state().items()))


def autocast_enabled_now() -> bool:
    """Whether autocast is on in the calling thread for the CPU or CUDA."""
    if torch.is_autocast_enabled("cpu"):
        return True
    return torch.cuda.is_available() and torch.is_autocast_enabled("cuda")


def submodules(modules) -> tuple:
    """Every module of ``modules`` and below, each once (:func:`training_flags`)."""
    return tuple({id(m): m for mod in modules for m in mod.modules()}.values())


def training_flags(modules: tuple) -> tuple:
    """The training flags of ``modules`` (:func:`submodules`) now."""
    return tuple(m.training for m in modules)


@contextlib.contextmanager
def training_from(modules: tuple, flags: tuple):
    """Run with the training ``flags`` of ``modules`` recorded earlier (:func:`training_flags`), then put back
    those of now (Note [Recomputing in the forward's mode] in torch_exec/executor.py)."""
    changed = [(m, flag) for m, flag in zip(modules, flags) if m.training != flag]
    for m, recorded in changed:
        m.training = recorded
    try:
        yield
    finally:
        for m, recorded in changed:
            m.training = not recorded


@contextlib.contextmanager
def autocast_from(state: dict):
    """Re-enter recorded autocast settings; device types not in ``state`` run with autocast off."""
    with contextlib.ExitStack() as stack:
        for device_type in ("cpu", "cuda"):
            if device_type in state:
                stack.enter_context(torch.autocast(device_type, enabled=True, **state[device_type]))
            elif device_type == "cpu" or torch.cuda.is_available():
                stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


# ---------------------------------------------------------------------------- model state
def _unique(modules, tensors_of) -> list:
    """Tensors of ``modules`` (parameters or buffers), each once even when modules share them."""
    out, seen = [], set()
    for m in modules:
        for t in tensors_of(m):
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
    return out


def buffers_of(modules) -> list[torch.Tensor]:
    return _unique(modules, nn.Module.buffers)


def params_of(modules) -> list[nn.Parameter]:
    return _unique(modules, nn.Module.parameters)


def first_few(items, sep: str = ", ", few: int = 3) -> str:
    """The first ``few`` of ``items`` joined by ``sep``, and ``...`` after them where there are more (what an
    error names of a list)."""
    items = [str(item) for item in items]
    return sep.join(items[:few]) + (f"{sep}..." if len(items) > few else "")


def params_read_by_several(groups) -> tuple:
    """The parameters requiring grad that the modules of two or more of ``groups`` (each a list of modules: a
    stage's, a branch's or a head's) hold: a tied weight, a module applied in several stages or branches
    (Note [Hooks on a leaf several segments read] in torch_exec/executor.py)."""
    seen: dict = {}
    for group in groups:
        for p in params_of(group):  # each once per group
            if p.requires_grad:
                seen.setdefault(id(p), [p, 0])[1] += 1
    return tuple(p for p, n in seen.values() if n > 1)


def users_hook(fn) -> bool:
    """Whether a post-accumulate-grad hook is the user's: not the step meter's own (marked ``meter_hook``: Note
    [Gradients set during the step] in torch_exec/report.py)."""
    return not getattr(fn, "meter_hook", False)


# Note [Hooks on the accumulator node]
#     PyTorch's optimizer in the backward (torch.distributed.optim._apply_optimizer_in_backward) hooks the
#     parameter's AccumulateGrad node, not the tensor: ``hook(grad_inputs, grad_outputs)`` after each call of the
#     node, which is a post-accumulate hook by another name. A tied weight read outside the wrapper stepped once
#     per part (bench/repros/rv9_hooks_accumulator_node_tied.py). Such hooks cannot be listed from the node, but
#     that API keeps their handles (``param_to_optim_hook_handle_map``), whose dicts the engine reads: so the
#     post hooks of a parameter (:func:`post_hooks_of`) are its tensor's and those, each taken out, put back,
#     watched and run alike (``PostHook``). A hook put on the node by hand stays out of sight, and where it shares
#     the node's dict with that API's, it stays in it: it runs per part, with the gradient the engine brings, and
#     once more with ``(None,)`` from the engine's call after the parameter tap where the tap handed nothing (Note
#     [Hooks of routed parameters] in torch_exec/executor.py), a call plain autograd does not make
#     (bench/repros/rv10_diff_hooks_node_hand_hook_beside_api.py exits 1 on it). Seeing such hooks would mean
#     registering one on every parameter's node to reach the node's dict: a Python post hook that then stays on
#     the node, 0.65-1.12 us per parameter in every backward, plus 4.1-4.6 us per parameter to find the dict in every
#     step whose graph made the node anew (600 parameters on the CPU: bench/results/node_hook_cost_cpu.md). Not done.
@dataclass(frozen=True)
class PostHook:
    """One post-accumulate hook of a parameter: its ``hooks`` dict (the engine holds it: emptied and refilled in
    place), ``key`` and ``fn``; ``node``: on the AccumulateGrad node (Note [Hooks on the accumulator node])."""

    hooks: dict
    key: object
    fn: object
    node: bool = False

    def put_back(self, fn=None) -> None:
        self.hooks[self.key] = self.fn if fn is None else fn

    def __call__(self, p) -> None:
        """Runs it as the engine does after accumulating ``p``'s gradient."""
        if self.node:
            self.fn((), (p.grad,))
        else:
            self.fn(p)


def _node_hooks(p) -> list:
    """The hooks PyTorch's optimizer in the backward put on ``p``'s AccumulateGrad node, as (dict, key) (Note [Hooks
    on the accumulator node]); none where that API never ran (its module is not even imported). Only its own keys:
    the node keeps one dict for every hook put on it, and one put there by hand, taken with them, was run with the
    .grad the optimizer's step had set to None (bench/repros/rv10_diff_hooks_node_hand_hook_beside_api.py)."""
    if not hasattr(p, "_in_backward_optimizers"):
        return []
    api = sys.modules.get("torch.distributed.optim.apply_optimizer_in_backward")
    handles = getattr(api, "param_to_optim_hook_handle_map", None)
    found = []
    for handle in (handles.get(p, ()) if handles is not None else ()):
        hooks = handle.hooks_dict_ref()
        if hooks is not None and handle.id in hooks:
            found.append((hooks, handle.id))
    return found


def post_hooks_of(p) -> list:
    """``p``'s post-accumulate hooks, its tensor's then those of PyTorch's optimizer in the backward on its
    accumulator node (Note [Hooks on the accumulator node]), as :class:`PostHook`."""
    hooks = getattr(p, "_post_accumulate_grad_hooks", None) or {}
    found = [PostHook(hooks, key, fn) for key, fn in hooks.items()]
    return found + [PostHook(node_hooks, key, node_hooks[key], node=True) for node_hooks, key in _node_hooks(p)]


def take_post_accumulate_hooks(p, which=lambda fn: True) -> list:
    """Removes from ``p``'s post-accumulate hooks (:func:`post_hooks_of`) those ``which`` picks and returns them
    (:class:`PostHook`, each put back with ``put_back()``; :class:`ModelSnapshot`, :func:`leaf_hooks_deferred`)."""
    taken = [hook for hook in post_hooks_of(p) if which(hook.fn)]
    for hook in taken:
        del hook.hooks[hook.key]
    return taken


class _PassHooks:
    """The hooks of some leaves, suspended until one backward pass (autograd's graph task ``task``) ends
    (:func:`leaf_hooks_deferred`)."""

    def __init__(self, task: int):
        self.task = task
        self.taken: set = set()
        self.held: list = []   # (p, the user's post-accumulate hooks taken out, grad_seen(p))
        self.aside: list = []  # (p, its gradient hook dict, the hooks taken out, .grad set aside)
        self.watched: dict = {}  # id(p) -> its _Watch (:meth:`watch`)

    def watch(self, p, skip: bool, handed=None, verdict=None) -> None:
        """Until the pass ends, watch the engine's one AccumulateGrad call for ``p`` after the parameter tap (Note
        [Hooks of routed parameters] in torch_exec/executor.py): a detector first among its gradient hooks sees
        what the engine brings and tells ``verdict(p, elsewhere)`` whether part of it came from elsewhere than
        the tap (which handed ``handed``, or None). Where ``skip``, the user's hooks skip a call that brings
        nothing: the engine's call with None, where plain autograd makes none. Several calls of one pass (two
        calls before one backward) watch once: the hooks skip only where every call said so, and no verdict is
        given (the engine sums the calls' parts)."""
        watched = self.watched.get(id(p))
        if watched is not None:
            watched.skip = watched.skip and skip
            watched.verdict = None
            return
        self.watched[id(p)] = _Watch(p, skip, handed, verdict)

    def _unwatch(self) -> None:
        for watched in self.watched.values():
            watched.remove()
        self.watched.clear()

    def take(self, params) -> None:
        for p in params:
            if id(p) in self.taken:
                continue
            self.taken.add(id(p))
            users = take_post_accumulate_hooks(p, users_hook)
            if users:
                self.held.append((p, users, grad_seen(p)))
            grad_hooks = p._backward_hooks  # the engine holds this dict: emptied and refilled in place
            if grad_hooks:
                self.aside.append((p, grad_hooks, list(grad_hooks.items()), p.grad))
                grad_hooks.clear()
                p.grad = None

    def _put_back(self) -> None:
        for _, grad_hooks, taken, _ in self.aside:
            grad_hooks.update(taken)
        for _, users, _ in self.held:
            for hook in users:
                hook.put_back()
        self._unwatch()  # last: a hook taken out while watched went back wrapped

    def abandon(self) -> None:
        """The pass failed: hooks back, ``.grad`` as it was before it."""
        _DEFERRED.pop(self.task, None)
        self._put_back()
        for p, _, _, prior in self.aside:
            p.grad = prior

    def run(self) -> None:
        """The pass ended: each gradient hook once on the whole gradient the pass made, added to the gradient
        set aside, then each post-accumulate hook once."""
        _DEFERRED.pop(self.task, None)
        self._put_back()
        wholes = []
        for p, _, _, prior in self.aside:  # .grad as it was until the hooks have run: an error in one leaves it so
            wholes.append(p.grad)
            p.grad = prior
        unreached = set()  # no gradient reached them: no hook runs, as in plain autograd
        for i, (p, _, taken, prior) in enumerate(self.aside):
            whole, wholes[i] = wholes[i], None
            if whole is None:
                unreached.add(id(p))
                continue
            for _, hook in taken:
                result = hook(whole)
                whole = whole if result is None else result
                result = None
            if prior is None:
                # AccumulateGrad takes the gradient as .grad only where nothing else holds it: a hook that kept it
                # (a logger) gets a tensor of its own, which a later in-place change of .grad (clipping) leaves alone
                p.grad = whole if sys.getrefcount(whole) <= 2 else whole.clone()
            else:
                with torch.no_grad():
                    prior.add_(whole)
            del whole
        del wholes
        aside = {id(p) for p, *_ in self.aside}
        for p, users, seen in self.held:
            if id(p) in unreached or (id(p) not in aside and grad_unchanged(p, seen)):
                continue
            for hook in users:
                hook(p)


_DEFERRED: dict = {}  # graph task id -> its _PassHooks (a dict: a CUDA backward runs in a thread of the engine's)


class _Watch:
    """:meth:`_PassHooks.watch` of one parameter: the detector (first among its gradient hooks) and the user's
    hooks wrapped to skip a call that brings nothing, put back by :meth:`remove`."""

    def __init__(self, p, skip: bool, handed, verdict):
        self.skip, self.verdict, self.brought = skip, verdict, None
        self.handed = None if handed is None else weakref.ref(handed)
        self.param = weakref.ref(p)
        detect = functools.partial(_Watch._detect, self)
        detect.watch_detector = True  # not a hook of the user's (:func:`users_grad_hooks`)
        self.handle = p.register_hook(detect)
        hooks = p._backward_hooks  # the engine holds this dict: reordered in place, the detector first
        users = [(key, hook) for key, hook in hooks.items() if key != self.handle.id]
        hooks.clear()
        hooks[self.handle.id] = detect
        self.swapped = []
        for key, hook in users:
            self.swapped.append((hooks, key, hook))
            hooks[key] = functools.partial(_unless_none, hook, self)
        for post in post_hooks_of(p):
            if users_hook(post.fn):
                self.swapped.append((post.hooks, post.key, post.fn))
                post.put_back(functools.partial(_unless_brought, post.fn, self))

    def _detect(self, grad):
        self.brought = grad is not None
        handed = None if self.handed is None else self.handed()
        if self.verdict is not None and self.param() is not None:
            self.verdict(self.param(), grad is not None and grad is not handed)
        return None

    def remove(self) -> None:
        self.handle.remove()
        for hooks, key, hook in self.swapped:
            if key in hooks and getattr(hooks[key], "args", (None,))[0] is hook:
                hooks[key] = hook


def users_grad_hooks(p) -> bool:
    """Whether ``p`` has a gradient hook (``register_hook``) of the user's: not a watch's detector
    (:meth:`_PassHooks.watch`)."""
    hooks = p._backward_hooks
    return bool(hooks) and any(not getattr(hook, "watch_detector", False) for hook in hooks.values())


def users_post_hooks(p) -> bool:
    """Whether ``p`` has a post-accumulate hook of the user's (:func:`users_hook`, :func:`post_hooks_of`; asked of
    every parameter in every backward: no PostHook is made)."""
    hooks = getattr(p, "_post_accumulate_grad_hooks", None)
    if not hooks and not hasattr(p, "_in_backward_optimizers"):  # none of either kind (:func:`_node_hooks`)
        return False
    return (bool(hooks) and any(map(users_hook, hooks.values()))) or any(
        users_hook(node_hooks[key]) for node_hooks, key in _node_hooks(p))


def _unless_none(hook, watched: _Watch, grad):
    """A gradient hook watched by :meth:`_PassHooks.watch`."""
    return None if grad is None and watched.skip else hook(grad)


def _unless_brought(hook, watched: _Watch, *args):
    """A post-accumulate hook (of the tensor: ``(p)``, of its node: ``(grad_inputs, grad_outputs)``) watched by
    :meth:`_PassHooks.watch`: skips where the call brought nothing."""
    return None if watched.skip and watched.brought is False else hook(*args)


def grad_seen(p) -> tuple:
    """``p.grad`` as it is now, to tell later whether anything was added to it (:func:`grad_unchanged`): a weak
    reference to it and its version (None, None where it is None)."""
    grad = p.grad
    return (None, None) if grad is None else (weakref.ref(grad), grad._version)


def grad_unchanged(p, seen: tuple) -> bool:
    """Whether ``p.grad`` is the tensor :func:`grad_seen` saw, unchanged in place (or None, as it was)."""
    ref, version = seen
    grad = p.grad
    return grad is None if ref is None else (grad is ref() and grad._version == version)


def watched_now() -> frozenset:
    """The ids of the parameters an earlier schedule backward of the backward pass running now watches
    (:meth:`_PassHooks.watch`): their gradients come in several parts in this pass."""
    state = _DEFERRED.get(torch._C._current_graph_task_id())
    return frozenset(state.watched) if state is not None else frozenset()


def pass_hooks() -> _PassHooks | None:
    """The deferral state of the backward pass running now, made (its end queued on autograd's engine) where it
    has none yet; None outside a pass."""
    task = torch._C._current_graph_task_id()
    if task < 0:
        return None
    state = _DEFERRED.get(task)
    if state is None:
        state = _DEFERRED[task] = _PassHooks(task)
        torch.autograd.Variable._execution_engine.queue_callback(state.run)
    return state


def settle_deferred_hooks() -> None:
    """Put back the hooks a backward pass that raised left suspended (its end never came), and ``.grad`` as it was
    before that pass: called at a wrapper's forward; nothing inside a backward pass (a forward recomputed there
    may run while a pass's deferral is live)."""
    if not _DEFERRED or torch._C._current_graph_task_id() >= 0:
        return
    for state in list(_DEFERRED.values()):
        state.abandon()


@contextlib.contextmanager
def leaf_hooks_deferred(params):
    """Runs the hooks of ``params`` once, at the end of the backward pass this block runs in, as plain autograd's one
    ``AccumulateGrad`` per leaf runs them (Note [Hooks on a leaf several segments read], Note [Hooks across calls
    before one backward] in torch_exec/executor.py). From the block on, the gradient hooks (``register_hook``) and
    the post-accumulate-grad hooks are suspended; where a parameter has gradient hooks, its ``.grad`` is set aside,
    so that what the pass adds is the whole gradient. When the pass ends (a callback queued on autograd's engine;
    outside a pass, when the block ends) the gradient hooks run on it in order (a hook's result replaces it), it
    is added to the gradient set aside in place (or becomes ``.grad``), and then the post-accumulate hooks run.
    Several blocks of one pass (several calls' backwards) share one deferral. On an error in the block ``.grad``
    is put back as it was. The step meter's own hooks (marked ``meter_hook``: Note [Gradients set during the
    step] in torch_exec/report.py) stay: they mark when a gradient is first set."""
    params = list(params)
    if not params:
        yield
        return
    task = torch._C._current_graph_task_id()
    state = pass_hooks() if task >= 0 else _PassHooks(task)
    state.take(params)
    try:
        yield
    except BaseException:
        state.abandon()
        raise
    if task < 0:
        state.run()


def stage_leaves(group, own: bool = True) -> list[torch.Tensor]:
    """The leaf tensors requiring a gradient that one stage's callables (``group``) may read: the parameters
    of its modules (``own``) and of the modules its plain callables reach, and the tensors they reach
    (:func:`reachable_state`). ``own=False``: only what the plain callables reach themselves, which the
    profiler's stand-ins for the wrapper's parameters (``_standin_params`` in torch_exec/executor.py) do
    not replace."""
    reached = [v for fn in group for _, v in reachable_state(fn)]
    found = params_of(modules_of((list(group) if own else []) + [v for v in reached if isinstance(v, nn.Module)]))
    found += [v for v in reached if isinstance(v, torch.Tensor)]
    return [t for t in found if t.requires_grad and t.is_leaf]


def mark_standin(standin: torch.Tensor, param: torch.Tensor) -> None:
    """Record that the profiler's ``standin`` replaces ``param`` while profiling (``_standin_params`` in
    torch_exec/executor.py), so that :class:`LeafReaders` counts a read of either as one leaf's."""
    standin._gpusolve_stands_for = param


def stood_for(t: torch.Tensor) -> torch.Tensor:
    """The parameter ``t`` stands in for (:func:`mark_standin`), else ``t``."""
    return getattr(t, "_gpusolve_stands_for", t)


@dataclass(eq=False)
class _LeafRead:
    """What :class:`LeafReaders` knows of one leaf: a weak reference to it, its bytes, the stages reading it (in
    order), the ids of the tensors read (the leaf, its stand-in), per stage the reads and how many of them handed
    over a part autograd can add into in place, per (stage, tensor read) the parts a split backward will bring
    (:meth:`LeafReaders.expect`), and those summed so far."""
    ref: weakref.ref
    nbytes: int
    stages: list = field(default_factory=list)
    read: set = field(default_factory=set)
    count: dict = field(default_factory=dict)
    fresh: dict = field(default_factory=dict)
    edges: dict = field(default_factory=dict)
    pending: dict = field(default_factory=dict)


_READS = "gpusolve_leaf_reads"  # a node's metadata: (the leaf read, stage, id of the tensor read) per edge into a leaf


class LeafReaders:
    """Which stages' autograd graphs reach each leaf tensor requiring a gradient, and so add a gradient to
    it: found while profiling, from the graph itself (Note [Leaves several stages read] in
    torch_exec/profiler.py).

    :meth:`enter` walks a stage's input (those nodes belong to earlier stages or to the caller's input),
    :meth:`note` the graph stage ``s`` added above it; each walk stops at the nodes an earlier one
    passed. Nodes are held only from ``enter`` to ``leave`` (held longer, a graph that never runs its
    backward would keep its saved tensors), leaves only weakly (a leaf a stage makes for itself, and its
    gradient, would otherwise live to the end of profiling). Each edge into a leaf's AccumulateGrad node is a
    read; a hook on the node it leaves tells, when the backward runs, whether the part it hands over is one
    autograd can add another into in place (:func:`_adds_in_place`), and while ``split`` is set (the whole memory
    pass's backward) sums the parts of a leaf several stages read stage by stage, as the executor's split tape runs
    do (Note [Leaves summed stage by stage] in torch_exec/profiler.py)."""

    def __init__(self):
        self.readers: dict[int, _LeafRead] = {}  # by id of the leaf stood for
        self.passed: set = set()  # nodes walked since enter()
        self.inputs: set = set()  # ids of the leaves behind the input (the caller's, not a stage's)
        self.split = False  # sum shared leaves' parts stage by stage (the whole memory pass's backward)

    def _walk(self, state) -> list[tuple]:
        """``(leaf, node, i)`` per read of a leaf below ``state``: the edge ``i`` of ``node`` into the leaf's
        AccumulateGrad node; node None where a tensor of ``state`` is the leaf itself."""
        found = [(t, None, 0) for t in tensors(state) if t.requires_grad and t.grad_fn is None]
        stack = [t.grad_fn for t in tensors(state) if t.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node is None or node in self.passed:
                continue
            self.passed.add(node)
            for i, (next_node, _) in enumerate(node.next_functions):
                leaf = accumulated_leaf(next_node)
                if leaf is not None:
                    found.append((leaf, node, i))
                else:
                    stack.append(next_node)
        return found

    def enter(self, state) -> None:
        """Start at a stage's input: what its graph reaches is not the stage's."""
        self.inputs |= {id(t) for t, _, _ in self._walk(state)}

    def note(self, s: int, out, count: bool = True) -> None:
        """Stage ``s`` (1-based) has made ``out``. ``count=False``: the stage has run again (stage by stage, the
        forward whose backward runs), and only its parts are to be watched."""
        for t, node, i in self._walk(out):
            if id(t) in self.inputs:
                continue
            leaf = stood_for(t)
            entry = self.readers.get(id(leaf))
            if entry is None or entry.ref() is not leaf:  # new, or another tensor at a dead one's id
                if not count:
                    continue
                entry = self.readers[id(leaf)] = _LeafRead(weakref.ref(leaf), int(leaf.numel() * leaf.element_size()))
            if count:
                if s not in entry.stages:
                    entry.stages.append(s)
                entry.read.add(id(t))
                entry.count[s] = entry.count.get(s, 0) + 1  # each edge into its AccumulateGrad node is a read
            if node is not None and not isinstance(node, torch.autograd.function.BackwardCFunction):
                node.register_hook(self._part_hook(entry, s, i, weakref.ref(t)))  # a custom Function's part may be
                # a tensor it holds
                node.metadata.setdefault(_READS, []).append((entry, s, id(t)))  # for expect()

    def _part_hook(self, entry: _LeafRead, s: int, i: int, variable: weakref.ref):
        """A post hook for the node whose edge ``i`` reads ``entry``'s leaf (``variable``, the tensor read) in stage
        ``s``: counts, once, a part autograd can add into in place; while ``split``, takes the part over
        (:meth:`_sum_part`)."""
        fired = []

        def hook(grad_inputs, grad_outputs):
            if fired:
                return None
            fired.append(True)
            part = grad_inputs[i]
            fresh = part is not None and _adds_in_place(part, [g for j, g in enumerate(grad_inputs) if j != i]
                                                        + list(grad_outputs))
            entry.fresh[s] = entry.fresh.get(s, 0) + fresh
            if not (self.split and len(entry.stages) > 1):
                return None
            handed = self._sum_part(entry, s, variable, part, fresh)
            return tuple(handed if j == i else g for j, g in enumerate(grad_inputs))
        return hook

    def _sum_part(self, entry: _LeafRead, s: int, variable: weakref.ref, part, fresh: bool):
        """Note [Leaves summed stage by stage] in torch_exec/profiler.py: ``part`` (None: no gradient on this read)
        summed with stage ``s``'s other parts for ``variable`` as autograd's input buffer sums them (in place where
        the first to arrive allows, else beside both), and at the stage's last part added into its ``.grad``, as
        AccumulateGrad does; the first reader of ``variable`` (the last to run) hands its sum to the engine instead,
        whose AccumulateGrad adds it (and runs the leaf's hooks on it). Returns what goes on the edge: that sum, or
        None."""
        key = (s, id(variable()))
        pending = entry.pending.setdefault(key, [None, 0, False, variable])  # [the sum so far, parts arrived, adds
        # in place, the tensor read]
        pending[1] += 1
        with torch.no_grad():
            if part is not None:
                if pending[0] is None:
                    pending[0], pending[2] = part, fresh
                elif pending[2]:
                    pending[0].add_(part)
                else:
                    pending[0], pending[2] = pending[0] + part, True
            del part
            if pending[1] < entry.edges.get(key, 1):
                return None
            total = entry.pending.pop(key)[0]
            if s == min((t for t, ident in entry.edges if ident == key[1]), default=s):
                return total
            self._accumulate(total, variable())
            return None

    @staticmethod
    def _accumulate(total, leaf) -> None:
        """AccumulateGrad's step, for a sum :meth:`_sum_part` took over: into ``leaf.grad`` in place (the profiler
        allocates parameter gradients first), or ``leaf.grad`` becomes it."""
        if total is None or leaf is None:
            return
        with torch.no_grad():
            if leaf.grad is None:
                leaf.grad = total
            else:
                leaf.grad.add_(total)

    def expect(self, roots) -> None:
        """Before a split backward from ``roots``: per stage and tensor read, how many of its parts will arrive, the
        reads whose nodes the backward reaches (a read on a tensor no later stage uses never runs: waited for, the
        stage's sum was held to the end of the backward, a leaf through every earlier stage's readings; a review:
        bench/repros/rv17_review_unused_read_held.py)."""
        for e in self.readers.values():
            e.edges.clear()
        for node in graph_nodes(t.grad_fn for t in roots):
            for entry, s, ident in node.metadata.get(_READS, ()):
                entry.edges[s, ident] = entry.edges.get((s, ident), 0) + 1

    def stage_done(self, s: int) -> None:
        """Stage ``s``'s backward has ended: what stages ``s`` and after summed whose parts did not all arrive (a
        read on a tensor no later stage uses: its node never runs) goes into the leaf's ``.grad``, as the stage's own
        call would have added it (a review: held to the end of the backward, it read as a leaf held through every
        earlier stage; bench/repros/rv17_review_unused_read_held.py)."""
        for e in self.readers.values():
            for key in [key for key in e.pending if key[0] >= s]:
                total, _, _, variable = e.pending.pop(key)
                self._accumulate(total, variable())

    def flush(self) -> None:
        """After a split backward: what is left of the stages' sums goes into the leaves' ``.grad``."""
        self.stage_done(0)

    def leave(self) -> None:
        self.passed, self.inputs = set(), set()

    def shared(self) -> list[dict]:
        """The profile's ``shared_leaves``: per leaf that several stages read, ``stages`` (ascending),
        ``nbytes``, ``summed`` (every stage read the same tensor, so the profile's plain step summed
        their gradients; not where one read the parameter a stand-in replaced), ``reads`` (per stage, how
        many times its graph reads it) and ``fresh_reads`` (how many of those handed over a part autograd can add
        into in place): Note [A leaf read twice in one stage] in gpusolve/chain.py."""
        return [{"stages": sorted(e.stages), "nbytes": e.nbytes, "summed": len(e.read) == 1,
                 "reads": [e.count[s] for s in sorted(e.stages)],
                 "fresh_reads": [min(e.fresh.get(s, 0), e.count[s]) for s in sorted(e.stages)]}
                for e in self.readers.values() if len(e.stages) > 1]


def _adds_in_place(part, others) -> bool:
    """Whether autograd's input buffer can add a later gradient into ``part`` in place, ``part`` having arrived first,
    as it sums a leaf's parts (else it makes their sum beside both): a plain dense tensor of its own, not a view, not
    also handed to another edge or passed through from the node's incoming gradients (``others``), the engine's
    condition (InputBuffer's ``can_accumulate_inplace``) as far as Python sees it without a reference that would
    change the answer (taking the storage object does: the sum is then made). Note [A leaf read twice in one stage]
    in gpusolve/chain.py."""
    return (type(part) is torch.Tensor and part.layout == torch.strided and part._base is None
            and part.is_contiguous() and not any(o is part for o in others))


def shared_leaves(groups) -> list[tuple[torch.Tensor, list[int]]]:
    """``(leaf, stages)`` for each leaf tensor requiring a gradient that more than one of the stages
    ``groups`` (1-based, ascending) may read (:func:`stage_leaves`): a tied weight (Note [Gradients summed
    across stages] in gpusolve/offload/compare.py, Note [Shared leaves split tape runs] in
    torch_exec/executor.py). A stage that holds a tensor it does not read makes this an over-estimate."""
    readers: dict = {}
    for s, group in enumerate(groups, 1):
        for t in stage_leaves(group):
            readers.setdefault(id(t), (t, []))
            if readers[id(t)][1][-1:] != [s]:
                readers[id(t)][1].append(s)
    return [(t, stages) for t, stages in readers.values() if len(stages) > 1]


def _buffer_slots(modules) -> list:
    """``(module, name, buffer)`` of every buffer of ``modules`` and their submodules, each module once."""
    slots, seen = [], set()
    for mod in modules:
        for m in walked_modules(mod):  # Note [The signature's walk of the modules]
            if id(m) in seen:
                continue
            seen.add(id(m))
            slots += [(m, name, b) for name, b in m._buffers.items() if b is not None]
    return slots


def buffer_values(modules) -> list:
    """Clones of the modules' buffers as they are now (:func:`scratch_buffers`'s ``values``)."""
    with torch.no_grad():
        return [b.clone() for _, _, b in _buffer_slots(modules)]


@contextlib.contextmanager
def scratch_buffers(modules, values: list | None = None):
    """Let a recomputation update copies of the modules' buffers (BatchNorm statistics), not the buffers.

    The real buffers are swapped out for clones and swapped back afterwards, untouched: a tape that
    saved a clone (BatchNorm saves its running statistics) keeps a valid one, and no version counter
    of the real buffers moves. ``values`` (:func:`buffer_values` taken before the stage's first run):
    the clones start from those, as the first run's buffers did, not from the buffers the first run
    updated; a module that updates a buffer and then reads it (spectral norm's power iteration, a
    running centre) recomputes what the first run computed (Note [Recomputing from the step's buffers]
    in torch_exec/executor.py).
    """
    swapped = []
    with torch.no_grad():
        slots = _buffer_slots(modules)
        for i, (m, name, b) in enumerate(slots):
            swapped.append((m, name, b))
            m._buffers[name] = (b if values is None else values[i]).clone()
    try:
        yield
    finally:
        for m, name, b in swapped:
            m._buffers[name] = b


class ModelSnapshot:
    """Parameters, buffers, gradients and RNG state of some modules, restorable exactly.

    Parameters and buffers are restored in place (same tensor objects, so optimisers keep
    working); each ``.grad`` is put back as the very object it was (None stays None). The
    parameters' post-accumulate hooks (``register_post_accumulate_grad_hook``: an optimizer stepping
    from the backward) are suspended until :meth:`restore`: the profiler's passes are not training
    steps. Their gradient hooks (``register_hook``: clipping, scaling) run: they are part of the
    backward whose memory the profile measures (suspended, a hook's temporaries were counted nowhere
    and plans went over their budgets by them). ``tensors``: loose leaf tensors (not parameters of
    ``modules``, e.g. those a callable stage closes over) kept the same way (see :func:`stage_state`).
    ``values=False``: the parameters' values are not copied, for passes that change none (no optimizer
    step, gradients only), whose copy would be one more model's worth of memory. ``suspend=False``: the
    hooks stay as they are (a real step that is undone only if it fails).

    Note [Restoring leaves the versions]
        The values are written back through ``.data``, which leaves each tensor's version counter as it
        was: written with ``copy_``, every parameter's counter moved, and a graph still alive that saved
        one (an earlier call's step waiting for its backward while a new input signature was profiled: a
        smaller last micro-batch, a second crop size, ``prepare`` between a forward and its backward)
        raised "modified by an inplace operation" in its backward (a review, 2026-11-28:
        bench/repros/rv9_off_new_signature_in_flight.py). The values are those the graph saved, unless
        the profiled passes changed them in place, which moved the counter anyway.
    """

    def __init__(self, modules, tensors=(), values: bool = True, suspend: bool = True, generators=None):
        self.params = params_of(modules)
        known = {id(p) for p in self.params}
        self.params += [t for t in {id(t): t for t in tensors}.values() if id(t) not in known]
        self.buffers = buffers_of(modules)
        with torch.no_grad():
            self.param_data = [p.detach().clone() for p in self.params] if values else []
            self.buffer_data = [b.detach().clone() for b in self.buffers]
        self.grads = [p.grad for p in self.params]
        # the default generators and the model's own (``generators``; default: those ``modules`` hold)
        self.rng = RngState.capture(all_rng_devices(), generators_of(modules) if generators is None else generators)
        self.training = [(m, m.training) for mod in modules for m in mod.modules()]
        self.hooks = []  # the post-accumulate hooks taken out (PostHook): put back on restore
        for p in self.params if suspend else ():
            self.hooks += take_post_accumulate_hooks(p)

    def restore(self, hooks: bool = True) -> None:
        """Put everything back; ``hooks=False`` leaves the suspended hooks suspended (a profile that
        starts again)."""
        with torch.no_grad():  # through .data: the version counters stay (Note [Restoring leaves the versions])
            for t, data in [*zip(self.params, self.param_data), *zip(self.buffers, self.buffer_data)]:
                if t.shape == data.shape:
                    t.data.copy_(data)
                else:  # resized by the run (a QAT per-channel observer's min/max start empty): the snapshot's shape
                    t.data = data.clone()
        for p, g in zip(self.params, self.grads):
            p.grad = g
        self.rng.restore()
        for m, mode in self.training:
            m.training = mode
        if not hooks:
            return
        for hook in self.hooks:
            hook.put_back()
        self.hooks = []
