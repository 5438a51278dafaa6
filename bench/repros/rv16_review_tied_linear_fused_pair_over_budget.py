"""Shared (tied) Linear + a stage that concatenates a pair along rows then applies the shared Linear: the measured step
exceeds the budget and the plan's predicted peak (CPU, batch 16, width 64). Exit 1 on the bug. Model: Lin
(tanh(fc(t))), Fork ((fc(t), t)), CatRows (tanh(fc(cat([a, b], 0)))) or AddFc (tanh(fc(a + b))), Lin, Loss; one
nn.Linear shared by the four weighted stages (as bench/tuple_fuzz.py --tied does). Review rv16 (2026-11-29), older
than that session's changes (the same on 0a55710). Open: the fused stage "1+2" (Fork and AddFc joined: no backward
saves the pair between them) reads the shared weight twice, and its one backward call sums both reads in a buffer of
the weight's size that no member's reading counts; the shared-leaf breaks split segments only between executor stages
(Note [Shared leaves split tape runs] in torch_exec/executor.py). Fixed in session 16 (Note [A leaf read twice in one
stage] in gpusolve/chain.py): such a stage is charged the buffer; exits 0 (1 on 0a55710: +12 032 to +16 384 B)."""
import sys
import warnings

from _drops import least_and_plain, planned  # the repros' loop
from _setup import torch  # the tree under test: GS_ROOT
from torch import nn

W, B = 64, 16


class Lin(nn.Module):
    def __init__(self, fc):
        super().__init__(); self.fc = fc

    def forward(self, t):
        return torch.tanh(self.fc(t))


class Fork(Lin):
    def forward(self, t):
        return self.fc(t), t


class CatRows(Lin):
    def forward(self, p):
        return torch.tanh(self.fc(torch.cat(list(p), 0)))


class AddFc(Lin):
    def forward(self, p):
        return torch.tanh(self.fc(p[0] + p[1]))


class ForkFree(Lin):      # no parameter: (3t, t)
    def forward(self, t):
        return t * 3.0, t


class StackFc(Lin):       # reads the shared Linear twice in one stage
    def forward(self, p):
        return torch.tanh(self.fc(p[0]) + self.fc(p[1]))


class Loss(nn.Module):
    def forward(self, t):
        return t.square().mean()


MERGE = CatRows


def make():
    torch.manual_seed(0)
    fc = nn.Linear(W, W)
    return nn.Sequential(Lin(fc), (ForkFree if MERGE is StackFc else Fork)(fc), MERGE(fc), Lin(fc), Loss())


def main() -> int:
    global MERGE
    bad = 0
    for MERGE in (CatRows, AddFc, StackFc):
        fork = "ForkFree" if MERGE is StackFc else "Fork"
        print(f"model Lin, {fork}, {MERGE.__name__}, Lin, Loss (one shared nn.Linear)")
        bad += one()
    return 1 if bad else 0


def one() -> int:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    x = torch.randn(B, W, generator=torch.Generator().manual_seed(0))
    lo, hi, _ = least_and_plain(make, x)
    print(f"least budget {lo} B, plain autograd {hi} B")
    bad = 0
    for f in (0.0, 0.25, 0.5):
        budget = int(lo + f * (hi - lo))
        w, (peak,) = planned(make, x, [x], budget=budget)
        over = peak > budget or peak > w.plan.predicted_peak_bytes
        bad += over
        print(f"budget {budget} predicted {w.plan.predicted_peak_bytes} measured {peak} "
              f"(measured - budget {peak - budget:+d}){'  OVER' if over else ''}; "
              f"{' '.join(map(str, w.plan.schedule))}")
    print("BUG" if bad else "ok")
    return bad


if __name__ == "__main__":
    sys.exit(main())
