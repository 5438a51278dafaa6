"""The cost model: a chain of N stages with per-stage compute times (ms) and memory sizes (bytes).

Stage s (1-based, s = 1..N) maps activation a_{s-1} to a_s; a_0 is the chain's input, held by the
caller and never counted against the budget. Arrays below are indexed by ``s - 1``.

Memory model (every size in bytes; see docs/cost-model.md for the recurrences):
- ``act_bytes[s]``: a_s, kept as a checkpoint after a no-grad forward.
- ``grad_bytes[s]``: the gradient of a_s.
- ``tape_bytes[s]``: held from a forward-with-grad of s until its backward (a_s and what autograd saved).
- ``fwd_nograd_extra``, ``fwd_grad_extra``, ``bwd_extra``: transient workspace of each pass on top of
  the tensors just named.
- ``bwd_tape_bytes`` (optional, default ``tape_bytes``): the part of the tape still held when the
  stage's backward starts. A stage's output is part of its tape (the next stage reads it), but
  unless the stage's own backward saved it, it is gone by then: the next stage's backward, which
  may have saved it, has run, and the executor keeps no reference of its own.
- ``reserved_bytes`` (one number): held through the whole step besides the chain's tensors, inside
  the budget; every moment of every plan counts it. The executor uses it for what it holds beyond
  the stages' tensors (see ``torch_exec.executor``, Note [The gradient of a_N]).

Note [Outputs passed through]
    A stage may return, beside what it makes, tensors made by stages before it: a language model's
    loss stage returns the logits its head made; a U-Net's encoder stages pass the skips on. The
    profile says which measured stage made each storage of an output (``held_from``, written by
    ``torch_exec.profile``), and :meth:`Chain.from_profile` reads it so:
    - Within a fused stage, the storages an earlier member made and the output passes on belong to
      the fused stage's output: they count in ``act_bytes``, they stay in its tape (a member's output
      is freed only where the next member does not pass it on), and at the backward they go with the
      output (the fusion rule joins a member only where nothing saved the output before it).
      ``made_bytes`` is what the output holds of what the stage made; the backward releases that
      much, and the executor takes it out of the last tape when it reserves the output the caller
      holds (Note [The caller holds a_N]: GPT-2's logits were counted twice before).
    - Storages made by earlier stages count in ``act_bytes`` too (a checkpoint of the output holds
      them; without this, plans went over the budget by them), not in the tape: the stage's input,
      which holds them, is held while the tape lives. Two checkpoints held at once that pass on the
      same storage count it twice (an over-count). Exact counting would charge a_k held inside the
      sub-problem (i, j) act(i, k) = act_bytes[k] less what a_k passes on from stages up to i (a_i
      holds that), and likewise each no-grad step its input and output once. It is not done: the
      right sub-problem would be read at m - act(i, k), a shift that depends on i, which undoes the
      CPU backend's pre-shifted rows and the bulk kernel's sharing of one right row among the 8
      pairs of a tile (bench/SOLVER_NOTES.md). The over-count is bounded by what is passed on
      (bench/results/tuple_fuzz_cpu.md: measured / predicted below 0.95 in 51 of 196 runs), and
      plans stay within their budgets. A plan's peak is counted storage by storage after the solve instead
      (``passed_from`` in the provenance; Note [Storage-exact peaks] in gpusolve/exact_peak.py), and the
      executor plans to that peak (Note [Planning to the exact peak] there).
    - Two outputs that share a storage are never moved to the host (``swappable``): releasing one
      would not free what the other holds.
    - The executor clones the input for an in-place first stage (:func:`clones_input`); the clone
      is stage 1's output (before, it was counted nowhere).
    Profiles without ``held_from`` keep the earlier reading of passed-on storages: each counts only in
    the stage that made it (the clone is counted either way, at the input's size).
"""
from __future__ import annotations

import itertools
import json
import math
import numbers
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ProfileWarning
from .profiles import resolve as resolve_profile
from .units import MAX_BYTES, format_bytes

TIME_FIELDS = ("t_fwd", "t_fwd_nograd", "t_bwd")
BYTE_FIELDS = ("act_bytes", "grad_bytes", "tape_bytes", "fwd_nograd_extra", "fwd_grad_extra", "bwd_extra")
# Byte fields a chain may omit: each defaults to a copy of the field named.
OPTIONAL_BYTE_FIELDS = {"bwd_tape_bytes": "tape_bytes"}
ALL_BYTE_FIELDS = BYTE_FIELDS + tuple(OPTIONAL_BYTE_FIELDS)
CHAIN_FORMAT = "gpusolve-chain/1"
PROFILE_FORMAT = "measured-chain/1"
THESIS_FORMAT = "thesis-reference/1"
# Provenance lists with one entry per stage (Chain.from_profile): a chain cut from another slices them
PER_STAGE_PROVENANCE = ("members", "made_bytes", "shared_storage", "device_only", "passed_from", "dropped_from")

# A missing backward time (t_bwd: null) is estimated as this multiple of the stage's forward time
# (a backward usually costs one to two forwards: the upper end).
BWD_ESTIMATE_FACTOR = 2.0
# Measured stage times below this (ms) are timer noise around zero (an in-place ReLU's backward
# reads as -0.002 ms): they are clamped to 0. Anything more negative is an error in the profile.
TIME_NOISE_MS = 0.05
# The longest a stage's pass may take (ms): about 31 700 years, so that the DP's float32 sums of a chain's
# times, each forward run up to N times, stay finite. Sizes have MAX_BYTES (gpusolve.units).
MAX_TIME_MS = 1e15
# The CUDA caching allocator hands out blocks in multiples of 512 bytes; the CPU allocator's
# events report the bytes asked for.
ALLOCATOR_GRANULE = 512


