"""Review rv16 of Note [Drops measured] (torch_exec/profiler.py, commit 9405ab7): what a stage drops is decided per
call. Stage Route reads p (the 3a of the stage before it) with probability 0.3 (a random draw, as LayerDrop or
stochastic routing draws; torch's RNG, replayed by the executor's recomputation), else reads a again, so its backward
saves p on some steps and drops it on the others. The profile's memory pass drew "drop" in the plain step the check
runs once, so it said drops_checked with p dropped, and planning freed p; on the steps that draw "read p" the
executor's tape holds p through Route's backward: 120 960 B over the prediction. CPU. Exits 1 on a step over its budget
or over the peak planning used (> 64 B). Run: GS_ROOT=<tree> python rv16_review_random_route_drop.py

Since (session 16): the drops are freed in planning only for stages that run one graph on every call
(auto_checkpoint's exported ones: CheckpointedSequential.static_stages); these Python stages count them held,
and every step holds its budget: exits 0. Each budget is also planned with static_stages = True, for
contrast: those plans go over (printed, not counted).
"""
import sys

from _drops import B, W, Keep, Lin, Loss, Make, Merge, check, torch
from torch import nn  # noqa: E402

PROB = 0.3


class Route(Lin):     # (a, p) -> (tanh(fc(a) + src * scale), a); src = p with probability PROB, else a (p dropped)
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, q):
        src = q[1] if bool(torch.rand(()) < PROB) else q[0]
        return torch.tanh(self.fc(q[0]) + src * self.scale), q[0]


def make():
    torch.manual_seed(0)
    return nn.Sequential(Lin(), Make(), Route(), Keep(), Merge(), Lin(), Loss())


def main() -> int:
    x = torch.randn(B, W, generator=torch.Generator().manual_seed(0))
    bad = check(make, x, [x] * 8, (0.8, 0.9))
    print("BUG: a step over its budget: the profile saw Route's p freed once, other steps' Route saves it"
          if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
