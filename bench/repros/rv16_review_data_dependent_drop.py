"""Review rv16 of Note [Drops measured] (torch_exec/profiler.py, commit 9405ab7), deterministic variant of
rv16_review_random_route_drop.py: stage Gate reads p (the 3a of the stage before it) only where its batch asks for it
(data-dependent control flow: here, where the mean of a is above a threshold; MoE routing, `if mask.any()` branches),
else it reads a again and drops p. The first call (profiled) gets a batch that drops p, so the profile checks the drop
once and says drops_checked; later batches that read p keep it saved through Gate's backward: 131 072 B over the
budget and the prediction where planning freed the drop. CPU. Exits 1 on a step over its budget or over the peak
planning used (> 64 B). Run: GS_ROOT=<tree> python rv16_review_data_dependent_drop.py

Since (session 16): the drops are freed in planning only for stages that run one graph on every call
(auto_checkpoint's exported ones: CheckpointedSequential.static_stages); these Python stages count them held,
and every step holds its budget: exits 0. Each budget is also planned with static_stages = True, for
contrast: those plans go over (printed, not counted).
"""
import sys

from _drops import B, W, Keep, Lin, Loss, Make, Merge, check, torch
from torch import nn  # noqa: E402

THRESH = [0.0]  # set by batches(): the median over 40 batches of a's mean


class Gate(Lin):      # (a, p) -> (tanh(fc(a) + src * scale), a); src = p where the batch asks, else a (p dropped)
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, q):
        src = q[1] if bool(q[0].mean() > THRESH[0]) else q[0]
        return torch.tanh(self.fc(q[0]) + src * self.scale), q[0]


def make():
    torch.manual_seed(0)
    return nn.Sequential(Lin(), Make(), Gate(), Keep(), Merge(), Lin(), Loss())


def batches():
    """(a batch whose Gate drops p, one whose Gate reads it), the threshold set between them."""
    m, xs = make(), [torch.randn(B, W, generator=torch.Generator().manual_seed(seed)) for seed in range(40)]
    with torch.no_grad():
        means = [float(m[1](m[0](x))[0].mean()) for x in xs]
    THRESH[0] = sorted(means)[len(means) // 2]
    return xs[min(range(40), key=lambda i: means[i])], xs[max(range(40), key=lambda i: means[i])]


def main() -> int:
    x_drop, x_read = batches()
    bad = check(make, x_drop, [x_drop, x_read, x_drop, x_read], (0.8, 0.9))
    print("BUG: a step over its budget: the profiled batch dropped p, a later batch's Gate saves it" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