def allocator_bytes(nbytes: int, granule: int = ALLOCATOR_GRANULE) -> int:
    """Bytes an allocator with blocks of ``granule`` bytes holds for a tensor of ``nbytes``
    (default: the CUDA caching allocator's 512)."""
    if nbytes <= 0:
        return 0
    return -(-int(nbytes) // granule) * granule


def profile_granule(data: dict) -> int:
    """The allocator granule of a profile: 1 for a CPU profile, 512 (CUDA) otherwise."""
    return 1 if str(data.get("device", "")).lower() == "cpu" else ALLOCATOR_GRANULE


@dataclass
class Chain:
    """A chain of stages with measured or modelled costs.

    Times are milliseconds (float), sizes are bytes (int). ``multi_tape=False`` selects the thesis's
    model, in which a forward with autograd recording is only taken right before its own backward.
    """

    t_fwd: np.ndarray
    t_fwd_nograd: np.ndarray
    t_bwd: np.ndarray
    act_bytes: np.ndarray
    grad_bytes: np.ndarray
    tape_bytes: np.ndarray
    fwd_nograd_extra: np.ndarray
    fwd_grad_extra: np.ndarray
    bwd_extra: np.ndarray
    bwd_tape_bytes: np.ndarray | None = None
    input_bytes: int = 0
    input_grad_bytes: int | None = None
    reserved_bytes: int = 0
    names: list[str] | None = None
    multi_tape: bool = True
    provenance: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in TIME_FIELDS:
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64).reshape(-1))
        for name, default in OPTIONAL_BYTE_FIELDS.items():
            if getattr(self, name) is None:
                setattr(self, name, np.array(getattr(self, default), copy=True))
        for name in ALL_BYTE_FIELDS:
            setattr(self, name, _as_bytes(getattr(self, name), name))
        if self.input_grad_bytes is None:
            self.input_grad_bytes = self.input_bytes
        n = len(self.t_fwd)
        _check_chain_flags(self.names, self.multi_tape, self.provenance)
        if self.names is None:
            self.names = [f"stage{s}" for s in range(1, n + 1)]
        self.names = [str(name) for name in self.names]
        self.multi_tape = bool(self.multi_tape)
        self.validate()

    # ------------------------------------------------------------------ validation
    @property
    def n(self) -> int:
        """Number of stages N."""
        return len(self.t_fwd)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the stage and field of the first bad value."""
        n = len(self.t_fwd)
        lengths = {name: len(getattr(self, name)) for name in TIME_FIELDS + ALL_BYTE_FIELDS}
        if len(set(lengths.values())) > 1:  # the stage count is what most fields say: the odd one out is named
            counts = list(lengths.values())
            n = max(counts, key=counts.count)
            name = next(name for name, length in lengths.items() if length != n)
            raise ValueError(f"field {name!r} has {lengths[name]} values but the chain has {n} stages (the length of "
                             f"the other fields)")
        if n == 0:
            raise ValueError("the chain is empty: it needs at least one stage")
        for name in TIME_FIELDS + ALL_BYTE_FIELDS:
            values = getattr(self, name)
            limit, most = (MAX_TIME_MS, f"{MAX_TIME_MS:.0e} ms") if name in TIME_FIELDS else (MAX_BYTES, "2^50 bytes")
            as_float = values.astype(np.float64)
            bad = np.flatnonzero(~np.isfinite(as_float) | (values < 0) | (as_float > limit))
            if len(bad):
                s = int(bad[0])
                raise ValueError(
                    f"stage {s + 1} ({self.names[s] if self.names and s < len(self.names) else '?'}): "
                    f"{name} = {values[s].item()!r}; every cost must be finite, >= 0 and at most {most}")
        if len(self.names) != n:
            raise ValueError(f"{len(self.names)} stage names for {n} stages")
        over = np.flatnonzero(self.bwd_tape_bytes > self.tape_bytes)
        if len(over):
            s = int(over[0])
            raise ValueError(f"stage {s + 1} ({self.names[s]}): bwd_tape_bytes = {int(self.bwd_tape_bytes[s])} exceeds "
                             f"tape_bytes = {int(self.tape_bytes[s])}; the tape held at the backward is part of the tape")
        for name in ("input_bytes", "input_grad_bytes", "reserved_bytes"):
            value = getattr(self, name)
            if not _whole(value) or not 0 <= value <= MAX_BYTES:
                raise ValueError(f"{name} = {value!r}; it must be a whole number of bytes, >= 0 and at most 2^50")
            setattr(self, name, int(value))
        total = (sum(int(getattr(self, name).sum()) for name in ALL_BYTE_FIELDS)
                 + self.input_bytes + self.input_grad_bytes + self.reserved_bytes)
        if total > MAX_BYTES:
            raise ValueError(f"the chain's sizes add up to {total} bytes, more than 2^50 (1 PiB): check their unit "
                             f"(sizes are bytes)")

    # ------------------------------------------------------------------ derived arrays
    def padded(self) -> dict[str, np.ndarray]:
        """Arrays indexed by stage s = 0..N (index 0 is the input a_0), as the DP reads them.

        Sizes are int64 bytes, times float64 ms; entry 0 of per-stage fields is 0.
        """
        out: dict[str, np.ndarray] = {}
        for name in TIME_FIELDS:
            out[name] = np.concatenate([[0.0], getattr(self, name)])
        for name in ALL_BYTE_FIELDS:
            out[name] = np.concatenate([[0], getattr(self, name)]).astype(np.int64)
        out["act_bytes"][0] = self.input_bytes
        out["grad_bytes"][0] = self.input_grad_bytes
        return out

    # ------------------------------------------------------------------ constructors
    @classmethod
    def uniform(cls, n: int, t_fwd: float = 1.0, t_bwd: float = 2.0, act_bytes: int = 1 << 20,
                tape_bytes: int | None = None, t_fwd_nograd: float | None = None, **kwargs) -> "Chain":
        """A chain of ``n`` identical stages (times in ms, sizes in bytes); tape defaults to 2x act."""
        if n < 1:
            raise ValueError(f"a uniform chain needs n >= 1 stages, got {n}")
        tape = 2 * act_bytes if tape_bytes is None else tape_bytes
        tfn = t_fwd if t_fwd_nograd is None else t_fwd_nograd
        return cls(t_fwd=[t_fwd] * n, t_fwd_nograd=[tfn] * n, t_bwd=[t_bwd] * n,
                   act_bytes=[act_bytes] * n, grad_bytes=[act_bytes] * n, tape_bytes=[tape] * n,
                   fwd_nograd_extra=[0] * n, fwd_grad_extra=[0] * n, bwd_extra=[0] * n,
                   input_bytes=kwargs.pop("input_bytes", act_bytes),
                   provenance={"source": "uniform", "n": n}, **kwargs)

    @classmethod
    def from_thesis(cls, alpha_f, alpha_b, beta_f, beta_b, name: str = "thesis") -> "Chain":
        """The thesis's chain (arrays of length N+2, see shared reference README) as N+1 stages.

        Thesis forward tensor f_l is our a_l, backward tensor b_l is our gradient of a_l, so the
        thesis's C(i, j, m) is ours with ``multi_tape=False``. Stage s = l + 1 holds the base-case
        cost ``alpha_b[l]`` as its backward time; its recording forward is free and keeps nothing
        (the thesis has no tape), so the base case needs exactly b_i + b_{i+1}. The total budget
        M of the thesis corresponds to ``M - input_bytes`` here (f_0 is held outside).
        """
        arrays = [np.asarray(a, dtype=np.float64).reshape(-1) for a in (alpha_f, alpha_b, beta_f, beta_b)]
        lengths = {len(a) for a in arrays}
        if len(lengths) != 1 or min(lengths) < 3:
            raise ValueError(f"thesis arrays must all have the same length N + 2 >= 3, got {[len(a) for a in arrays]}")
        af, ab, bf, bb = arrays
        for arr, label in ((af, "alpha_f"), (ab, "alpha_b"), (bf, "beta_f"), (bb, "beta_b")):
            bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
            if len(bad):  # every entry, those the model never reads too: a file that holds one is malformed
                i = int(bad[0])
                raise ValueError(f"{label}[{i}] = {float(arr[i])!r}: every thesis cost and size must be finite and >= 0")
        for arr, label in ((bf, "beta_f"), (bb, "beta_b")):
            if np.any(arr != np.round(arr)):
                raise ValueError(f"{label} must hold whole memory units, got {arr.tolist()}")
        n_thesis = len(af) - 2
        stages = n_thesis + 1
        zeros = [0] * stages
        act = [int(v) for v in bf[1:stages]] + [0]  # a_{N+1} (the targets' side) is never kept
        return cls(t_fwd=[0.0] * stages, t_fwd_nograd=list(af[1:stages]) + [0.0], t_bwd=list(ab[0:stages]),
                   act_bytes=act, grad_bytes=[int(v) for v in bb[1:stages + 1]], tape_bytes=zeros,
                   fwd_nograd_extra=zeros, fwd_grad_extra=zeros, bwd_extra=zeros,
                   input_bytes=int(bf[0]), input_grad_bytes=int(bb[0]), multi_tape=False,
                   names=[f"l{s}" for s in range(1, stages + 1)],
                   provenance={"source": "thesis", "name": name})

    @classmethod
    def from_profile(cls, path_or_dict, fuse_aliasing: bool = True, merge_unsaved: bool = True,
                     free_drops: bool = True) -> "Chain":
        """Read a ``measured-chain/1`` profile (see ``gpusolve/profiles/README.md``).

        With ``fuse_aliasing`` (the default) a stage is merged into the stage before it when
        - its output aliases its input (``x == 0``: in-place ReLU, views), so that no plan keeps the
          pre-ReLU tensor as a checkpoint that the in-place op would then overwrite; or
        - the tensor between them is saved by neither stage's backward (the profile says so with
          ``out_saved_bytes``/``in_saved_bytes``; e.g. logits that ``cross_entropy`` consumes): autograd
          frees it as soon as the second stage has run, so as a boundary it would be counted as held
          where it is not (Note [Tensors no backward saves]).
        The merged costs compose the members' measured sums and peaks exactly. With
        ``merge_unsaved=False`` the second kind of boundary stays (Note [Tensors no backward saves]). With
        ``fuse_aliasing=False`` every measured stage stays a stage (useful to benchmark the solver on
        the raw stage count), but such a chain may not be executable. With ``free_drops=False`` a merged
        member's output that the next member dropped on the profiled call is counted held until the merged
        stage's backward (Note [Drops seen on one call]).
        """
        data, source = read_json_object(path_or_dict)
        if data.get("format") != PROFILE_FORMAT:
            raise ValueError(f"{source}: format is {data.get('format')!r}, expected {PROFILE_FORMAT!r}")
        stages = data.get("stages")
        if not isinstance(stages, list) or not stages:
            raise ValueError(f"{source}: 'stages' must be a non-empty list")
        stages = list(stages)  # estimates replace entries of this copy, never the caller's profile
        required = ("name", "t_fwd", "t_fwd_nograd", "t_bwd", "x", "x_nbytes", "xbar",
                    "fwd_peak_nograd", "fwd_peak_grad", "bwd_peak")
        notes: list[str] = []
        for s, stage in enumerate(stages):
            if not isinstance(stage, dict):
                raise ValueError(f"{source}: stage {s + 1} is {stage!r}, not an object with the fields "
                                 f"{', '.join(required)}")
            for key in required:
                if key not in stage:
                    raise ValueError(f"{source}: stage {s + 1} lacks field {key!r}")
            if not isinstance(stage["name"], str):
                raise ValueError(f"{source}: stage {s + 1}: name = {stage['name']!r} is not a string")
            if stage["t_bwd"] is None and isinstance(stage["t_fwd"], (int, float)) and math.isfinite(stage["t_fwd"]):
                # Every plan runs each stage's backward exactly once, so this estimate moves every plan's
                # predicted time alike and never changes which plan is chosen.
                estimate = BWD_ESTIMATE_FACTOR * max(0.0, float(stage["t_fwd"]))
                message = (f"{source}: stage {s + 1} ({stage['name']}): t_bwd is missing (the profiler could not "
                           f"time its backward); estimated as {BWD_ESTIMATE_FACTOR:g} x t_fwd = {estimate:.4g} ms, "
                           f"which shifts every plan's predicted time alike and changes no plan")
                warnings.warn(message, ProfileWarning, stacklevel=3)
                notes.append(message)
                stage = stages[s] = dict(stage, t_bwd=estimate)
            _check_profile_stage(stage, f"{source}: stage {s + 1} ({stage['name']})")
            for key in ("held_from", "out_saved_from", "in_dropped_from"):  # Note [Storages a stage drops]
                if key in stage and not _valid_held_from(stage[key], s + 1):
                    raise ValueError(f"{source}: stage {s + 1} ({stage['name']}): {key} = {stage[key]!r} is not a "
                                     f"list of [stage, bytes] pairs with 0 <= stage <= {s + 1} and bytes >= 0; "
                                     f"re-profile, or drop the field")
        input_bytes = data.get("input_bytes", 0)
        if not _whole(input_bytes) or not 0 <= input_bytes <= MAX_BYTES:
            raise ValueError(f"{source}: input_bytes = {input_bytes!r} is not a whole number of bytes between 0 and "
                             f"2^50; re-profile, or fix the field")
        for key in ("input_requires_grad", "drops_checked", "split_leaves"):
            if not isinstance(data.get(key, False), bool):
                raise ValueError(f"{source}: {key} = {data[key]!r} must be true or false")
        granule = profile_granule(data)
        in_place_first = stages[0]["x"] == 0
        if clones_input(stages[0]):
            stages = _with_input_clone(stages, input_bytes, granule)
        groups: list[list[dict]] = []
        joined = {"in_place": 0, "unsaved": 0}  # stages joined to the one before, by reason
        start = 1  # the measured stage number of the last group's first member
        for stage in stages:
            if fuse_aliasing and groups and (stage["x"] == 0 or merge_unsaved
                                             and _output_unsaved(groups[-1], stage, start)):
                joined["in_place" if stage["x"] == 0 else "unsaved"] += 1
                groups[-1].append(stage)
            else:
                if groups:
                    start += len(groups[-1])
                groups.append([stage])
        if fuse_aliasing and in_place_first:
            notes.append("stage 1 aliases the chain input: the executor clones the input before it")
        fields: dict[str, list] = {name: [] for name in TIME_FIELDS + ALL_BYTE_FIELDS}
        made: list[int] = []  # per stage: what its output holds that it made (Note [Outputs passed through])
        names: list[str] = []
        members: list[list[str]] = []
        # The profiler records whether the input needed a gradient; without one, none is allocated,
        # and the first stage's measured backward peak holds none either (its bwd_extra keeps it all).
        input_grad = 0 if data.get("input_requires_grad") is False else allocator_bytes(input_bytes, granule)
        grad_in = input_grad
        first = 1  # the measured stage number of each group's first member
        group_of: dict[int, int] = {}  # measured stage number -> its group's index
        start = 1
        for g, group in enumerate(groups):
            group_of.update(dict.fromkeys(range(start, start + len(group)), g))
            start += len(group)
        shared = [False] * len(groups)  # the group's output shares a storage with another group's
        # Note [Storage-exact peaks] in gpusolve/exact_peak.py: per stage, [maker stage, bytes] of the storages
        # made by earlier stages that its output passes on, and that it drops (None where the profile does not say)
        passed_from: list[list | None] = []
        dropped_from: list[list | None] = []
        # Note [A leaf read twice in one stage]: a fused stage's readers of a shared leaf, composed member by member
        # (the record checked first)
        shared_leaves = _shared_leaves(data, source, group_of, granule)
        adjust, composed = _fused_readers(data, groups, group_of, granule)
        for g, group in enumerate(groups):
            if any(first + m in adjust for m in range(len(group))):
                group = [dict(st, bwd_peak=int(st["bwd_peak"]) + adjust[first + m][0],
                              bwd_delta=int(st["bwd_delta"]) + adjust[first + m][1])
                         if first + m in adjust else st for m, st in enumerate(group)]
            merged = _merge_group(group, grad_in, notes, granule, first=first, free_drops=free_drops)
            before = _held_from(group[-1], range(1, first))  # storages made before the group that it passes on
            passed_from.append(_by_group(before, group_of) if "held_from" in group[-1] else None)
            dropped_from.append(_by_group([(int(o), int(b)) for st in group for o, b in st["in_dropped_from"]
                                           if 1 <= int(o) < first], group_of)
                                if all("in_dropped_from" in st for st in group) else None)
            for origin, _ in before:
                shared[g] = shared[group_of[origin]] = True
            first += len(group)
            for name in TIME_FIELDS + ALL_BYTE_FIELDS:
                fields[name].append(merged[name])
            made.append(merged["made_bytes"])
            names.append("+".join(stage["name"] for stage in group))
            members.append([stage["name"] for stage in group])
            grad_in = merged["grad_bytes"]
        provenance = {k: data[k] for k in ("network", "args", "device", "torch", "dtype", "reference",
                                           "param_bytes", "drops_checked", "split_leaves") if k in data}
        provenance["shared_leaves"] = shared_leaves
        for g, extra in enumerate(_summed_in_a_stage(data, group_of, len(groups), granule, composed)):
            fields["bwd_extra"][g] += extra  # Note [A leaf read twice in one stage]
        provenance.update(source=str(source), format=PROFILE_FORMAT, measured_stages=len(stages),
                          merged_in_place=joined["in_place"], merged_unsaved=joined["unsaved"],
                          fused_aliasing=fuse_aliasing, members=members, notes=notes, made_bytes=made,
                          shared_storage=shared, passed_from=passed_from, dropped_from=dropped_from,
                          # the group's output holds a tensor the executor cannot move to the host (sparse...)
                          device_only=[bool(group[-1].get("device_only", False)) for group in groups])
        return cls(**fields, input_bytes=input_bytes, input_grad_bytes=input_grad,
                   names=names, provenance=provenance)

    @classmethod
    def load(cls, path, fuse_aliasing: bool = True) -> "Chain":
        """Read any supported chain file: ``gpusolve-chain/1`` or ``measured-chain/1``, given as a
        path or as the name of a bundled profile (``Chain.load("resnet50_b128")``; the names:
        ``gpusolve profiles``). A path that exists wins over a bundled name.

        Raises ``FileNotFoundError`` or ``ValueError`` with a one-line reason.
        """
        data, source = read_json_object(path if isinstance(path, dict) else resolve_profile(path))
        fmt = data.get("format") if isinstance(data, dict) else None
        if fmt == PROFILE_FORMAT:
            return cls.from_profile(data | {"_source": str(source)}, fuse_aliasing=fuse_aliasing)
        if fmt == CHAIN_FORMAT:
            return cls.from_dict(data, source=source)
        raise ValueError(f"{source}: unknown format {fmt!r}; expected {PROFILE_FORMAT!r} or {CHAIN_FORMAT!r}")

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        """A JSON-ready dict in format ``gpusolve-chain/1``."""
        out = {"format": CHAIN_FORMAT, "input_bytes": self.input_bytes, "input_grad_bytes": self.input_grad_bytes,
               "reserved_bytes": self.reserved_bytes, "multi_tape": self.multi_tape, "names": list(self.names), "provenance": self.provenance}
        for name in TIME_FIELDS:
            out[name] = [float(v) for v in getattr(self, name)]
        for name in ALL_BYTE_FIELDS:
            out[name] = [int(v) for v in getattr(self, name)]
        return out

    @classmethod
    def from_dict(cls, data: dict, source=None) -> "Chain":
        """Inverse of :meth:`to_dict`. Raises ``ValueError`` naming ``source`` (the file) and the field of
        the first value that is not what the format says."""
        where = f"{source}: " if source is not None else ""
        if data.get("format") != CHAIN_FORMAT:
            raise ValueError(f"{where}format is {data.get('format')!r}, expected {CHAIN_FORMAT!r}")
        missing = [k for k in TIME_FIELDS + BYTE_FIELDS if k not in data]
        if missing:
            raise ValueError(f"{where}chain file lacks fields {missing}")
        _check_chain_fields(data, where)
        kwargs = {k: data[k] for k in TIME_FIELDS + ALL_BYTE_FIELDS if k in data}
        try:
            grad_in = data.get("input_grad_bytes")  # whole-valued floats as in the other two (checked above)
            return cls(**kwargs, input_bytes=int(data.get("input_bytes", 0)),
                       input_grad_bytes=None if grad_in is None else int(grad_in),
                       reserved_bytes=int(data.get("reserved_bytes", 0)),
                       names=data.get("names"), multi_tape=data.get("multi_tape", True),
                       provenance=data.get("provenance", {}))
        except ValueError as err:
            raise ValueError(f"{where}{err}") from None

    def to_json(self, path=None) -> str:
        """Serialise to JSON text; also write it to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, text_or_path) -> "Chain":
        """Read a chain from JSON text or a path written by :meth:`to_json`."""
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        return cls.from_dict(json.loads(text))

    @property
    def profiled_stages(self) -> int:
        """Stages of the profile this chain was read from, before merging (:meth:`from_profile`); ``n``
        for a chain that was not read from a profile."""
        return int(self.provenance.get("measured_stages", self.n))

    def stages_text(self) -> str:
        """``"25 stages"``, and for a profile whose stages were merged (:meth:`from_profile`) the
        count before merging and why, e.g. ``"25 stages (40 profiled; 15 in-place stages merged)"``."""
        merged = self.profiled_stages - self.n
        count = f"{self.n} stage{'s' if self.n != 1 else ''}"
        if merged <= 0:
            return count
        in_place = int(self.provenance.get("merged_in_place", -1))
        unsaved = int(self.provenance.get("merged_unsaved", -1))
        unsaved_why = "where no backward saves the tensor between"
        if in_place == merged:
            why = f"{merged} in-place stage{'s' if merged > 1 else ''} merged"
        elif unsaved == merged:
            why = f"{merged} merged {unsaved_why}"
        elif in_place >= 0 and unsaved >= 0:
            why = f"{merged} merged: {in_place} in place, {unsaved} {unsaved_why}"
        else:
            why = f"{merged} merged"
        return f"{count} ({self.profiled_stages} profiled; {why})"

    def _per_stage(self, key: str, default) -> list:
        """A per-stage list of the provenance (written by :meth:`from_profile`); ``default`` for every
        stage where there is none. A list of another length with a non-default entry means the chain
        was derived from a profiled one without slicing it: refused, as its entries would be misread."""
        values = self.provenance.get(key)
        if values is None or (len(values) != self.n and not any(values)):
            return [default] * self.n
        if len(values) != self.n:
            raise ValueError(f"chain provenance {key!r} has {len(values)} entries for {self.n} stages: a chain "
                             f"derived from a profiled one must slice it with the stages (or drop it)")
        return list(values)

    def made_bytes(self, s: int) -> int:
        """Bytes of the output of stage ``s`` (1-based) that the stage itself made and its output holds:
        not the storages made before it that the output passes on (Note [Outputs passed through]; the
        profile's ``held_from``). ``act_bytes`` where the chain does not say."""
        made = self._per_stage("made_bytes", None)[s - 1]
        return int(self.act_bytes[s - 1]) if made is None else int(made)

    def shared_leaves(self) -> list[tuple[tuple[int, ...], int, bool]] | None:
        """``(stages, bytes, summed)`` per leaf tensor that several stages (1-based, ascending) add a
        gradient to, as the profile found them in the autograd graph (Note [Leaves several stages read]
        in torch_exec/profiler.py; bytes in the profile's allocator blocks; ``summed``: the profile's
        plain step summed them in one buffer); None where the chain does not say (a profile made before
        it was recorded, a chain not read from a profile)."""
        recorded = self.provenance.get("shared_leaves")
        if recorded is None:
            return None
        out = []
        for item in recorded:
            stages = tuple(int(s) for s in item["stages"])
            if not (len(stages) > 1 and 1 <= stages[0] and stages[-1] <= self.n and list(stages) == sorted(set(stages))):
                raise ValueError(f"chain provenance 'shared_leaves' names stages {list(stages)} of a {self.n}-stage chain: "
                                 f"a chain derived from a profiled one must renumber them with its stages (or drop them)")
            out.append((stages, int(item["nbytes"]), bool(item["summed"])))
        return out

    def shared_grads(self) -> list[tuple[int, int, int]]:
        """``(first, last, bytes)``: bytes plain autograd holds in the backwards of stages ``first`` ..
        ``last - 1`` that their profiles do not count, per leaf of :meth:`shared_leaves` (none where the
        chain does not say; Note [Gradients summed across stages] in gpusolve/offload/compare.py): the
        buffer of its summed gradient, held from stage ``last``'s backward through stage ``first``'s; and
        where the profile's readings did not sum them (``summed`` false; a profile whose stages' readings are each
        their own call's: ``split_leaves``, Note [Leaves summed stage by stage] in torch_exec/profiler.py), the sum
        itself, made in the first reader's backward beside the buffer and that stage's own gradient:
        ``(first, first + 1, bytes)``."""
        out = []
        split = self.provenance.get("split_leaves") is True
        for stages, nbytes, summed in self.shared_leaves() or ():
            out.append((stages[0], stages[-1], nbytes))
            if split or not summed:
                out.append((stages[0], stages[0] + 1, nbytes))
        return out

    def swappable(self) -> np.ndarray:
        """bool[N + 1]: whether a_s may be moved to the host (index 0, the input: never). Not where a_s
        shares a storage with another stage's output (Note [Outputs passed through]): moving it out
        would not free that storage while the other holds it; nor where the profile says a_s holds a
        tensor the executor keeps on the device (``device_only``: sparse, nested, quantized)."""
        shared, device_only = self._per_stage("shared_storage", False), self._per_stage("device_only", False)
        return np.array([False] + [not (a or b) for a, b in zip(shared, device_only, strict=True)], dtype=bool)

    def summary(self) -> str:
        """One line: stage count (and the profiled count, :meth:`stages_text`) and totals."""
        return (f"{self.stages_text()}, forward {self.t_fwd.sum():.2f} ms, backward {self.t_bwd.sum():.2f} ms, "
                f"tape {format_bytes(int(self.tape_bytes.sum()))}")


