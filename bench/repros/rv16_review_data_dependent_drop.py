"""Review rv16 of Note [Drops measured] (commit 9405ab7), deterministic variant of rv16_review_random_route_drop.py:
stage Gate reads p (the 3a of the stage before it) only where its batch asks for it (data-dependent control flow:
here, where the mean of a is above a threshold; MoE routing, `if mask.any()` branches), else it reads a
again and drops p. The first call (profiled) gets a batch that drops p, so the profile checks the drop once and says
drops_checked; later batches that read p keep it saved through Gate's backward, over the budget and the prediction.
Planning with drops held (as before 9405ab7) holds the budget on every batch. CPU. Exits 1 on a step over its budget
or over the peak planning used (> 64 B). Run: GS_ROOT=<tree> python rv16_review_data_dependent_drop.py

Since (session 16): the drops are freed in planning only for stages that run one graph on every call
(auto_checkpoint's exported ones: CheckpointedSequential.static_stages); these Python stages count them held,
and every step holds its budget: exits 0. With static_stages = True it exits 1 again.
"""
import os, sys, warnings
sys.path.insert(0, os.environ.get("GS_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
import torch
from torch import nn
import torch_exec as te
import gpusolve.exact_peak as gx
from torch_exec.executor import plain_peak_bytes
from torch_exec.meter import measure_peak

warnings.simplefilter("ignore")
torch.set_num_threads(1)
W, B = 64, 512
THRESH = [0.0]  # set by batches(): the median over 40 batches of a's mean


class Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(W, W)

    def forward(self, t):
        return torch.tanh(self.fc(t))


class Make(Lin):      # t -> (a, 3a)
    def forward(self, t):
        a = super().forward(t)
        return a, a * 3.0


class Gate(Lin):      # (a, p) -> (tanh(fc(a) + src * scale), a); src = p where the batch asks, else a (p dropped)
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, q):
        src = q[1] if bool(q[0].mean() > THRESH[0]) else q[0]
        return torch.tanh(self.fc(q[0]) + src * self.scale), q[0]


class Keep(Lin):
    def forward(self, q):
        return super().forward(q[0]), q[1]


class Merge(Lin):
    def forward(self, q):
        return torch.tanh(self.fc(q[0]) + q[1])


class Loss(nn.Module):
    def forward(self, t):
        return t.square().mean()


def make():
    torch.manual_seed(0)
    return nn.Sequential(Lin(), Make(), Gate(), Keep(), Merge(), Lin(), Loss())


def step(w, x):
    w(x).backward()


def batches():
    """Batches whose Gate drops p (False) or reads it (True), by seed."""
    m, xs = make(), [torch.randn(B, W, generator=torch.Generator().manual_seed(seed)) for seed in range(40)]
    with torch.no_grad():
        means = [float(m[1](m[0](x))[0].mean()) for x in xs]
    THRESH[0] = sorted(means)[len(means) // 2]
    return xs[min(range(40), key=lambda i: means[i])], xs[max(range(40), key=lambda i: means[i])]


def main():
    x_drop, x_read = batches()
    orig = gx.plan_drops
    probe = te.CheckpointedSequential(make(), budget="1TiB", backend="cpu", profile_passes=1, profile_warmup=0)
    probe.prepare(x_drop)
    lo, hi = probe.min_budget_bytes, plain_peak_bytes(probe._last)
    prov = probe._last.chain.provenance
    print(f"least {lo} B, plain {hi} B; drops_checked {prov.get('drops_checked')}, dropped_from "
          f"{prov.get('dropped_from')}")
    bad = 0
    for f in (0.8, 0.9):
        budget = int(lo + f * (hi - lo))
        for free_drops in (True, False):  # False: every drop held in planning (before 9405ab7)
            gx.plan_drops = orig if free_drops else (lambda chain: False)
            m = make()
            w = te.CheckpointedSequential(m, budget=budget, backend="cpu", profile_passes=1, profile_warmup=0)
            for p in m.parameters():
                p.grad = torch.zeros_like(p)
            step(w, x_drop)  # the first call profiles on this batch
            step(w, x_drop)
            peaks = [measure_peak(step, w, x)[1].peak for x in (x_drop, x_read, x_drop, x_read)]
            face = w._last
            used = gx.exact_peak(face.chain, w.plan.schedule, drops=w.static_stages and gx.plan_drops(face.chain)).peak_bytes
            worst = max(peaks)
            over = worst > budget + 64 or worst > used + 64
            bad += over and free_drops
            print(f"  f={f} drops freed in planning={free_drops!s:5}: budget {budget} predicted "
                  f"{w.plan.predicted_peak_bytes} (exact as planned: {used}) measured [drop, read, drop, read] {peaks} "
                  f"(worst - budget {worst - budget:+d}, worst - predicted {worst - w.plan.predicted_peak_bytes:+d})"
                  f"{'  OVER' if over else ''}\n    {' '.join(map(str, w.plan.schedule))}", flush=True)
    gx.plan_drops = orig
    print("BUG: a step over its budget: the profiled batch dropped p, a later batch's Gate saves it" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
