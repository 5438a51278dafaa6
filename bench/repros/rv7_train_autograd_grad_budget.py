"""A measured step that takes its parameter gradients with ``torch.autograd.grad(loss, params)`` (meta-learning,
SAM, a loop that clips or all-reduces the returned tuple before writing ``.grad``) is reported over its budget,
with a MemoryBudgetWarning that advises re-profiling or lowering the budget. The README says autograd.grad(loss,
params) behaves as in plain autograd and that the budget does not count the parameters' gradients; the meter only
takes off the peak the gradients set on ``.grad`` (Note [Gradients set during the step] in
torch_exec/report.py, ``param_grad_bytes_allocated``), so the gradients autograd.grad returns, the same bytes,
are counted as activations.

Observed (CPU, torch 2.13, "40%", an MLP of 6 residual blocks): a plain ``loss.backward()`` step measures
181000 B beyond parameter gradients (406548 B of gradients), within the 191388 B budget; the same step with
``torch.autograd.grad(loss, list(model.parameters()))`` records param_grad_bytes_allocated 0 and
beyond_param_grads 516380 B, within_budget False, and warns "exceeds the budget ... by 324992 B ... re-profile
(model.replan(profile=True)) or lower the budget by the excess". Its 406548 B are the returned gradients.
Expected: the step reported within its budget (the returned parameter gradients counted as parameter gradients),
and no warning."""
import copy
import sys
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.n = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), nn.LayerNorm(D)

    def forward(self, h):
        return h + self.b(torch.relu(self.a(self.n(h))))


class Net(nn.Module):
    def __init__(self, L=6):
        super().__init__()
        self.inp, self.head = nn.Linear(16, D), nn.Linear(D, 5)
        self.blocks = nn.ModuleList(Blk() for _ in range(L))

    def forward(self, x, y):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return F.cross_entropy(self.head(h), y)


torch.manual_seed(0)
ref = Net()
w = te.auto_checkpoint(copy.deepcopy(ref), "40%", backend="cpu")
g = torch.Generator().manual_seed(0)
x, y = torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)
w.prepare(x, y)

w.measure_memory(1)
w(x, y).backward()
r = w.memory_report()[-1]
print(f"loss.backward():      beyond param grads {r.beyond_param_grads} B (grads {r.param_grad_bytes_allocated} B), "
      f"budget {r.budget} B, predicted {w.plan.predicted_peak_bytes} B, within {r.within_budget}")
bad = not r.within_budget
w.zero_grad(set_to_none=True)

w.measure_memory(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    gs = torch.autograd.grad(w(x, y), list(w.parameters()))
    r = w.memory_report()[-1]
over = [str(c.message) for c in caught if type(c.message).__name__ == "MemoryBudgetWarning"]
print(f"torch.autograd.grad:  beyond param grads {r.beyond_param_grads} B (grads {r.param_grad_bytes_allocated} B), "
      f"budget {r.budget} B, predicted {w.plan.predicted_peak_bytes} B, within {r.within_budget}; "
      f"returned gradients {sum(t.numel() * t.element_size() for t in gs)} B")
if over:
    print(f"  warned: {over[0][:200]}...")

ga = torch.autograd.grad(ref(x, y), list(ref.parameters()))
gd = max((a - b).abs().max().item() for a, b in zip(ga, gs))
print(f"max |grad - plain grad| {gd:.3e}")
bad |= not r.within_budget or bool(over) or gd > 0
print("BUG: autograd.grad's parameter gradients counted against the budget" if bad else "ok")
sys.exit(1 if bad else 0)