def _number(value) -> bool:
    """Whether a file's value is a number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _check_chain_fields(data: dict, where: str) -> None:
    """Raise ``ValueError`` naming the field of a ``gpusolve-chain/1`` object whose value has the wrong type
    (the values themselves are checked by :meth:`Chain.validate`)."""
    for key in TIME_FIELDS + ALL_BYTE_FIELDS:
        if key in data and not (isinstance(data[key], (list, tuple, np.ndarray)) and all(_number(v) for v in data[key])):
            raise ValueError(f"{where}{key} = {str(data[key])[:60]} is not a list of numbers")
    for key, nullable in (("input_bytes", False), ("reserved_bytes", False), ("input_grad_bytes", True)):
        value = data.get(key, 0)
        if value is None and nullable:
            continue
        if not (_number(value) and math.isfinite(value) and float(value).is_integer() and 0 <= value <= MAX_BYTES):
            raise ValueError(f"{where}{key} = {value!r} is not a whole number of bytes between 0 and 2^50")
    names = data.get("names")
    if names is not None and not (isinstance(names, list) and all(isinstance(v, str) for v in names)):
        raise ValueError(f"{where}names = {str(names)[:60]} is not a list of strings")
    # multi_tape and provenance: the constructor's check (_check_chain_flags), its error prefixed by from_dict


def _check_chain_flags(names, multi_tape, provenance) -> None:
    """Raise ``ValueError`` naming ``names`` (given, not a list or tuple of names: a string would be read letter by
    letter), ``multi_tape`` (not a bool: "false" would read true, the other cost model) or ``provenance`` (not a
    dict), as :class:`Chain` takes them (:meth:`Chain.from_dict` adds the file)."""
    if names is not None and not isinstance(names, (list, tuple, np.ndarray)):
        raise ValueError(f"names = {str(names)[:60]!r} is not a list of stage names")
    if not isinstance(multi_tape, (bool, np.bool_)):
        raise ValueError(f"multi_tape = {multi_tape!r} must be true or false")
    if not isinstance(provenance, dict):
        raise ValueError(f"provenance = {str(provenance)[:60]} is not an object (a dict)")


def _as_bytes(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    fractions = np.flatnonzero(np.isfinite(arr) & (arr != np.round(arr)))
    if len(fractions):
        s = int(fractions[0])
        raise ValueError(f"field {name!r} must hold whole bytes: stage {s + 1} has {float(arr[s])!r}"
                         + (f" ({len(fractions)} stages have fractions)" if len(fractions) > 1 else ""))
    # Keep non-finite, negative or too large values visible to validate() (it names the stage).
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > MAX_BYTES):
        return arr
    return arr.astype(np.int64)


def read_json_object(path_or_dict):
    """(dict, source) from a dict or a JSON file holding an object; clear errors for anything else."""
    if isinstance(path_or_dict, dict):
        return path_or_dict, path_or_dict.get("_source", "<profile>")
    path = Path(path_or_dict)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON file ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    return data, path


def _whole(value) -> bool:
    """Whether a profile's value is a whole number (not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


