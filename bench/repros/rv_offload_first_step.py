"""auto_checkpoint(model, budget, offload="12GB/s") on the CPU (a review, 2026-11-27): the first measured
step of every plan that offloads reads over its budget, by exactly the plan's "host" buffers, which the
CPU path allocates in the same memory during that step (later steps find them in the pool, made before the
step's meter starts). The warning blames the caller's loss or the profile and advises re-profiling, which
makes a new pool: the next first step reads over again."""
import copy
import warnings

from _setup import F, nn, te, torch


class Net(nn.Module):
    def __init__(self, cnn):
        super().__init__()
        conv = lambda i, o: nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())  # noqa: E731
        self.body = (nn.Sequential(conv(3, 16), conv(16, 16), conv(16, 16), conv(16, 16), nn.AdaptiveAvgPool2d(1),
                                   nn.Flatten(), nn.Linear(16, 10)) if cnn else
                     nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(8)],
                                   nn.Linear(256, 10)))

    def forward(self, x, y):
        return F.cross_entropy(self.body(x), y)


torch.manual_seed(0)
for cnn, x, budget in ((False, torch.randn(128, 256), "50%"), (True, torch.randn(16, 3, 24, 24), "60%")):
    y = torch.randint(0, 10, (x.shape[0],))
    model = Net(cnn)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, budget, offload="12GB/s")
    wrapped.prepare(x, y)
    plan = wrapped.plan
    print(f"{'CNN' if cnn else 'MLP'}: budget {budget} = {plan.budget_bytes} B, predicted {plan.predicted_peak_bytes} B, "
          f"{plan.swaps} checkpoint(s) offloaded")
    for rnd, what in enumerate(("first plan", "after replan(profile=True), as the warning advises")):
        if rnd:
            wrapped.replan(profile=True)
        wrapped.measure_memory(2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for step in range(2):
                with torch.no_grad():
                    for a, b in zip(model.buffers(), reference.buffers()):
                        b.copy_(a)
                for m in (model, reference):
                    for p in m.parameters():
                        p.grad = torch.zeros_like(p)
                reference(x, y).backward()
                wrapped(x, y).backward()
            records = wrapped.memory_report()[-2:]
        copies = wrapped.executor._last.copies
        diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))
        print(f"  {what}: max abs gradient difference {diff}; host buffers {copies.allocations}, "
              f"{copies.host_bytes()} B")
        for r in records:
            print(f"    step {r.step}: budget {r.budget} B, predicted {r.predicted_peak} B, measured "
                  f"{r.beyond_param_grads} B, within budget: {r.within_budget}, over the prediction by "
                  f"{r.beyond_param_grads - r.predicted_peak} B")
        for w in caught:
            if "MemoryBudgetWarning" in type(w.message).__name__:
                print(f"    warning: {str(w.message)[:400]}")
