"""Run the offloading paper's offload-only plans ([O]: GREEDY, DYNPROG, VDNN; :mod:`gpusolve.offload.paper`)
on a real device: plain autograd over a chain's stages, the chosen tapes copied to pinned host memory
and back on one copy stream, at the points of Note [Issuing a timeline] (``gpusolve/offload/paper.py``).

The paper's algorithms were only ever simulated. This runner executes a
:class:`gpusolve.offload.compare.PaperPlan` so that the paper's model can be checked against a measured
step, beside this project's recompute-only and combined plans (``bench/offload_executor.py``). It is a
baseline, not a feature: every plan of the paper keeps every tape (no recomputation) and is several
times slower than recomputing on the networks measured here (docs/offload.md).

How a tape moves (Note [Tapes through saved-tensor hooks])
    x_k, the paper's k-th activation, is the tape of stage k (Note [Mapping a gpusolve chain onto the
    paper's model]): its output a_k and what autograd saved while it ran. While a plan runs, every
    tensor autograd saves goes through :func:`torch.autograd.graph.saved_tensors_hooks`:

    - a tensor whose storage belongs to a moved x_k (a storage made while stage k ran, or a_k's own,
      whichever stage saves it) is packed as a :class:`_Saved` handle on x_k's record, which holds the
      device tensor until ``release``;
    - anything else (parameters and buffers, the stage's input when its x is not moved, tapes that stay)
      is packed as itself, so autograd frees it as it would without hooks.

    ``offload k`` copies each storage of x_k whole (Note [Exact copies] in :mod:`torch_exec.offload`) on
    the copy stream, after what the compute stream has queued; ``release k`` makes the compute stream
    wait for that copy and drops the record's device references (Note [Release in stream order]), so x_k's
    blocks go back to the compute stream's pool; ``prefetch k`` allocates them again on the compute
    stream and issues the copy back; the first unpack of x_k in the backward makes the compute stream wait
    for it and views the saved tensor in the copy; ``drop k`` lets the device copy go after B_{k-1}, or
    earlier (Note [Freed as autograd frees]). The backward's points are tensor hooks on the stage
    outputs (a hook on a_s runs when its gradient exists, just before stage s's backward); a point that
    never fires (an output without a gradient) is caught up at the next one, and a prefetch not issued
    by the time its tensor is unpacked is issued then (``late_prefetches`` counts them).

Note [Freed as autograd frees]
    Plain autograd frees a saved tensor as soon as the last node that reads it has run: a stage's own
    intermediates go one by one during its backward, and the profile's backward transients
    (``bwd_extra``, the paper's ex^B) are net of that. A record that held x_k's copy until ``drop``
    would keep all of it through the rest of B_{k-1} and measure up to |x_k| above the model (a GPT-2
    block's MLP intermediates: 4.5 MiB over, on the CPU). So each storage of x_k is let go once every
    handle packed on it has been unpacked: only the views autograd holds keep it then, as they would
    keep the original. ``drop`` frees what no saved tensor reads (an output nobody saved). A handle read
    a second time after its storage went (a kept graph's second backward) fetches it again.

Note [Kept past the hooks]
    Autograd keeps some of a tape without calling the pack hook: a Python number an op saves (``0.5 * x``
    saves ``0.5`` as a 0-dim float64 tensor: ``SavedVariable`` skips the hooks for wrapped numbers; 24 B per
    block of transformers' GPT-2, whose GELU multiplies by three of them) and a tensor a custom Function
    keeps on ``ctx`` rather than through ``save_for_backward``. Those bytes stay on the device when x_k
    moves, and a plan that counted them as moved measured above its prediction (gpt2_hf 24 B at 90 %; an
    MLP keeping ``ctx.kept`` 95 248 B above the paper's least budget;
    ``bench/results/repros_kept_past_hooks_cpu_before.md``). The profile sees them: a stage's
    ``xbar`` (the memory its forward keeps) above its ``saved_bytes`` (its output and what went through the
    hooks). :func:`planning_instance` takes them out of each tape and reserves them for the whole step:
    exact on the CPU, an over-count on CUDA by the rounding of the saved storages to allocator blocks.

Note [Written while copied]
    ``offload k`` is issued before stage k+1 runs, which reads a_k. A stage that writes into a_k in place
    (an in-place activation at its start) would change bytes the copy has already read or is reading, and
    the saved tensors would come back with the values from before the write; autograd's version check of
    saved tensors does not apply to what a pack hook returns. So the runner raises, naming the fix, as the
    executor does for a write into a segment's input, when a tensor is saved on x_k after a write into its
    storage since the offload (the pack hook compares the version counters of x_k's tensors on that
    storage with those at the offload), and at ``release`` when a tensor saved before the offload was
    written since (plain autograd would refuse that backward too). A write nothing saves afterwards is
    fine. Writes that bypass the version counter (through ``.data``, or a tensor ``set_`` on the
    storage) are not seen, as plain autograd does not see them either; here they would bring back the
    old values.

Note [Steps end with their graph]
    Several forwards may come before their backwards (micro-batches summed into one loss), and one
    forward's graph may be run in parts (two towers, two losses), so a step ends only when no backward can
    read it any more. The graph owns the handles (autograd keeps what the pack hook returned) and the
    hooks of the backward's points, which hold the step's token; the step holds both weakly. At the end of
    a backward that does not keep the graph, a step with no live handle is done (its host buffers go back
    to the pool); at a later call, so is a step whose token and handles are gone and whose backward is
    not running (a forward under ``no_grad``, a graph dropped without a backward, a backward that
    raised). A step used after :meth:`PaperOffloadRunner.close` raises.

Note [Empty storages share a key]
    Every storage of 0 bytes has data pointer 0 (CUDA's caching allocator and the CPU's alike), so
    ``storage_key`` gives them all one key, ``(device, 0, 0)``. cuDNN's BatchNorm saves such a storage for
    its backward (its reserve space, ``CudnnBatchNormBackward0``'s ``result3``; the CPU's BatchNorm saves
    none), and as a movable storage the key went to the first moved tape whose stage saved one: every
    later stage's reserve, whether its own tape moved or not, became a handle on that tape until its
    ``release``, and the first of them unpacked in the backward copied that whole tape back there, ops
    before the plan's prefetch (``late_prefetches``). ResNet-50 on an H200 measured 201 016 320 B over the
    plan at 50 % (x_7, 1 130 375 168 B, two ops early; DenseNet-121 19 and 33 MB over), and on the CPU a
    ReLU saving a 0-byte tensor one whole tape over
    (bench/repros/rv13_offload_paper_zero_byte_storage.py). A 0-byte storage holds nothing to move: it
    stays with autograd.

Note [Pinned buffers]
    Host buffers come from the runner's :class:`~torch_exec.offload.HostCopies` pool (pinned once, reused
    by every step) and go back when the step ends (Note [Steps end with their graph]). On the CPU the copies are synchronous into a
    second CPU tensor: the same hooks, records and order, for tests (gradients equal plain autograd's).
"""
from __future__ import annotations