# A profile stage's numeric fields beside the required ones (gpusolve/profiles/README.md): (least value,
# whether null is allowed). Sizes are whole bytes; ``bwd_delta`` and ``grad_ready_delta`` are changes, so they may be
# negative.
_OPTIONAL_STAGE_BYTES = {"held_nbytes": (0, False), "saved_bytes": (0, False), "out_saved_bytes": (0, False),
                         "in_saved_bytes": (0, False), "grad_held_bytes": (0, False), "bwd_delta": (-MAX_BYTES, True),
                         "grad_ready_delta": (-MAX_BYTES, False), "rng_bytes": (0, False)}
_STAGE_FLAGS = ("aliases", "rng", "device_only", "writes_input")


def _check_profile_stage(stage: dict, where: str) -> None:
    """Raise ``ValueError`` naming the field of a profile stage that is not what the format says: the
    required times and sizes finite numbers (times >= -TIME_NOISE_MS and at most MAX_TIME_MS, sizes >= 0
    and at most MAX_BYTES; ``bwd_peak`` may be null, and negative in the bundled profiles, read as 0),
    the optional sizes whole bytes, the flags true or false."""
    for key in TIME_FIELDS + ("x", "x_nbytes", "xbar", "fwd_peak_nograd", "fwd_peak_grad", "bwd_peak"):
        value = stage[key]
        if key == "bwd_peak" and value is None:
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{where}: {key} = {value!r} is not a finite number")
        if key in TIME_FIELDS:
            if value < -TIME_NOISE_MS:
                raise ValueError(f"{where}: {key} = {value} ms is negative")
            if value > MAX_TIME_MS:
                raise ValueError(f"{where}: {key} = {value} ms is more than {MAX_TIME_MS:.0e} ms: times are in ms")
        elif key != "bwd_peak" and value < 0:
            raise ValueError(f"{where}: {key} = {value} bytes is negative")
        elif abs(value) > MAX_BYTES:  # bwd_peak, which may be negative, beyond -2^50 too
            beyond = "less than -2^50" if value < 0 else "more than 2^50 (1 PiB)"
            raise ValueError(f"{where}: {key} = {value} bytes is {beyond}: sizes are in bytes")
        elif not float(value).is_integer():
            raise ValueError(f"{where}: {key} = {value!r} is not a whole number of bytes")
    for key, (least, nullable) in _OPTIONAL_STAGE_BYTES.items():
        value = stage.get(key)
        if key not in stage or (value is None and nullable):
            continue
        if not _whole(value) or not least <= value <= MAX_BYTES:
            raise ValueError(f"{where}: {key} = {value!r} is not a whole number of bytes between "
                             f"{'-2^50' if least < 0 else least} and 2^50; "
                             f"re-profile, or drop the field")
    for key in _STAGE_FLAGS:
        if key in stage and not isinstance(stage[key], (bool, np.bool_)):
            raise ValueError(f"{where}: {key} = {stage[key]!r} must be true or false; re-profile, or drop the field")


