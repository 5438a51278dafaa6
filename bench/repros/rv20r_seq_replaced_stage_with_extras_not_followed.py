"""rv20r: a stage replaced in the wrapped Sequential after wrapping still runs the old module when ``modules=`` is
given (the rv20b fix, Note [Stages replaced after wrapping], covers the Sequential without extras only).

Setup: ``seq = nn.Sequential(UsesShared(shared), 5 x (Linear(16, 16), Tanh), Linear(16, 4))`` where
``UsesShared`` calls a Linear it does not register (``shared``, passed as ``modules=[shared]``);
``w = CheckpointedSequential(seq, budget="80%", modules=[shared])``; one step; then transfer learning replaces
the head ``seq[-1] = nn.Linear(16, 4)`` and steps again.  Without ``modules=`` the same replacement is followed.

Observed (CPU): after the replacement the new head's weight.grad is None (the step ran the old head, which no
optimizer built from ``seq.parameters()`` holds any more), silently; the new head is not among
``w.parameters()`` either.  Plain autograd (``seq(x)``) gives the new head a gradient.

Cause: torch_exec/executor.py ``CheckpointedSequential.__init__``: with extras the wrapper does not share the
Sequential's ``_modules`` (``_shares_sequential`` False) but registers its own ``nn.ModuleList(module_stages)``;
``_stage_ids``/``_follow_replaced_stages`` then watch that private ModuleList, which the user never changes, not
the Sequential the user edits.

Expected: the Sequential given is watched whether or not ``modules=`` is (keep a reference to it and compare its
``_modules``), and a replaced stage is followed (a new profile) as without extras; or the replacement refused.
Exits 1 while the new head gets no gradient.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")
torch.manual_seed(0)
shared = nn.Linear(16, 16)


class UsesShared(nn.Module):
    def __init__(s, m):
        super().__init__()
        s.__dict__["m"] = m  # not registered: reached through modules=

    def forward(s, x):
        return torch.tanh(s.m(x)) + x


seq = nn.Sequential(UsesShared(shared), *[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(5)],
                    nn.Linear(16, 4))
w = te.CheckpointedSequential(seq, budget="80%", modules=[shared])
x = torch.randn(8, 16)
w(x).sum().backward()
seq[-1] = nn.Linear(16, 4)  # a new head for a new task
w(x).sum().backward()
got = seq[-1].weight.grad is not None
print(f"the new head got a gradient: {got}; it is among the wrapper's parameters: "
      f"{any(p is seq[-1].weight for p in w.parameters())} (plain autograd: True, True)")
sys.exit(0 if got else 1)
