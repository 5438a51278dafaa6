"""Review rv15 of the storage-exact peak (gpusolve/exact_peak.py): a storage the profile records as dropped (Note
[Storages a stage drops]) but that the next stage keeps alive outside saved_tensors_hooks (a custom autograd.Function
that keeps its inputs as ctx attributes, not save_for_backward). ``exact_peak`` with ``drops=True`` frees it in a tape
run, so it under-counts; planning to that peak (the first version of Note [Planning to the exact peak]) picked plain
store-all at 85-95 % of the way from the least budget to plain autograd's peak, and the step measured 32769-98306 B
above the user's budget, where planning to the model's peak held it. Since, planning frees a dropped storage only where
the profiler saw it freed by measurement (``plan_drops``; Note [Drops measured] in torch_exec/profiler.py): the storage
StashMul's ctx keeps outlives its stage, so the profile does not call it dropped. Planning frees drops only for stages
that run one graph on every call (``static_stages``, set by auto_checkpoint for exported graphs; review rv16): these
Python stages are run with ``static_stages = True`` so that the check is what holds the budget. CPU, review rv15
(2026-11-29).

Model (width 64, batch 512, 128 KiB per tensor): Lin, Make (t -> (a, 3a)), StashDrop ((a, p) -> (StashMul(a, p), a):
p dropped from the tuple, kept by StashMul's ctx), Keep, Keep, Merge, Lin, Loss. caller_keeps="output".
Part 1: the store-all schedule (schedule_fn) measured against exact_peak (with and without drops) and the model's peak.
Part 2: budgets at 80-95 % of the way from the least budget to plain autograd's peak, each planned with
plan_exact_peak True and False. Exits 1 where a step measures above its budget or above the peak planning uses
(``exact_peak(..., drops=plan_drops(chain))``) by more than 64 B; part 1's ``drops=True`` figure is printed, not
checked.
"""
import sys
import warnings

from _drops import B, W, Keep, Lin, Loss, Make, Merge, least_and_plain, planned  # the repros' stages, loop
from _setup import te, torch  # the tree under test: GS_ROOT
from torch import nn  # noqa: E402

from gpusolve.exact_peak import exact_peak, plan_drops  # noqa: E402
from gpusolve.schedule import Op, OpKind  # noqa: E402


class StashMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, p):
        ctx.a, ctx.p = a, p  # kept as ctx attributes (invisible to saved_tensors_hooks)
        return a * p

    @staticmethod
    def backward(ctx, g):
        return g * ctx.p, g * ctx.a


class StashDrop(nn.Module):  # (a, p) -> (a * p, a)
    def forward(self, q):
        return StashMul.apply(q[0], q[1]), q[0]


KINDS = [Lin, Make, StashDrop, Keep, Keep, Merge, Lin, Loss]


def make():
    torch.manual_seed(0)
    return nn.Sequential(*[k() for k in KINDS])


def run(x, **kw):
    w, (peak,) = planned(make, x, [x], {"static_stages": True}, **kw)  # drops freed where checked, as when exported
    face = w._last
    return w, face, exact_peak(face.chain, w.plan.schedule, drops=plan_drops(face.chain)), peak


def main() -> int:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    x = torch.randn(B, W, generator=torch.Generator().manual_seed(0))
    bad = 0

    def store_all(chain):
        n = chain.n
        return [Op(OpKind.FWD_TAPE, s) for s in range(1, n + 1)] + [Op(OpKind.BWD, s) for s in range(n, 0, -1)]
    w, face, ep, meas = run(x, budget="1TiB", schedule_fn=store_all)
    prov = face.chain.provenance
    print(f"profile: passed_from {prov.get('passed_from')}, dropped_from {prov.get('dropped_from')}, drops checked "
          f"{prov.get('drops_checked')}")
    with_drops = exact_peak(face.chain, w.plan.schedule, drops=True).peak_bytes
    print(f"part 1, store-all schedule: exact {ep.peak_bytes} B (with drops freed {with_drops} B), model "
          f"{ep.model_peak_bytes} B, measured {meas} B (measured - exact {meas - ep.peak_bytes:+d})")
    bad += meas > ep.peak_bytes + 64

    lo, hi, _ = least_and_plain(make, x)
    print(f"part 2: least budget {lo} B, plain autograd {hi} B")
    for f in (0.8, 0.85, 0.9, 0.95):
        budget = int(lo + f * (hi - lo))
        for exact_plans in (True, False):
            te.CheckpointedSequential.plan_exact_peak = exact_plans
            w, face, ep, meas = run(x, budget=budget)
            plain = face.chain is face.plain_chain
            over = meas > budget + 64 or (not plain and meas > ep.peak_bytes + 64)
            bad += over
            print(f"  {f:.2f} plan_exact_peak={exact_plans!s:5}: budget {budget} predicted "
                  f"{w.plan.predicted_peak_bytes} exact {ep.peak_bytes} model {ep.model_peak_bytes} measured {meas} "
                  f"(measured - budget {meas - budget:+d}){'  OVER' if over else ''}; "
                  f"{' '.join(str(o) for o in w.plan.schedule)}",
                  flush=True)
    te.CheckpointedSequential.plan_exact_peak = True
    print("BUG: a plan's step above its budget or the peak planning uses (a storage held by a ctx attribute)"
          if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
