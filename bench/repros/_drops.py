"""What the rv15 and rv16 repros share: tuple stages at width 64, a probe's least budget and plain peak, one planned
and measured wrapper (``planned``), and for the repros of dropped storages (review rv16 of Note [Drops measured] in
torch_exec/profiler.py) one loop that plans each budget twice, as a CheckpointedSequential of Python stages does
(``static_stages`` False: drops counted held) and as an exported graph's would (True: checked drops freed), then
measures the step on each of the given inputs."""
from _setup import te, torch  # the tree under test: GS_ROOT
from torch import nn  # noqa: E402

import gpusolve.exact_peak as gx  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402

W, B = 64, 512


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


class Keep(Lin):      # (a, b) -> (tanh(fc(a)), b)
    def forward(self, q):
        return super().forward(q[0]), q[1]


class Merge(Lin):     # (a, b) -> tanh(fc(a) + b)
    def forward(self, q):
        return torch.tanh(self.fc(q[0]) + q[1])


class Loss(nn.Module):
    def forward(self, t):
        return t.square().mean()


def step(w, x):
    w(x).backward()


def least_and_plain(make, x) -> tuple[int, int, object]:
    """``make()``'s least budget, plain autograd's measured peak and the probe's entry, profiled on ``x``."""
    probe = te.CheckpointedSequential(make(), budget="1TiB", backend="cpu", profile_passes=1, profile_warmup=0)
    probe.prepare(x)
    return probe.min_budget_bytes, plain_peak_bytes(probe._last), probe._last


def planned(make, profiled, measured, attrs=None, **kwargs):
    """(the wrapper, the peaks measured): ``make()`` wrapped (``kwargs``: the budget, a schedule_fn, profiling
    settings), the wrapper's
    ``attrs`` set, parameter gradients allocated, two warm steps on ``profiled`` (the first profiles), then one
    measured step on each input of ``measured``."""
    model = make()
    w = te.CheckpointedSequential(model, **{"backend": "cpu", "profile_passes": 1, "profile_warmup": 0, **kwargs})
    for name, value in (attrs or {}).items():
        setattr(w, name, value)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    step(w, profiled)
    step(w, profiled)
    return w, [measure_peak(step, w, x)[1].peak for x in measured]


def check(make, profiled, measured, fracs) -> int:
    """Plans ``make()`` (profiled on ``profiled``) at ``fracs`` of the way from its least budget to plain autograd's
    peak, with ``static_stages`` False and True, and measures a step on each input of ``measured``. Prints each; returns
    how many plans with ``static_stages`` False (the shipped default for Python stages) measured above their budget
    or the peak they were planned to (> 64 B)."""
    lo, hi, entry = least_and_plain(make, profiled)
    prov = entry.chain.provenance
    print(f"least {lo} B, plain {hi} B; drops_checked {prov.get('drops_checked')}, dropped_from "
          f"{prov.get('dropped_from')}")
    bad = 0
    for f in fracs:
        budget = int(lo + f * (hi - lo))
        for static in (False, True):
            w, peaks = planned(make, profiled, measured, {"static_stages": static}, budget=budget)
            face = w._last
            used = gx.exact_peak(face.chain, w.plan.schedule, drops=static and gx.plan_drops(face.chain)).peak_bytes
            worst = max(peaks)
            over = worst > budget + 64 or worst > used + 64
            bad += over and not static
            print(f"  f={f} static_stages={static!s:5}: budget {budget} predicted {w.plan.predicted_peak_bytes} "
                  f"(exact, drops as planned: {used}) measured {peaks} (worst - budget {worst - budget:+d})"
                  f"{'  OVER' if over else ''}\n    {' '.join(map(str, w.plan.schedule))}", flush=True)
    return bad