def _valid_held_from(value, number: int) -> bool:
    """Whether ``value`` is a ``held_from`` of measured stage ``number``: [stage, bytes] pairs of whole
    numbers, each stage 0..number (Note [Outputs passed through])."""
    return isinstance(value, list) and all(
        isinstance(pair, list) and len(pair) == 2 and _whole(pair[0]) and _whole(pair[1])
        and 0 <= pair[0] <= number and pair[1] >= 0 for pair in value)


def clones_input(first: dict) -> bool:
    """Whether the executor clones the chain's input before stage 1 (profile entry ``first``): when
    stage 1's output aliases its input (in place, a view), so that it never writes the caller's
    tensor. The clone is then stage 1's to count (:func:`_with_input_clone`)."""
    return bool(first.get("aliases") or first["x"] == 0)


def _with_input_clone(stages: list[dict], input_bytes: int, granule: int) -> list[dict]:
    """The profile's stages as the executor runs them when it clones the input (:func:`clones_input`):
    stage 1 makes the clone (the profiler measured it on a tensor it had cloned itself, outside the
    stage), so the clone counts in its output and tape and under its forward peaks, and the storages
    a later output passes on from the input were made by stage 1 (``held_from``). Without this, the
    clone held as a_1 was counted nowhere: plans went over the budget by the input's size."""
    whole = allocator_bytes(input_bytes, granule)  # every tensor of the input is cloned
    first = stages[0]
    held = (sum(int(b) for origin, b in first["held_from"] if int(origin) == 0) if "held_from" in first
            else whole)  # what of the clone the output keeps
    out = [dict(first, x=int(first["x"]) + held, xbar=int(first["xbar"]) + held,
                fwd_peak_nograd=int(first["fwd_peak_nograd"]) + max(held, whole),
                fwd_peak_grad=int(first["fwd_peak_grad"]) + max(held, whole))] + stages[1:]
    # Note [Storages a stage drops]: what a stage saved of the clone is stage 1's; where a stage drops the clone,
    # it is not said (the profile never records the caller's input as dropped): counted held, as before
    return [dict(st, **{key: [[1 if int(o) == 0 else int(o), int(b)] for o, b in st[key]]
                        for key in ("held_from", "out_saved_from") if key in st}) for st in out]


# Note [Tensors no backward saves]
#     The tensor a_s between two stages may be saved by neither stage's backward: a residual block's sum read
#     next by a dropout (which saves its mask) or a bias addition (which saves nothing), logits that
#     ``cross_entropy`` consumes. In a run of recorded stages autograd frees it once stage s + 1 has run, but
#     the model counts it in stage s's tape until stage s's backward (bwd_tape_bytes releases it only there).
#     By default the two stages are merged (:func:`_output_unsaved`): the merged stage's costs are composed
#     exactly, and the boundary is no checkpoint. That is free where nobody would cut there (a head and its
#     loss), and ruinous where every block begins so: six residual blocks that begin with a dropout became one
#     stage, and nothing below plain autograd's peak fitted (a review, 2026-11-28:
#     bench/repros/rv7_train_seq_unsaved_boundaries.py). With ``merge_unsaved=False`` the boundaries stay,
#     over-counted in tape runs (safe: a plan's measured peak is at most its prediction). The executor plans
#     both and runs the faster (Note [Two groupings of unsaved boundaries] in torch_exec/executor.py). Exact
#     counting would give a_s back to the sub-problem once stage s + 1 is recorded, which holds where a_s is a
#     checkpoint or the end of a tape segment that stage s + 1 extends, not where a segment's output stays the
#     root of its own backward: an executor change and a DP rule not made yet.
#     With a tuple a_s the question is asked storage by storage (Note [Storages a stage drops]).