from dataclasses import replace
import weakref

import numpy as np
import torch
from torch import nn

from gpusolve.chain import Chain

from . import _util as U
from .executor import _keep_graph
from .offload import HostCopies, _raw, _Slot


_WRITTEN_ERROR = (
    "PaperOffloadRunner: a stage wrote in place into a tensor of x_{k} (the tape of stage {k}, with its output) "
    "while the plan copied it to the host (before op {upto}): the copy would bring back the values from before "
    "the write, and autograd's check of saved tensors does not see through the copy. Make that operation out of "
    "place (e.g. nn.ReLU(inplace=False)), or fuse it into stage {k} (Note [Written while copied])")


_CLOSED_ERROR = (
    "PaperOffloadRunner: a backward reads a step whose host copies were given back (runner.close() was called "
    "while its graph was alive); run the forward again")


class _Token:
    """What the hooks of a step's backward points hold: alive as long as the graph (Note [Steps end with
    their graph])."""


class _Store:
    """One storage of a moved x_k: its device bytes until release, its host copy, its device again, the
    handles that read it and how many of them have since the copy back (Note [Freed as autograd frees])."""

    __slots__ = ("raw", "host", "device", "block", "handles", "unread", "versions")

    def __init__(self, raw: torch.Tensor):
        self.raw, self.host, self.device, self.block = raw, None, raw.device, None
        self.handles = weakref.WeakSet()  # those the graph still holds (Note [Steps end with their graph])
        self.unread = 0
        self.versions: list = []  # (tensor on it, its version) at the offload, until release


