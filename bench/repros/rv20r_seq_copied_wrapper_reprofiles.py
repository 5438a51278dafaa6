"""rv20r: a deep-copied or torch.load-ed CheckpointedSequential drops its plans and profiles again.

Setup: CheckpointedSequential(nn.Sequential(six Linear+Tanh blocks), budget="80%"), one step (one profile);
then ``copy.deepcopy(wrapper)`` and a ``torch.save``/``torch.load`` round trip of it, one step of each with the
same input shape.

Observed (CPU): the profiler's memory pass ran twice more (once for the copy, once for the loaded wrapper): every
cached entry (profile, plan, learned reserves) was dropped at their first call; at 0ddb3ab it ran 0 times more.
A CheckpointedJoin of two 4-stage branches: 3 memory passes again at its deep copy's step (0 at 0ddb3ab).
A wrapper saved to skip profiling on the next run, or copied for an EMA/teacher model, profiles again.

Cause: torch_exec/executor.py ``CheckpointedSequential._follow_replaced_stages`` compares ``_stage_ids()``
(``id()`` of the registered stage modules) with ``self._registered``, the ids taken at construction; a copy or
an unpickled wrapper has the same modules in the same places but new ids, so every stage reads as "replaced"
and ``self._entries.clear()`` runs (CheckpointedJoin's branches likewise).

Expected: no re-profile when no stage was replaced: keep the registered modules themselves (compare with ``is``;
deepcopy and pickle map them to the copies' modules) or take the ids again in ``__setstate__``/``__deepcopy__``.
Exits 1 while the copy or the loaded wrapper profiles again.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy, io, sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
import torch_exec.profiler as P

calls = {"n": 0}
_orig = P._Passes.memory_pass


def counting(self, *a, **k):
    calls["n"] += 1
    return _orig(self, *a, **k)


P._Passes.memory_pass = counting
warnings.simplefilter("ignore")
torch.manual_seed(0)
w = te.CheckpointedSequential(nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)]),
                              budget="80%")
x = torch.randn(16, 32)
w(x).sum().backward()
first = calls["n"]
copy.deepcopy(w)(x).sum().backward()
after_copy = calls["n"] - first
buf = io.BytesIO()
torch.save(w, buf)
buf.seek(0)
torch.load(buf, weights_only=False)(x).sum().backward()
after_load = calls["n"] - first - after_copy
print(f"profiles: first step {first}, the deep copy's step {after_copy}, the loaded wrapper's step {after_load} "
      f"(expected 1, 0, 0)")


class Head(nn.Module):  # CheckpointedJoin: its branches are CheckpointedSequentials, followed the same way
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(32, 4)

    def forward(s, a, b):
        return s.l(torch.cat([a, b], -1))


def branch():
    return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(4)])


j = te.CheckpointedJoin([branch(), branch()], Head(), budget="80%")
a, b = torch.randn(8, 16), torch.randn(8, 16)
j(a, b).sum().backward()
before = calls["n"]
copy.deepcopy(j)(a, b).sum().backward()
join_copy = calls["n"] - before
print(f"CheckpointedJoin: profiles at the deep copy's step {join_copy} (expected 0)")
sys.exit(1 if after_copy or after_load or join_copy else 0)
