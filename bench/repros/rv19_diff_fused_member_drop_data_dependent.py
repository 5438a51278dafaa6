"""Review rv19 of the session 16-18 diff: the rv16 fix (commit 354f67d; Note [Planning to the exact peak] in
gpusolve/exact_peak.py, Note [Drops measured] in torch_exec/profiler.py) says that checked drops are freed in planning
only for stages that run one graph on every call (``CheckpointedSequential.static_stages``, True only for
auto_checkpoint's exported graphs), because a Python stage that reads a tuple's tensor on some calls only drops it on
the profiled call and saves it on another. That rule is applied in one place only: ``solve_within(...,
free_drops=self.static_stages)`` (torch_exec/executor.py ``_plan_grouping``), which covers the storages a chain stage
drops that EARLIER chain stages made (``dropped_from``). Inside a fused stage, ``Chain.from_profile`` frees them
regardless: ``_merge_group`` (gpusolve/chain.py, ``freed[m] = _dropped(nxt, ...)``) takes what member m + 1 dropped
on the profiled call off the group's tape, and ``_output_unsaved`` fuses the two stages on that same one-call
observation. Here stage Pair returns (2t, 3t), saved by no backward; Gate reads fc(u + v) (drops both) or, where its
batch asks (data-dependent control flow, as rv16_review_data_dependent_drop.py), tanh(fc(u) + v * scale), which saves
u and v. The profiled batch drops both, so Pair and Gate fuse ("2+3") and the fused stage's tape omits u and v; the
chain's dropped_from is empty, so static_stages=False changes nothing.
Expected: with static_stages False (the default for Python stages) every step holds its budget, as in
rv16_review_data_dependent_drop.py. Observed (CPU, batch 512, width 64): at 80 % and 90 % of the way from the least
budget to plain autograd's peak the plans (same with static_stages True and False) measure 1 310 744 B on the batches
whose Gate reads v, +78 647 B and +39 324 B over budgets 1 232 097 B and 1 271 420 B (predicted 1 179 672 B).
Exits 1 on a step over its budget or over the peak planning used (> 64 B) with static_stages False.
Left as it is (it exits 1): counting a merged stage's drops held costs every Python model (Note [Drops seen on one
call] in gpusolve/chain.py, bench/results/drops_one_call_cpu.md); docs/pytorch.md names the excess.
Run: GS_ROOT=<tree> python rv19_diff_fused_member_drop_data_dependent.py"""
import sys

from _drops import B, W, Lin, Loss, check, torch  # the tree under test: GS_ROOT
from torch import nn  # noqa: E402

THRESH = [0.0]  # set by batches(): the median over 40 batches of u's mean


class Pair(nn.Module):  # t -> (2t, 3t): two new storages no backward saves
    def forward(self, t):
        return t * 2.0, t * 3.0


class Gate(Lin):        # (u, v) -> tanh(fc(u + v)) (u and v dropped), or where the batch asks tanh(fc(u) + v * scale)
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, q):
        u, v = q
        if bool(u.mean() > THRESH[0]):
            return torch.tanh(self.fc(u) + v * self.scale)
        return torch.tanh(self.fc(u + v))


def make():
    torch.manual_seed(0)
    return nn.Sequential(Lin(), Lin(), Pair(), Gate(), Lin(), Lin(), Loss())


def batches():
    """(a batch whose Gate drops u and v, one whose Gate saves them), the threshold set between them."""
    m, xs = make(), [torch.randn(B, W, generator=torch.Generator().manual_seed(seed)) for seed in range(40)]
    with torch.no_grad():
        means = [float(m[2](m[1](m[0](x)))[0].mean()) for x in xs]
    THRESH[0] = sorted(means)[len(means) // 2]
    return xs[min(range(40), key=lambda i: means[i])], xs[max(range(40), key=lambda i: means[i])]


def main() -> int:
    x_drop, x_read = batches()
    bad = check(make, x_drop, [x_drop, x_read, x_drop, x_read], (0.8, 0.9))
    print("BUG: a step over its budget: the profiled batch's Gate dropped u and v inside the fused stage 2+3, a later "
          "batch's Gate saves them" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
