"""loss.backward(inputs=[some parameters]) through a join step under a checkpointing plan (a review,
2026-11-27): no gradient at all, and no error. torch_exec/join.py's docstring says backward(inputs=...) is
refused with an error; plain autograd (and the chain wrapper) give the named parameters their gradients."""
import copy

from _setup import F, nn, te, torch
from torch_exec.join import CheckpointedJoin

torch.manual_seed(0)
D, B = 64, 32


def tower(depth):
    return [nn.Sequential(nn.Linear(D, D), nn.ReLU()) for _ in range(depth)]


def head(a, b):
    return F.cross_entropy(a @ b.T, torch.arange(a.shape[0]))


x1, x2 = torch.randn(B, D), torch.randn(B, D)
ta, tb = tower(3), tower(2)
ref_a = copy.deepcopy(nn.Sequential(*ta))
ref_b = copy.deepcopy(nn.Sequential(*tb))
named = [ta[0][0].weight, tb[1][0].bias]           # train only these two, say
ref_named = [ref_a[0][0].weight, ref_b[1][0].bias]
head(ref_a(x1), ref_b(x2)).backward(inputs=ref_named)
print("plain autograd: named parameters with a gradient:", sum(p.grad is not None for p in ref_named), "of 2")

for budget in ("100%", "95%"):
    join = CheckpointedJoin([ta, tb], head, budget=budget)
    join.zero_grad(set_to_none=True)
    try:
        join(x1, x2).backward(inputs=named)
        got = [p.grad for p in named]
        diff = max(((g - r.grad).abs().max().item() for g, r in zip(got, ref_named) if g is not None), default=None)
        print(f"CheckpointedJoin budget {budget} ({join.plan.decided_by}): named parameters with a gradient: "
              f"{sum(g is not None for g in got)} of 2; any parameter with a gradient: "
              f"{any(p.grad is not None for p in join.parameters())}; max abs gradient difference: {diff}")
    except Exception as exc:  # noqa: BLE001
        print(f"CheckpointedJoin budget {budget}: {type(exc).__name__}: {str(exc).splitlines()[0]}")


class TwoTower(nn.Module):  # the same through auto_checkpoint (found as a join)
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(*tower(4))
        self.b = nn.Sequential(*tower(3))

    def forward(self, x, y):
        return head(self.a(x), self.b(y))


model = TwoTower()
reference = copy.deepcopy(model)
head(reference.a(x1), reference.b(x2)).backward(inputs=[reference.a[0][0].weight])
wrapped = te.auto_checkpoint(model, "90%")
try:
    wrapped(x1, x2).backward(inputs=[model.a[0][0].weight])
    print(f"auto_checkpoint 90% ({type(wrapped.executor).__name__}, {wrapped.plan.decided_by}): "
          f"a.0.0.weight.grad is None: {model.a[0][0].weight.grad is None} (plain autograd: "
          f"{reference.a[0][0].weight.grad is None})")
except RuntimeError as exc:
    print(f"auto_checkpoint 90% ({type(wrapped.executor).__name__}): {type(exc).__name__}: {str(exc)[:160]}")
