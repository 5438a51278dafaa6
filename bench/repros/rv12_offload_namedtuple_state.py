"""Stages that pass a namedtuple state (``S(h, aux)``, a tuple subclass) crash CheckpointedSequential with
``TypeError: S.__new__() missing 1 required positional argument`` -- recompute only and offload= alike; and once
the recompute path is mended, an offloading plan still crashes at its first ``prefetch`` (a review of the offload
path on the CPU, 2026-11-28).

Observed (this script: 8 stages of Linear(64) passing ``S = namedtuple("S", "h aux")``, batch 32, CPU):
- ``CheckpointedSequential(model, budget="50%", backend="cpu")``: TypeError in the first call's forward
  (torch_exec/_util.py map_state, called by U.SegmentInput);
- ``offload="inf"`` at the least budget: the same TypeError;
- with map_state building a namedtuple from positional arguments (monkeypatched here, the second part), the
  recompute-only plan runs with gradients equal to plain autograd's, and the offloading plan (swaps > 0) still
  raises the same TypeError from torch_exec/offload.py ``_fill`` (called by StepCopies.prefetch).
Cause: both rebuild a state as ``type(state)(generator)``; a namedtuple's constructor takes its fields as positional
arguments, not one iterable. Plain tuples and lists work, so README's "tuple states" read as if any tuple did.
Expected: a namedtuple state (its type kept) runs like a tuple, gradients bit-equal to plain autograd's, in
recompute-only and offloading plans: build ``type(s)(*items)`` where ``hasattr(s, "_fields")`` in
``_util.map_state`` and ``offload._fill``. Exits 1 while either crashes or the gradients differ."""
import sys
import traceback
from collections import namedtuple

from _setup import nn, te, torch
import torch_exec._util as U

S = namedtuple("S", "h aux")


class First(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, x):
        return S(torch.tanh(self.lin(x)), x[:, :2] * 2)


class Mid(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, st):
        h = torch.tanh(self.lin(st.h)) + st.aux[:, :1]
        return S(h, h[:, :2] * 3)


class Last(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 4)

    def forward(self, st):
        return self.lin(st.h)


def make():
    torch.manual_seed(0)
    return nn.Sequential(First(), *[Mid() for _ in range(6)], Last())


x = torch.randn(32, 64)


def run(offload, label):
    """One step under the plan; returns True where it failed."""
    budget = "50%"
    try:
        if offload is not None:
            probe = te.CheckpointedSequential(make(), budget=None, offload=offload, backend="cpu")
            probe.prepare(x)
            budget = probe.min_budget_bytes
        ref, model = make(), make()
        w = te.CheckpointedSequential(model, budget=budget, offload=offload, backend="cpu")
        ref(x).square().sum().backward()
        w(x).square().sum().backward()
    except TypeError as err:
        where = traceback.extract_tb(err.__traceback__)[-1]
        print(f"{label}: TypeError: {err} (at {where.filename.split('/')[-1]}:{where.name})")
        return True
    diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
    swaps = getattr(w.plan, "swaps", 0)
    print(f"{label}: runs, swaps {swaps}, largest gradient difference to plain autograd {diff:.3g}")
    return diff != 0 or (offload is not None and swaps == 0)


bad = run(None, "recompute only (offload=None, 50%)")
bad |= run("inf", "offload='inf' at the least budget")


def map_state(fn, state):  # what map_state would do for namedtuples: to reach the offload path's own rebuild
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, (tuple, list)):
        items = [fn(t) if isinstance(t, torch.Tensor) else t for t in state]
        return type(state)(*items) if hasattr(state, "_fields") else type(state)(items)
    return state


original = U.map_state
U.map_state = map_state
try:
    bad |= run(None, "with map_state mended: recompute only")
    bad |= run("inf", "with map_state mended: offload='inf' at the least budget")
finally:
    U.map_state = original
print("BUG: namedtuple states crash the executor" if bad else "ok")
sys.exit(1 if bad else 0)