class _Record:
    """A moved x_k in one step: its storages (by key), the handles packed on it and its copy events."""

    __slots__ = ("k", "stores", "index", "handles", "done", "pdone", "state", "saved", "outputs")

    def __init__(self, k: int):
        self.k = k
        self.stores: list[_Store] = []
        self.index: dict = {}          # storage key -> position in stores
        self.handles = weakref.WeakSet()
        self.done = self.pdone = None  # CUDA events of the copy out and the copy back
        self.state = "device"          # device -> copying -> host -> incoming -> back (-> dropped)
        self.saved: list = []          # (saved tensor, its version) at the offload, until release
        self.outputs: list = []        # (store, tensor) of a_k's tensors (until release)

    def add(self, key, t: torch.Tensor) -> int:
        if key not in self.index:
            if self.state != "device":
                raise RuntimeError(f"internal error: a new storage for x_{self.k} after its offload")
            self.index[key] = len(self.stores)
            self.stores.append(_Store(_raw(t)))
        return self.index[key]


def _off_graph(t: torch.Tensor) -> torch.Tensor:
    """What a step keeps of a tensor autograd saves: ``t`` detached when it has a ``grad_fn`` (Note [Steps end
    with their graph]). Kept as it is, a tensor an op saves as its own output (tanh's) made a cycle through
    autograd's C++ graph (node -> saved object -> tensor -> node) that Python's collector cannot break: a step
    whose backward never ran (an output dropped, a forward that raised) stayed alive with its host buffers,
    393 216 B of a dropped forward on the CPU (a review, 2026-11-27). The detached tensor shares the storage
    and the version counter; autograd gives the unpacked tensor its place in the graph again."""
    return t.detach() if t.grad_fn is not None else t


class _Saved:
    """What the pack hook returns for a tensor of a moved x_k: the tensor itself until ``release``, then
    the view of its storage's copy."""

    __slots__ = ("record", "slot", "t", "read", "__weakref__")

    def __init__(self, record: _Record, slot: _Slot, t: torch.Tensor):
        self.record, self.slot, self.t = record, slot, t
        self.read = False  # unpacked since its storage came back


class PaperOffloadRunner:
    """Runs one :class:`~gpusolve.offload.compare.PaperPlan` over ``groups`` (the callables of each chain
    stage, as :class:`torch_exec.CheckpointedSequential`'s entry has them: ``entry.groups``) on ``device``.
    ``modules``: more modules whose parameters and buffers the stages read (never moved; the stages'
    own modules, and those their plain callables reach, are found).

    ``runner(x)`` runs the forward and returns the last stage's output; its ``backward()`` runs the plan's
    backward. Several forwards may precede their backwards (Note [Steps end with their graph]).
    ``copies``: the plan's host buffer pool (a new one by default)."""

    def __init__(self, groups: list, plan, device, modules=(), copies: HostCopies | None = None):
        if len(plan.points) != 2 * len(groups) + 1:
            raise ValueError(f"the plan is for a chain of {(len(plan.points) - 1) // 2} stages, not {len(groups)}: "
                             f"make it with paper_plan on the chain these stages were profiled as")
        self.groups = [list(g) for g in groups]
        self.plan = plan
        fns = [fn for g in self.groups for fn in g]
        reached = [v for fn in fns for _, v in U.reachable_state(fn)]
        self.modules = U.modules_of(fns + [v for v in reached if isinstance(v, nn.Module)] + list(modules))
        self.tensors = [v for v in reached if isinstance(v, torch.Tensor)]  # weights a plain callable reads
        self.copies = copies if copies is not None else HostCopies(device)
        self._open: list[_PaperStep] = []  # the steps not closed yet
        self.late_prefetches = 0  # in the last step closed: copies back issued only when read (not at their point)
        self._signature = None    # of(): (the wrapper's input signature function, the sample's signature)

    @classmethod
    def of(cls, model, sample, budget, link, method: str = "best") -> "PaperOffloadRunner":
        """The offloading paper's plan for a :class:`torch_exec.CheckpointedSequential` ``model``'s stages at
        ``budget`` (bytes, ``"6GiB"``, or ``"35%"`` of the profiled store-all peak) over ``link`` (a
        :class:`gpusolve.offload.Link` or a rate such as ``"50GB/s"``); ``method``: ``"best"`` (the fastest
        of GREEDY, DYNPROG and VDNN in the paper's model) or one of them. Profiles ``model`` on ``sample``
        unless it has a profile for such inputs; the plan is made on :func:`planning_instance`. Raises
        ``ValueError`` when the paper has no plan there (``InfeasibleBudgetError`` below its least budget).
        A percentage is of plain autograd's measured step peak, as the wrapper's budget is
        (:func:`torch_exec.executor.entry_budget_bytes`). The runner runs inputs of the
        sample's signature only (shapes, dtypes, device, ``requires_grad``, the model's state)."""
        from gpusolve.offload.compare import paper_plan
        from gpusolve.offload.link import Link
        from .executor import entry_budget_bytes, merged_face
        chain = planning_instance(model, sample)
        entry = merged_face(model._last)  # the stages planning_instance's chain is over
        link = link if isinstance(link, Link) else Link.parse(link)
        plan = paper_plan(chain, entry_budget_bytes(budget, entry), link, method)
        runner = cls(entry.groups, plan, entry.device, modules=[model])
        runner._signature = (model._key, model._key(sample))
        return runner

    def __call__(self, x):
        if self._signature is not None and self._signature[0](x) != self._signature[1]:
            raise ValueError("PaperOffloadRunner: this input's signature (shapes, dtypes, device, requires_grad, "
                             "or the model's state) is not the sample's its plan was made for, and the plan does "
                             "not hold for it; make a runner for it: PaperOffloadRunner.of(model, x, budget, link)")
        for step in self._open:
            if not step.alive():  # Note [Steps end with their graph]
                step.close()
        self._open = [step for step in self._open if not step.closed]
        step = _PaperStep(self)
        self._open.append(step)
        return step.forward(x)

    def close(self) -> None:
        """Give every open step's host buffers back to the pool (a graph still alive cannot run its
        backward after this)."""
        for step in self._open:
            step.close()
        self._open = []

    def host_bytes(self) -> int:
        """Bytes of host buffers the pool holds (after :meth:`close`: all the plan's)."""
        return self.copies.host_bytes()

    def _protected(self) -> set:
        keys = set()
        for t in [t for m in self.modules for t in list(m.parameters()) + list(m.buffers())] + self.tensors:
            key = U.storage_key(t)
            if key is not None:
                keys.add(key)
        return keys


