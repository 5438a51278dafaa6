"""The README's own Siamese join (CheckpointedJoin([list(tower), list(tower)], head, budget="50%")) trained
with the usual loop, whose zero_grad() leaves .grad None: memory_report() reads every step over its
budget (4009992 B beyond parameter gradients against a 2233860 B budget) and a MemoryBudgetWarning tells the
user to re-profile, while the same step with the gradients allocated beforehand measures 1967112 B, within
it. The shared parameters' gradients are counted as activations: Note [Hooks on a leaf several segments
read] (torch_exec/executor.py, interpret_backward: U.post_accumulate_hooks_deferred(entry.shared_params))
defers every post-accumulate-grad hook of a parameter two stages or branches read to the end of the
backward, the step meter's own hooks too (torch_exec/report.py, _GradientsSet: its marks "when each
parameter's .grad is first set"), so all its marks come after the peak and none of those gradients is
taken off it (Note [Gradients set during the step]). A CheckpointedSequential whose first and seventh
stages are one nn.Linear (tied) reads the same way (725512 B against a 528384 B budget; 462344 B with
the gradients allocated). Expected: the step reads the same whether .grad starts None or allocated
(the meter's own hooks not deferred). Exits 1 while they differ and the None case reads over."""
import sys
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT


def steps(model, run, none):
    model.measure_memory(1)
    for p in model.parameters():
        p.grad = None if none else torch.zeros_like(p)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
        r = model.memory_report()[-1]
    said = [w for w in caught if issubclass(w.category, te.report.MemoryBudgetWarning)]
    return r, said


bad = False
torch.manual_seed(0)
x1, x2 = torch.randn(64, 256), torch.randn(64, 256)
tower = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(12)])
join = te.CheckpointedJoin([list(tower), list(tower)], lambda a, b: ((a - b) ** 2).mean(), budget="50%",
                           backend="cpu")
join.prepare(x1, x2)
for none in (True, False):
    r, said = steps(join, lambda: join(x1, x2).backward(), none)
    print(f"Siamese join, .grad {'None' if none else 'allocated'} at the step's start: budget {r.budget} B, predicted "
          f"{r.predicted_peak} B, measured {r.measured_peak} B, param grads {r.param_grad_bytes_allocated} B, beyond "
          f"grads {r.beyond_param_grads} B, {'ok' if r.within_budget else 'OVER'}; MemoryBudgetWarning: {bool(said)}")
    bad |= none and not r.within_budget

torch.manual_seed(0)
lin = nn.Linear(256, 256)
stages = [lin, nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), lin, nn.Tanh(),
          nn.Linear(256, 10)]
chain = te.CheckpointedSequential(stages, budget="100%", backend="cpu")
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
chain.prepare(x)
chain.replan(chain.min_budget_bytes)
for none in (True, False):
    r, said = steps(chain, lambda: F.cross_entropy(chain(x), y).backward(), none)
    print(f"chain with a tied Linear at its least budget, .grad {'None' if none else 'allocated'}: budget {r.budget} B, "
          f"predicted {r.predicted_peak} B, measured {r.measured_peak} B, param grads {r.param_grad_bytes_allocated} B, "
          f"beyond grads {r.beyond_param_grads} B, {'ok' if r.within_budget else 'OVER'}")
    bad |= none and not r.within_budget
sys.exit(1 if bad else 0)
