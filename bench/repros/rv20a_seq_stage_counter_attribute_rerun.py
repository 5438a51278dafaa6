"""``CheckpointedSequential`` over stages that keep a Python counter on themselves and use it (a per-call warm-up or
annealing factor, a quantiser observer's step count): each stage is a residual block (Linear 32 -> 64, tanh,
Linear 64 -> 32) whose forward does ``if self.training: self.calls += 1`` and returns ``block(x) * (1 + 0.1 *
self.calls)``; 6 stages, input 4 x 16 x 32, loss ``out.pow(2).mean()``, 3 steps; budgets "100%" and 1.1 x the least
budget the "1%" InfeasibleBudgetError names; against the same stages run by plain autograd.

Observed (CPU, torch 2.13), no error and no warning:
  "100%" (plain autograd's plan, "schedule given, not solved"): after the first step every stage's ``calls`` is 18
    (plain autograd: 1): the first call's profiling ran each stage 17 more times; loss 275427.97 against 4.8042727,
    0.b.a.weight's gradient 4.125e+03 off (largest 7.256e-02). Steps 2 and 3: calls 19, 20; losses 428695.2, 605199.9
    against 13.006, 31.032.
  least budget (90112 B): calls after the first step [20, 20, 19, 20, 19, 18] (recomputations add their own runs,
    so the recomputed stages' factor differs from their forward's); losses 275427.97, 730020.06, 1648758.9.

Cause: torch_exec/profiler.py's passes (``_Passes``: a no-grad pass, a forward with grad and its backward, a plain
step, then timed passes) and the executor's recomputations run each stage's Python ``forward`` again. The stage's
parameters, buffers, gradients and RNG state are snapshotted and put back (``ModelSnapshot``; Note [Recomputing from
the step's buffers] for buffers in recomputations), a parameter written in place is refused
(``ParameterWriteError``), but a Python attribute the forward writes is neither restored nor refused.

Expected: plain autograd's losses and gradients: the profiling passes leave the stages' attributes as they were and a
recomputation sees the value its forward saw, or ONE clear error naming the attribute a stage's forward writes and the
fix (keep it as a buffer, or update it outside the forward), as for a parameter written in place. Exits 1 while the
wrapper trains with another loss than plain autograd's without an error.

Run: GS_ROOT=<tree> python bench/repros/rv20a_seq_stage_counter_attribute_rerun.py   (~6 s)"""
import sys

from _setup import nn, te, torch
import gpusolve

D = 32


class CountingStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
        return (x + self.b(torch.tanh(self.a(x)))) * (1.0 + 0.1 * self.calls)


def make():
    torch.manual_seed(0)
    return nn.Sequential(*[CountingStage() for _ in range(6)])


def inputs(step):
    return torch.randn(4, 16, D, generator=torch.Generator().manual_seed(step))


probe = te.CheckpointedSequential(make(), budget="1%", backend="cpu")
try:
    probe(inputs(0)).pow(2).mean().backward()
    least = None
except gpusolve.InfeasibleBudgetError as err:
    least = int(err.min_bytes * 1.1)
except te.AttributeWriteError as err:  # the fix: refused at profiling, the counters put back
    print(f"1%: refused: {str(err)[:150]}; counters after it {[m.calls for m in probe.modules() if hasattr(m, 'calls')]}")
    least = None

bad = False
for budget in ("100%", least):
    if budget is None:
        continue
    ref, mod = make(), make()
    wrapped = te.CheckpointedSequential(mod, budget=budget, backend="cpu")
    for step in range(3):
        x = inputs(step)
        l1 = ref(x).pow(2).mean()
        l1.backward()
        try:
            l2 = wrapped(x).pow(2).mean()
            l2.backward()
        except Exception as err:  # noqa: BLE001  (a clear refusal is fine)
            print(f"{budget}: step {step} raised {type(err).__name__}: {str(err)[:150]}")
            break
        off = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), mod.parameters()))
        print(f"{budget} step {step}: calls plain {[m.calls for m in ref]}, wrapper {[m.calls for m in mod]}; "
              f"loss plain {l1.item():.7g}, wrapper {l2.item():.7g}; largest gradient difference {off:.3e}")
        bad |= abs(l1.item() - l2.item()) > 1e-5 * abs(l1.item()) or off > 1e-4
        ref.zero_grad()
        mod.zero_grad()

print("BUG: profiling passes and recomputations run the stages' Python counters again, silently" if bad else "ok")
sys.exit(1 if bad else 0)