def planning_instance(model, sample) -> Chain:
    """The chain a paper plan for the :class:`torch_exec.CheckpointedSequential` ``model``'s stages is made
    on, profiling it on ``sample`` unless it has a profile for such inputs: the profiled chain with what the
    runner's step holds beside the stages reserved (the caller's a_N and the gradient of it the backward
    seeds, one unsplit allocator block on CUDA: ``torch_exec.executor.caller_chain``); it carries the leaves
    several stages read (``Chain.shared_grads``), which the paper's plans are charged by default (Note
    [Gradients summed across stages] in gpusolve/offload/compare.py). Without the first the plans measured
    8 B over at the paper's least budget on the CPU (a scalar loss and its seed), without the second up to
    3.2 % (``bench/results/paper_fidelity_cpu_before.md``). What autograd keeps past the saved-tensor hooks
    stays on the device: it leaves the tapes and is reserved (Note [Kept past the hooks])."""
    from .executor import caller_chain, caller_output_bytes, merged_face
    model.prepare(sample)
    # the profile's own grouping, whatever the wrapper's budget chose (Note [Two groupings of unsaved boundaries])
    entry = merged_face(model._last)
    chain, _, _ = caller_chain(entry.plain_chain, caller_output_bytes(entry.plain_chain, entry.profile),
                               remainder=U.allocator_reserve_bytes(entry.device.type))
    kept = unhooked_bytes(chain, entry.profile)
    tape = np.maximum(chain.tape_bytes - kept, 0)
    return replace(chain, tape_bytes=tape, bwd_tape_bytes=np.minimum(chain.bwd_tape_bytes, tape),
                   reserved_bytes=int(chain.reserved_bytes + (chain.tape_bytes - tape).sum()))


def unhooked_bytes(chain: Chain, profile: dict) -> np.ndarray:
    """Per stage of ``chain``: the bytes its forward keeps that no saved-tensor hook sees, the profile's
    ``xbar`` above its ``saved_bytes`` summed over the stage's members (Note [Kept past the hooks])."""
    by_name = {stage["name"]: stage for stage in profile["stages"]}
    members = chain.provenance.get("members") or [[name] for name in chain.names]
    return np.array([sum(max(0, int(by_name[m]["xbar"]) - int(by_name[m].get("saved_bytes", by_name[m]["xbar"])))
                         for m in group) for group in members], dtype=np.int64)