# Note [Storages a stage drops]
#     Most boundaries of an encoder-decoder captured by torch.export are tuples (Note [Values read late] in
#     torch_exec/auto.py), and their members fare differently: T5's first stage returns (dropout, pow_1); the next
#     reads mean(pow_1), drops pow_1 (saved by no backward: autograd frees it once that stage has run) and passes
#     dropout on, which ``pow`` saved. ``out_saved_bytes`` and ``in_saved_bytes`` are sums over every storage of
#     the output and the input, the storages passed through included, so the rule above (both 0) never fired on
#     such boundaries, and the sums compared storages a stage made with storages it only passed on: a linear that
#     saved a passed-through layer norm made ``bwd_tape_bytes`` keep a projection nothing saved (a review,
#     2026-11-28: bench/repros/rv11_hf_encdec_tuple_state_overcount.py, rv11_hf_diagnosis.md). The profiler
#     (``note_storages`` in torch_exec/profiler.py) also records, by the measured stage that made each storage
#     (as ``held_from``):
#     - ``out_saved_from``: the storages of the output the stage's own backward saved;
#     - ``in_dropped_from``: the storages of the input the stage neither passes on nor saves, and that no backward
#       before it saved (never the chain's input, which the caller holds): in a recorded run of stages autograd
#       frees them once the stage has run.
#     From them:
#     - :func:`_output_unsaved` also merges a boundary where every storage the group made that its output holds is
#       one the next stage drops unsaved (what else the tuple holds, passed on, is held by the group's input);
#     - :func:`_merge_group` frees, once member m + 1 has run, the storages made by members up to m that member
#       m + 1 drops (``freed``), instead of member m's ``x`` less two sums of different storages;
#     - ``bwd_tape_bytes`` keeps of the output only what the group made and a member's backward saved (summed
#       over the members: more than once where two saved it, never less).
#     Each is exact or above what runs. A storage the next stage drops unsaved where the group made other storages
#     that are saved or passed on (a partial boundary: T5's pow_1 beside dropout) stays in the tape until the
#     stage's backward in a tape run, as before: giving it back to the sub-problem needs the DP rule above. A plan's
#     peak frees it (``dropped_from`` in the provenance; Note [Storage-exact peaks] in gpusolve/exact_peak.py).
#     Profiles without the two fields are read as before.


# Note [Drops seen on one call]
#     Which storages a stage drops, and which no backward saves, is read off one call. A stage written in Python
#     may read a tensor on some calls only (a random route, a branch on the data) and save it there, holding what
#     the profiled call dropped. Planning frees the storages a stage drops that earlier stages made only for
#     stages that run one graph on every call (auto_checkpoint's exported ones: ``static_stages`` in
#     torch_exec/executor.py, Note [Planning to the exact peak] in gpusolve/exact_peak.py). Inside a merged stage
#     (:func:`_merge_group`'s ``freed``) the profiled call's drops are still taken as every call's: two Python
#     stages merged on them went 78 647 B over their budget on the calls that read both tensors (review rv19:
#     bench/repros/rv19_diff_fused_member_drop_data_dependent.py, which exits 1). Counting them held instead
#     (``free_drops=False``) costs every Python model whose merged stages drop large tensors, also those that never
#     vary (a Linear's output that a Tanh reads and nothing saves): of the fidelity models (``python
#     bench/drops_one_call.py``, bench/results/drops_one_call_cpu.md) a GPT-style model's least budget rose from 33.7 %
#     to 44.4 % of plain autograd's peak, and six Linear-Tanh layers counted their store-all peak at 1.875 x plain
#     autograd's (1.125 x). So the default stays, and the excess is documented (docs/pytorch.md, "Predicted =
#     measured") beside the other two a profile cannot see.


def _output_unsaved(group: list[dict], stage: dict, first: int = 1) -> bool:
    """Note [Tensors no backward saves]: whether the tensor between ``group`` (its first member measured
    stage ``first``) and the next ``stage`` is saved by no backward (known only from profiles that record
    ``out_saved_bytes`` and ``in_saved_bytes``: ours). Then it is freed once ``stage`` has run in a
    recorded run of stages, so the boundary would be counted as held where it is not: ``stage`` joins
    the group. Where the profile records storage by storage (Note [Storages a stage drops]), also when
    every storage the group made that its output holds is one ``stage`` drops and no backward saved (a
    tuple whose other members, passed on, were saved: the sums above count them too)."""
    numbers = range(first, first + len(group))
    if "in_dropped_from" in stage and "held_from" in group[-1]:
        own = _made_by(group[-1], numbers)
        if own > 0 and _dropped(stage, numbers) >= own:
            return True
    saved = _output_saved_bytes(group)
    return (saved == 0 and "in_saved_bytes" in stage and int(stage["in_saved_bytes"]) == 0
            and int(group[_producer(group)]["x"]) > 0)


def _producer(group: list[dict]) -> int:
    """Index of the member whose new storage holds the group's output (members after it alias it)."""
    for m in range(len(group) - 1, -1, -1):
        if int(group[m]["x"]) > 0:
            return m
    return 0


def _output_saved_bytes(group: list[dict]) -> int | None:
    """Bytes of the group's output that the backward of the member making it, or of a member aliasing
    it after, saved; None when the profile does not say (no ``out_saved_bytes``)."""
    tail = group[_producer(group):]
    if not all("out_saved_bytes" in st for st in tail):
        return None
    return max(int(st["out_saved_bytes"]) for st in tail)


def _held_from(stage: dict, numbers: range) -> list[tuple[int, int]]:
    """(maker, bytes) of the storages of ``stage``'s output that the measured stages ``numbers`` made (the
    profile's ``held_from``; none without it). Note [Outputs passed through]."""
    return [(int(origin), int(nbytes)) for origin, nbytes in stage.get("held_from", ()) if int(origin) in numbers]


def _by_group(pairs, group_of: dict[int, int]) -> list[list[int]]:
    """``(measured maker stage, bytes)`` pairs summed by the maker's stage of the chain (1-based), ascending."""
    out: dict[int, int] = {}
    for origin, nbytes in pairs:
        out[group_of[origin] + 1] = out.get(group_of[origin] + 1, 0) + int(nbytes)
    return [[s, nbytes] for s, nbytes in sorted(out.items()) if nbytes]


def _made_by(stage: dict, numbers: range) -> int:
    """Bytes of ``stage``'s output held in storages that the measured stages ``numbers`` made."""
    return sum(nbytes for _, nbytes in _held_from(stage, numbers))


def _dropped(stage: dict, numbers: range) -> int:
    """Bytes of ``stage``'s input in storages the measured stages ``numbers`` made that ``stage`` neither
    passes on nor saves, and that no backward before it saved (the profile's ``in_dropped_from``; none
    without it): Note [Storages a stage drops]."""
    return sum(int(nbytes) for origin, nbytes in stage.get("in_dropped_from", ()) if int(origin) in numbers)


def _saved_own(group: list[dict], first: int) -> int | None:
    """Bytes of the storages the members of ``group`` (the first measured stage ``first``) made that a member's
    backward saved and that member's output holds (the profile's ``out_saved_from``), summed over the members
    (a storage two members saved counts twice: more, never less); None when a member's profile does not say.
    Note [Storages a stage drops]."""
    if not all("out_saved_from" in st for st in group):
        return None
    numbers = range(first, first + len(group))
    return sum(int(nbytes) for st in group for origin, nbytes in st["out_saved_from"] if int(origin) in numbers)


