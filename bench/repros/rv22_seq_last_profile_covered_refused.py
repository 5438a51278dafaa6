"""rv22: ``last_profile`` of a signature planned on a larger one's profile is refused by ``prepare(profile=...)`` for
that very input.

Setup: CheckpointedSequential(budget="45%", backend="cpu", profile_passes=1, profile_warmup=0) over 6 x (Linear 32 ->
64, tanh, Linear 64 -> 32); a step on an 8 x 16 x 32 batch (profiled), a step on a 6 x 12 x 32 batch (planned on the
first one's profile: Note [Sizes that vary between calls]); ``p = w.last_profile``, then a new wrapper over a copy of
the stages ``prepare(x_6x12, profile=p)``, as the ``last_profile`` docstring says (save it "for prepare
(profile=) on another process").

Observed (CPU, torch 2.13): s22_rev (f537eb3): ``last_profile`` holds input shapes [[8, 16, 32]] for the 6 x 12 x 32
call, and prepare raises ValueError "the profile was taken on input shapes [[8, 16, 32]], here they are [[6, 12,
32]]; profile these stages on this input (drop profile=), or load the profile taken on them" (no profile of these
sizes was ever taken); the first wrapper ran that very plan.

Cause: torch_exec/executor.py ``_PlannedModule._build_covered`` builds the covered entry on the cover's profile
dict (``last_profile`` returns it, rightly: the plan was made from it), while ``prepare(profile=...)``'s
``_check_profile_input`` asks for the input shapes to be equal, where the wrapper's own calls accept any covered
sizes (``reuse_within``).

Expected: ``prepare`` accepts a profile whose input sizes cover the sample's within ``reuse_within`` (planned as a
call would be, with the covered note), or ``last_profile``'s docstring and the Note say that a covered signature's
profile is the larger one's, to be given with that input.  Exits 1 while prepare refuses it.

Run: python bench/repros/rv22_seq_last_profile_covered_refused.py
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy
import sys

from _setup import nn, te, torch

D = 32
torch.manual_seed(0)
net = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(D, 2 * D), nn.Tanh(), nn.Linear(2 * D, D))])
x_big, x_small = torch.randn(8, 16, D), torch.randn(6, 12, D)
opts = dict(budget="45%", backend="cpu", profile_passes=1, profile_warmup=0)
w = te.CheckpointedSequential(copy.deepcopy(net), **opts)
w(x_big).square().mean().backward()
w(x_small).square().mean().backward()
covered = any("planned on the profile" in note for note in w.plan.notes)
p = w.last_profile
print(f"6 x 12 x 32 call {'planned on the 8 x 16 x 32 profile' if covered else 'profiled'}; last_profile input "
      f"shapes {p['args']['input_shapes']}")
w2 = te.CheckpointedSequential(copy.deepcopy(net), **opts)
try:
    w2.prepare(x_small, profile=p)
    print("prepare(x_6x12, profile=last_profile): planned")
    sys.exit(0)
except ValueError as err:
    print(f"prepare(x_6x12, profile=last_profile): ValueError: {err}")
    sys.exit(1)