class _PaperStep:
    """The records, hooks and issue cursor of one step (module docstring)."""

    def __init__(self, runner: PaperOffloadRunner):
        self.runner = runner
        self.copies = runner.copies
        self.points = runner.plan.points
        self.n = len(runner.groups)
        self.records = {k: _Record(k) for k in runner.plan.decisions}
        self.owner: dict = {}          # storage key -> record of a moved x_k not yet released
        self.protected = runner._protected()
        self.stage = 0
        self.inputs: set = set()       # storage keys of the running stage's input
        self.cursor = 0
        self.queued = False            # a backward of this step is running (its end is queued)
        self.task = -1                 # that backward's graph task
        self.token = lambda: None      # a weak reference to what the graph's point hooks hold
        self.closed = False
        self.late = 0                  # copies back issued when read, their point not reached (no overlap)

    # ------------------------------------------------------------ the forward
    def forward(self, x):
        state = x
        token = _Token()
        self.token = weakref.ref(token)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
                for s in range(1, self.n + 1):
                    self.run_to(s - 1)  # before F_{s-1}: stage s
                    self.stage, self.inputs = s, set(U.storages(state))
                    for fn in self.runner.groups[s - 1]:
                        state = fn(state)
                    if s in self.records:  # a_s is part of x_s
                        self._adopt(self.records[s], state)
                    if s < self.n:
                        self._hook(state, 2 * self.n - s, token)  # before B_{s-1}: stage s's backward
            self.stage, self.inputs = None, set()
            self.run_to(self.n)  # before B_L, the last stage's backward
        except BaseException:  # a stage raised (a NaN check): no backward will come for this step
            self.close()
            raise
        return state

    def alive(self) -> bool:
        """Whether a backward may still read this step (Note [Steps end with their graph])."""
        if self.queued and torch._C._current_graph_task_id() != self.task:
            self.queued = False  # its backward raised: the end it queued never ran
        return self.queued or self.token() is not None or self._handles()

    def _handles(self) -> bool:
        return any(len(record.handles) for record in self.records.values())

    def _adopt(self, record: _Record, state) -> None:
        """Add the storages of a_s that are new (not the input's, not another x's) to x_s. A method, so
        that no loop variable of the forward's frame keeps a tensor of a_s once it is released."""
        for t in U.tensors(state):
            key = U.storage_key(t)
            if self._movable(t, key) and key not in self.owner and key not in self.inputs:
                record.outputs.append((record.add(key, t), _off_graph(t)))
                self.owner[key] = record

    def _movable(self, t, key) -> bool:
        """Whether ``t`` may be part of a moved tape: not a parameter, buffer or other leaf that needs a
        gradient (or a view of one), nor a tensor the executor cannot copy, nor an empty storage (Note [Empty
        storages share a key])."""
        if key is None or key[2] == 0 or key in self.protected or not U.copyable(t):
            return False
        base = t if t._base is None else t._base
        return not (base.is_leaf and base.requires_grad)

    def pack(self, t: torch.Tensor):
        key = U.storage_key(t)
        if not self._movable(t, key):
            return _off_graph(t)
        record = self.owner.get(key)
        if record is None:
            record = self.records.get(self.stage)
            if record is None or key in self.inputs:
                return _off_graph(t)
            self.owner[key] = record
        handle = _Saved(record, _Slot(record.add(key, t), t=t), _off_graph(t))
        store = record.stores[handle.slot.storage]
        if any(u._version != v for u, v in store.versions):  # Note [Written while copied]
            raise RuntimeError(_WRITTEN_ERROR.format(k=record.k, upto=self.cursor))
        record.handles.add(handle)
        store.handles.add(handle)
        return handle

    def unpack(self, packed):
        if not isinstance(packed, _Saved):
            return packed
        if packed.t is not None:
            return packed.t
        if self.closed:
            raise RuntimeError(_CLOSED_ERROR)
        record = packed.record
        store = record.stores[packed.slot.storage]
        if store.block is None:  # its point did not fire, a kept graph's second backward, a second read: fetch now
            if record.state not in ("host", "back", "dropped"):
                raise RuntimeError(f"internal error: x_{record.k} unpacked in state {record.state}")
            self.late += 1
            self._prefetch(record, [store] if record.state == "back" else None)
        self.copies.wait(record.pdone)
        record.pdone, record.state = None, "back"
        view = packed.slot.view(store.block)
        if not packed.read:
            packed.read = True
            store.unread -= 1
            if store.unread == 0:  # autograd holds what it still reads (Note [Freed as autograd frees])
                store.block = None
        return view

    # ------------------------------------------------------------ the backward's points
    def _hook(self, state, q: int, token) -> None:
        """Point q when the gradient of a_s exists: on every tensor of a_s that stage s made (one passed on
        from an earlier stage gets its gradient only at that stage's backward; two towers get theirs in
        two backwards), else on one that needs it. The hooks hold ``token`` (Note [Steps end with their
        graph])."""
        needs = [t for t in U.tensors(state) if t.requires_grad]
        for t in [t for t in needs if U.storage_key(t) not in self.inputs] or needs[:1]:
            U.register_grad_hook(t, lambda grad, token=token: self._point(q))  # the first to run issues (cursor)

    def _point(self, q: int) -> None:
        if self.closed:  # its reads raise (unpack)
            return
        if not self.queued:  # the step's end: after the engine has run every node of this backward
            self.queued, self.task = True, torch._C._current_graph_task_id()
            torch.autograd.Variable._execution_engine.queue_callback(self._end)
        self.run_to(q)

    def _end(self) -> None:
        """The backward's end: what is left is let go (no copy is issued now: a backward that did not
        reach the first stages never reads them); the step ends unless the graph is kept or a part of it
        that did not run still holds handles (Note [Steps end with their graph])."""
        self.run_to(len(self.points) - 1, copies=False)
        self.queued = False
        if not _keep_graph() and not self._handles():
            self.close()

    def run_to(self, q: int, copies: bool = True) -> None:
        """Issue everything due before op ``q`` (and what a point that did not fire left)."""
        while self.cursor <= q:
            for kind, k in self.points[self.cursor]:
                if copies or kind in ("drop", "release"):
                    getattr(self, "_" + kind)(self.records[k])
            self.cursor += 1

    # ------------------------------------------------------------ the four actions
    def _offload(self, record: _Record) -> None:
        pairs = []
        for i, store in enumerate(record.stores):
            store.host = self.copies.take(store.raw.numel())
            pairs.append((store.host, store.raw))
            held = [h.t for h in store.handles if h.t is not None] + [t for j, t in record.outputs if j == i]
            store.versions = [(t, t._version) for t in held]  # Note [Written while copied]
        record.saved = [(h.t, h.t._version) for h in record.handles if h.t is not None]
        record.done, record.state = self.copies.copy(pairs), "copying"

    def _release(self, record: _Record) -> None:
        for t, version in record.saved:  # saved before the offload, written since (Note [Written while copied])
            if t._version != version:
                raise RuntimeError(_WRITTEN_ERROR.format(k=record.k, upto=self.cursor))
        record.saved, record.outputs = [], []
        for store in record.stores:
            store.versions = []
        self.copies.wait(record.done)
        for key in record.index:
            self.owner.pop(key, None)  # a later block at the same address is not this storage
        for store in record.stores:
            store.raw = None
        for handle in list(record.handles):
            handle.t = None
        record.done, record.state = None, "host"

    def _prefetch(self, record: _Record, stores=None) -> None:
        """The copy back of the storages of x_k without a device block (``stores``: only those; by default
        all of them, as the plan has it)."""
        pairs = []
        for store in record.stores if stores is None else stores:
            if store.block is None:
                store.block = torch.empty(store.host.numel(), dtype=torch.uint8, device=store.device)
                pairs.append((store.block, store.host))
                handles = list(store.handles)
                store.unread = len(handles)
                for handle in handles:
                    handle.read = False
        record.pdone, record.state = self.copies.copy(pairs), "incoming"

    def _drop(self, record: _Record) -> None:
        if record.state in ("back", "incoming"):
            self.copies.wait(record.pdone)  # never read: the copy must end before its block is reused
            for store in record.stores:
                store.block = None
            record.pdone, record.state = None, "dropped"

    def close(self) -> None:
        """Give the host buffers back to the pool and let go of every device reference (a step whose
        backward never comes keeps nothing). On CUDA the copy stream is FIFO: a later step's offload into
        a buffer runs after this step's prefetch from it."""
        if self.closed:
            return
        self.closed = True
        self.runner.late_prefetches = self.late
        for record in self.records.values():
            for store in record.stores:
                if store.host is not None:
                    self.copies.give(store.host)
                store.raw = store.host = store.block = None
                store.handles.clear()
                store.versions = []
            for handle in list(record.handles):
                handle.t = None
            record.handles.clear()
            record.saved, record.outputs = [], []
        self.owner.clear()