def _shared_leaves(data: dict, source, group_of: dict[int, int], granule: int) -> list[dict] | None:
    """The profile's ``shared_leaves`` (Note [Leaves several stages read] in torch_exec/profiler.py) over
    the merged stages, 1-based: a leaf whose readers all merged into one stage is that stage's alone.
    None where the profile does not record them."""
    recorded = data.get("shared_leaves")
    if recorded is None:
        return None
    out = []
    for item in recorded:
        try:
            stages = sorted({group_of[int(s)] + 1 for s in item["stages"]})
            nbytes, summed = int(item["nbytes"]), item["summed"]
            reads = item.get("reads", [1] * len(item["stages"]))
            fresh = item.get("fresh_reads", [0] * len(reads))
            if nbytes < 0 or not isinstance(summed, bool) or not len(reads) == len(fresh) == len(item["stages"]) \
                    or not all(_whole(k) and k >= 1 and _whole(f) and 0 <= f <= k for k, f in zip(reads, fresh)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{source}: shared_leaves entry {item!r} is not {{'stages': [profiled stage numbers], "
                             f"'nbytes': bytes >= 0, 'summed': true/false, optionally 'reads': [reads >= 1 per "
                             f"stage] and 'fresh_reads': [0 <= fresh <= reads per stage]}}; re-profile, or drop the "
                             f"field") from None
        if len(stages) > 1:
            out.append({"stages": stages, "nbytes": allocator_bytes(nbytes, granule), "summed": summed})
    return out


# Note [A leaf read twice in one stage]
#     Note [Shared leaves split tape runs] (torch_exec/executor.py) splits the executor's backward calls between the
#     stages that read one leaf (a tied weight), so that no call sums their gradients in a buffer no reading counts.
#     A fused stage whose members read it twice, or a measured stage that reads it twice itself, is still one
#     backward call: the engine holds the first part in a buffer of the leaf's size until the next arrives, and adds
#     them; where that first part is one autograd cannot add into in place (a view, such as the transpose a Linear's
#     weight gradient is; a tensor also passed on elsewhere: the engine's ``can_accumulate_inplace``, asked of the
#     buffer only) the next makes their sum beside both (seen on the CPU: three of the leaf's size at once; two where
#     the first to arrive is a tensor of its own, ``t @ weight``'s, whatever the second is). One Linear shared by
#     every weighted stage, a pair merged by a stage reading it (``tanh(fc(a + b))`` fused with the fork before it,
#     ``tanh(fc(a) + fc(b))``): 12 032-16 384 B over the budget where readings missed it (a review, 2026-11-29:
#     bench/repros/rv16_review_tied_linear_fused_pair_over_budget.py).
#     A measured stage's readings are its own call's where the profile was taken stage by stage (``isolated``), or
#     where the whole pass summed the shared leaves' parts stage by stage (``split_leaves``: Note [Leaves summed
#     stage by stage] in torch_exec/profiler.py). Then only a fused stage whose members read the leaf is charged:
#     each member hands the call one part (its own sum, which autograd can add into, where it read the leaf twice),
#     the first held while the next member's backward runs. The profile's ``shared_leaves`` count per stage the
#     ``reads`` (the edges into the leaf's AccumulateGrad node) and the ``fresh_reads``, those whose part autograd
#     can add into in place (a post hook on the node each edge leaves: ``_adds_in_place`` in torch_exec/_util.py; a
#     custom Function's part never counts). Where every member has ``bwd_delta``, the fused stage is composed member
#     by member (:func:`_fused_readers`): the first reading member's part raises the level from its end to the last
#     reading member's, and where it is one autograd cannot add into, the next reading member's peak rises by their
#     sum; exact where two dropout-first blocks tied to one weight are fused (tests/test_unsaved_boundaries.py:
#     charged two leaves at the fused stage's peak, 65 536 B more, the fused grouping no longer fitted the budget it
#     fits). Elsewhere a bound: one leaf where every part the call sums can be added into, two otherwise (any of them
#     may arrive first; no ``fresh_reads``: none can).
#     An older whole-step profile summed every reader's parts in the buffer a later reader made: a stage reading the
#     leaf at least twice (members' reads summed) before a later reader is charged so too, each read a part; where
#     no later stage reads it, the buffer is made inside the stage's own readings, which count it. That bound was
#     loose: tiny ALBERT's fused blocks (max_stages=3, each reading every shared weight 3-4 times) sum their parts
#     before the backward reaches the embedding, where the stage peaks, and the least budget came out 1.21 x the
#     measured peak (bench/repros/rv16_review_albert_fused_blocks_overcount.py); summed stage by stage it is exact.


def _own_calls(data: dict) -> bool:
    """Whether each measured stage's readings are its own backward call's: profiled stage by stage, or with the
    shared leaves summed stage by stage (Note [Leaves summed stage by stage] in torch_exec/profiler.py)."""
    return data.get("isolated") is True or data.get("split_leaves") is True


def _effective_parts(item: dict) -> dict[int, tuple[int, int, bool]]:
    """Per measured stage reading a shared leaf (``item`` of the profile's ``shared_leaves``): (its reads, how many of
    their parts autograd can add into, whether the one part its own call leaves, its sum where it read the leaf
    twice, is one it can add into). Without ``reads``, one per stage; without ``fresh_reads``, none in place."""
    reads = item.get("reads") or [1] * len(item["stages"])
    fresh = item.get("fresh_reads") or [0] * len(item["stages"])
    return {int(s): (int(k), int(f), int(k) > 1 or int(f) == 1)
            for s, k, f in zip(item["stages"], reads, fresh, strict=False)}


def _fused_readers(data: dict, groups: list[list[dict]], group_of: dict[int, int],
                   granule: int) -> tuple[dict, set]:
    """Note [A leaf read twice in one stage], where each measured stage's readings are its own call's
    (:func:`_own_calls`): a chain stage fusing members that read one shared leaf runs them in one backward call,
    which holds the first member's part (its sum) from the end of that member's backward to the end of the last
    reading member's, and where that part is one autograd cannot add into, makes their sum beside both as the next
    reading member's part arrives. Composed member by member where every member has ``bwd_delta`` (the held part
    raises the level of the members in between; the sum, the next reader's peak; ``group_of``: measured stage
    number -> its chain stage): ``({measured stage: [bwd_peak added, bwd_delta added]}, {(leaf index, chain stage)})``,
    the second what :func:`_summed_in_a_stage` leaves."""
    adjust: dict[int, list[int]] = {}
    composed: set = set()
    if not _own_calls(data) or not data.get("shared_leaves"):
        return adjust, composed
    starts = list(itertools.accumulate([1] + [len(group) for group in groups[:-1]]))  # each's first member
    for index, item in enumerate(data["shared_leaves"]):
        parts = _effective_parts(item)
        leaf = allocator_bytes(int(item["nbytes"]), granule)
        for g in {group_of[s] for s in parts}:
            readers = sorted((s for s in parts if group_of[s] == g), reverse=True)  # in the backward's order
            members = groups[g]
            if len(readers) < 2 or not all(st.get("bwd_delta") is not None and st["bwd_peak"] is not None
                                           for st in members):
                continue
            composed.add((index, g))
            for s in range(starts[g], starts[g] + len(members)):
                adjust.setdefault(s, [0, 0])
            adjust[readers[0]][1] += leaf   # its part stays in the buffer
            if not parts[readers[0]][2]:    # a part autograd cannot add into: the next one's makes their sum
                adjust[readers[1]][0] += leaf
            adjust[readers[-1]][1] -= leaf  # AccumulateGrad takes the buffer at the last reader's end
    return {s: a for s, a in adjust.items() if a != [0, 0]}, composed


def _summed_in_a_stage(data: dict, group_of: dict[int, int], n: int, granule: int,
                       composed: set = frozenset()) -> list[int]:
    """Bytes per chain stage (0-based, ``n`` of them) of the leaves whose parts it sums in one backward call that
    its readings did not: Note [A leaf read twice in one stage], from the profile's ``shared_leaves`` (already
    checked by :func:`_shared_leaves`), but for the ``(leaf index, chain stage)`` pairs :func:`_fused_readers`
    composed. One leaf where autograd adds every part in place, two where one may arrive first that it cannot add
    into (a view, a tensor passed on)."""
    out = [0] * n
    own_calls = _own_calls(data)
    for index, item in enumerate(data.get("shared_leaves") or ()):
        parts: dict[int, list[int]] = {}  # chain stage -> [parts summed in its call, of them not added into in place]
        for s, (k, f, own) in _effective_parts(item).items():
            if own_calls:  # a measured stage's own reads were summed inside its readings: it hands its fused stage's
                k, f = 1, int(own)  # call one part
            held = parts.setdefault(group_of[s], [0, 0])
            held[0] += k
            held[1] += k - f
        last = max(group_of[int(s)] for s in item["stages"])
        for g, (k, fixed) in parts.items():
            if k >= 2 and (own_calls or g < last) and (index, g) not in composed:  # the first part held; their
                # sum beside both where the first to arrive (any, for all we know) cannot be added into
                out[g] += (2 if fixed else 1) * allocator_bytes(int(item["nbytes"]), granule)
    return out


# Note [Gradients that are views]
#     The gradient of a_s that a later stage's backward hands over may be a view of a larger buffer: a
#     ``cat``'s backward returns slices of the gradient of its output, not copies. When a stage passes a
#     tensor on unchanged to a later ``cat`` (an inception block's branch beside an auxiliary head, a
#     U-Net's skip), the slice that is its gradient keeps the whole buffer allocated, through the
#     backwards of the stages that pass it on, until the stage that made the tensor consumes it. The
#     readings are right (each stage's backward peak is measured above its start, that buffer included,
#     and the stage that frees it reads the freeing as its own), but a gradient counted by the sizes of
#     a_s's tensors held only the slice: the model's level at those stages' starts was short of the rest
#     of the buffer, and GoogLeNet with its auxiliary heads (torchvision, batch 2) measured 22 272 B over
#     its least budget (the five-stage model of tests/test_grad_views.py: 130 944 B, 13 %). The profiler
#     records ``grad_held_bytes``, the storages behind the gradients of a_s as the engine hands them over
#     (hooks on every tensor of a_s in the memory pass; the seeds of the stage in a stage-by-stage pass),
#     and the gradient of a_s (grad_bytes) counts at least that, from the end of the backward of stage
#     s + 1 to the end of stage s's. Stage s's reading is above its start, where the buffer is held: its
#     bwd_extra stays, and its peak in the model rises to the one measured. Stage s + 1's reading made the
#     buffer: its bwd_extra is its peak less the gradient of its input, now the larger one, so its peak in
#     the model stays. Exact inside a tape run and in plain autograd; where the executor ends a backward
#     call at a_s it copies such a view out (``take_grads``) and the buffer goes: the model then
#     over-counts, which is safe.


# Note [Gradients ready one by one]
#     A stage's backward is measured from the moment the first gradient of its output a_s is ready to the moment
#     the last gradient of its input is (``_Boundaries`` in torch_exec/profiler.py). Where a_s is a tuple, the
#     engine may run part of stage s's backward before another gradient of a_s is ready, and that part is also in
#     stage s + 1's span, which ends only at the last. Seen on tuples of views of one storage (``y, y[:n]``): the
#     gradient of the slice is ready first, its slice's backward (stage s's) makes a buffer of y's size, and only
#     then is y's own gradient complete. Two readings were short there (a review, 2026-11-29: the two models of
#     bench/repros/rv15_review_view_tuple_boundaries_over_budget.py measured 131 072 B and 65 536 B over their least
#     budgets, and 3 of 156 runs of ``bench/tuple_fuzz.py --view-tuples`` went over):
#     - The profiler holds what stage s + 1 saved of a_s until the last gradient of a_s is ready (Note [Inputs held
#       through a backward] there), so stage s began with it held and read its freeing, before its own peak, as its
#       own: its peak 65 536 B low. Where that freeing falls inside stage s's span, stage s is now read from a start
#       without it (the level before the freeing less what it freed), as the model starts stage s.
#     - Composing a fused stage's members from ``bwd_delta`` alone put member s's start where member s + 1's span
#       ended (the last gradient of a_s), not where its own began. The profile records ``grad_ready_delta``, the
#       change of allocated bytes from the first gradient of a_s ready to the last, and :func:`_merge_group` takes
#       it off the level before each member but the last (whose start is the group's own). The composition then
#       telescopes exactly: level at member m's start = level at member m + 1's start + its ``bwd_delta`` - member
#       m's ``grad_ready_delta``. Absent (older profiles; stage-by-stage profiling, where a stage's seeds are all
#       there when it starts): 0.
#     Both only raise a stage's reading, or place a member's where it was measured.


def _merge_group(group: list[dict], grad_in: int, notes: list[str], granule: int = ALLOCATOR_GRANULE,
                 first: int = 1, free_drops: bool = True) -> dict:
    """Costs of one executor stage made of several measured stages run back to back.

    Members are a base stage, the aliasing stages after it, and stages joined because the tensor
    before them is saved by no backward (:func:`_output_unsaved`); ``first`` is the first member's
    number among the measured stages. ``grad_in`` is the gradient size
    of the group's input. The forward peaks compose exactly: each member's measured peak sits on
    what the members before it left allocated, and a member's output is freed once the next member
    has run when neither saved it, the next does not alias it and does not pass it on in its own
    output (Note [Outputs passed through]). The backward runs the members
    last to first: when every member has ``bwd_delta`` (the change of allocated bytes over its
    backward; our profiler records it), the group's backward peak above its start is composed
    exactly, each member's peak offset by what the members before it in the backward left (freed
    saved tensors included). Otherwise the bound takes the worst member (its output gradient plus
    its measured peak), which can only over-estimate.
    """
    times = {key: sum(max(0.0, float(st[key])) for st in group) for key in TIME_FIELDS}
    freed = [0] * len(group)  # bytes of member m's output freed once member m + 1 has run
    for m in range(len(group) - 1 if free_drops else 0):  # Note [Drops seen on one call]
        nxt = group[m + 1]
        if "in_dropped_from" in nxt:  # storage by storage (Note [Storages a stage drops])
            freed[m] = _dropped(nxt, range(first, first + m + 1))
        elif int(nxt["x"]) > 0 and "out_saved_bytes" in group[m] and "in_saved_bytes" in nxt:
            saved = int(group[m]["out_saved_bytes"]) + int(nxt["in_saved_bytes"])
            passed = _made_by(nxt, range(first + m, first + m + 1))  # member m's storages in nxt's output
            freed[m] = max(0, int(group[m]["x"]) - saved - passed)
    current = 0  # bytes of the state inside the group in a no-grad pass (the group's input is outside)
    held_grad = 0
    peak_nograd = peak_grad = peak_bwd = 0
    for m, st in enumerate(group):
        peak_nograd = max(peak_nograd, current + int(st["fwd_peak_nograd"]))
        if int(st["x"]) > 0:
            # the input is no longer referenced, except storages earlier members made that it passes on
            current = int(st["x"]) + _made_by(st, range(first, first + m))
        if m >= 2:
            held_grad -= freed[m - 2]  # member m - 1 has run: the output before it is gone
        peak_grad = max(peak_grad, held_grad + int(st["fwd_peak_grad"]))
        held_grad += int(st["xbar"])
        member_grad = int(st["x"]) or allocator_bytes(int(st["x_nbytes"]), granule)
        if st["bwd_peak"] is None:
            notes.append(f"{st['name']}: bwd_peak missing, assumed equal to its tape")
            member_peak = int(st["xbar"]) + grad_in
        else:
            member_peak = max(0, int(st["bwd_peak"]))
        peak_bwd = max(peak_bwd, member_grad + member_peak)
    if len(group) >= 2:
        held_grad -= freed[len(group) - 2]  # the last member has run: the output before it is gone
    # Storages made before the group that its output passes on (Note [Outputs passed through]): a
    # checkpoint of the output holds them; its tape does not need them (the group's input holds them
    # while the tape lives).
    before = _made_by(group[-1], range(1, first))
    # What the group made that its output holds: by storage where the profile says (an alias member
    # may drop from the output what the member before it returned), else the last producer's state.
    own = _made_by(group[-1], range(first, first + len(group))) if "held_from" in group[-1] else current
    act = max(own, current) + before  # a checkpoint: the larger reading (a stage may leave more allocated)
    tape = held_grad
    last_nbytes = int(group[-1]["x_nbytes"])
    grad_out = act if 0 < last_nbytes <= act else allocator_bytes(last_nbytes, granule)
    bwd_extra = max(0, peak_bwd - grad_out - grad_in)
    if all(st.get("bwd_delta") is not None and st["bwd_peak"] is not None for st in group):
        level = above = 0  # bytes above the group's start (its tape and output gradient held)
        for k, st in enumerate(reversed(group)):
            if k:  # the member starts as its output's first gradient is ready (Note [Gradients ready one by one])
                level -= int(st.get("grad_ready_delta") or 0)
            above = max(above, level + max(0, int(st["bwd_peak"])))
            level += int(st["bwd_delta"])
        bwd_extra = max(0, above - grad_in)
    # held from the start of the backward, which its readings are above: bwd_extra stays as it is
    grad_out = max(grad_out, int(group[-1].get("grad_held_bytes", 0)))  # Note [Gradients that are views]
    # The group's output is released before its backward unless a member's backward saved it
    # (profiles that do not say so keep it: the tape stays whole). The storages earlier members made
    # and the output passes on were saved by no backward: a member is joined to the one before only
    # where that one's output is unsaved (_output_unsaved).
    saved = _output_saved_bytes(group)
    if "held_from" in group[-1] and _saved_own(group, first) is not None:
        saved = _saved_own(group, first)  # only what the group made (Note [Storages a stage drops])
    bwd_tape = tape if saved is None else tape - own + min(own, saved)
    return dict(times, act_bytes=act, grad_bytes=grad_out, tape_bytes=tape,
                fwd_nograd_extra=max(0, peak_nograd - act), fwd_grad_extra=max(0, peak_grad - tape),
                bwd_extra=bwd_extra, bwd_tape_bytes=min(tape, max(0, bwd_tape)), made_bytes=own)
