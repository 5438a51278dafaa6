"""prepare(x, profile=data) checks only the profile's stage names against the wrapper's. An
nn.Sequential's names are '0', '1', ..., so a profile taken at another batch size, or of another
network with as many stages (other widths), is accepted without a word: the plan, the resolved
percentage and min_budget_bytes are those of the other shapes, and the measured step goes many times
over its budget. The profile records what it was taken on (args.input_shapes, dtype, input_bytes,
param_bytes), so the mismatch can be told at prepare()."""
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT


def mlp(D, L=6):
    return nn.Sequential(*[m for _ in range(L) for m in (nn.Linear(D, D), nn.Tanh())], nn.Linear(D, 10))


torch.manual_seed(0)
worst = 0.0
for what, profiled_on, x_prof in (("batch 8 profile, batch 256 step", mlp(64), torch.randn(8, 64)),
                                  ("width-16 network's profile, width-64 network", mlp(16), torch.randn(256, 16))):
    data = te.profile_dict(profiled_on, x_prof)
    seq = mlp(64)
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    own = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
    own.prepare(x)
    w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
    try:
        plan = w.prepare(x, profile=data)
    except Exception as exc:  # noqa: BLE001 - the expected behaviour
        print(f"{what}: refused: {type(exc).__name__}: {str(exc)[:160]}")
        continue
    print(f"{what}: accepted (profile input_shapes {data['args']['input_shapes']}, param_bytes {data['param_bytes']}); "
          f"'100%' resolved to {plan.budget_bytes} B, min_budget_bytes {w.min_budget_bytes} B "
          f"(own profile: {own.plan.budget_bytes} B and {own.min_budget_bytes} B)")
    w.replan(w.min_budget_bytes)
    w.measure_memory(1)
    F.cross_entropy(w(x), y).backward()
    r = w.memory_report()[-1]
    worst = max(worst, r.beyond_param_grads / r.budget)
    print(f"  step at min_budget_bytes: budget {r.budget} B, predicted {r.predicted_peak} B, measured beyond grads "
          f"{r.beyond_param_grads} B = {r.beyond_param_grads / r.budget:.1f} x the budget")
sys.exit(1 if worst > 1 else 0)
