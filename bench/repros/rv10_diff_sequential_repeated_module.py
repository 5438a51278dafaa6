"""CheckpointedSequential(seq) for an nn.Sequential that holds one module at several positions (weight sharing
by reuse, e.g. ``nn.Sequential(shared, nn.Tanh(), ..., shared, nn.Tanh())``) runs each such module once: its
output and gradients differ from the Sequential's own, whatever the budget, budget=None included (a review,
2026-11-28; older than the commits under review: c0f90ad shows it the same).

Observed (12 children, one nn.Linear(32, 32) at positions 0, 6 and 10, Tanh between, batch 16, CPU; this script):
- the wrapper holds 10 stage callables for the Sequential's 12 positions;
- CheckpointedSequential(seq, budget=None)(x) against seq(x) on a copy: largest output difference 0.4445, parameter
  gradients up to 7.977 off; at the wrapper's least budget the same (0.4445, 7.977);
- the same 12 modules given as a list (CheckpointedSequential(list(seq._modules.values()), ...)) are bit-equal
  to plain autograd, with and without hooks.
Cause: torch_exec/_util.py stage_list takes ``list(stages.named_children())``, and nn.Module.named_children
yields each module once (it keeps a memo), so the repeats are dropped from the chain (10 stages instead of 12).
nn.Sequential.forward iterates ``self._modules.values()``, repeats included.
Expected: the stages are the Sequential's ``_modules.items()`` in order (as its forward runs them), or such a
Sequential is refused with a message; output and gradients equal plain autograd's. Exits 1 while the bug
shows."""
import sys

from _setup import nn, te, torch

D = 32


def make():
    torch.manual_seed(0)
    shared = nn.Linear(D, D)
    return nn.Sequential(shared, nn.Tanh(), nn.Linear(D, D), nn.Tanh(), nn.Linear(D, D), nn.Tanh(),
                         shared, nn.Tanh(), nn.Linear(D, D), nn.Tanh(), shared, nn.Tanh())


x = torch.randn(16, D, generator=torch.Generator().manual_seed(1))
bad = False
for budget in (None, "least"):
    ref, model = make(), make()
    w = te.CheckpointedSequential(model, budget=None if budget is None else "100%", backend="cpu")
    if budget is not None:
        w.prepare(x)
        w.replan(w.min_budget_bytes)
    out, want = w(x), ref(x)
    out.square().sum().backward()
    want.square().sum().backward()
    diff_out = (out - want).abs().max().item()
    diff_grad = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    print(f"budget {budget!s:5}: {len(list(model._modules.values()))} positions in the Sequential, "
          f"{len(w._fns)} stage callables in the wrapper; largest output difference to plain {diff_out:.4g}, "
          f"largest gradient difference {diff_grad:.4g}")
    bad |= diff_out > 1e-6 or diff_grad > 1e-6
print("BUG: a module at several positions of the Sequential runs once" if bad else "ok")
sys.exit(1 if bad else 0)
