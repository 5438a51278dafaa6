"""CheckpointedJoin.replan() between a step's forward and its backward (a review, 2026-11-27): the pending
step's backward runs the NEW plan's backward program (JoinRuntime keeps a reference to the entry, whose
program _plan_entry rewrites in place) over the OLD plan's forward state. Plain autograd has no plan:
the backward of a forward already run is unaffected by anything done to the model in between. Here it
crashes with a bare KeyError / "internal error", or (other budgets) runs without error.
Exits nonzero while the bug shows."""
import copy

from _setup import nn, te, torch
from gpusolve.join.bytesim import store_all_join_peak_bytes

te.CheckpointedJoin.plain_peak_bytes_for = staticmethod(lambda entry: 1 << 62)  # tiny towers: force solved plans


def tower(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), *[m for _ in range(6) for m in (nn.Tanh(), nn.Linear(64, 64))])


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Linear(64, 8)

    def forward(self, u, v):
        return (self.p(u) * self.p(v)).square().mean()


ta, tb, head = tower(0), tower(1), Head()
ra, rb, rh = copy.deepcopy((ta, tb, head))
join = te.CheckpointedJoin([list(ta), list(tb)], head, budget="1GiB", profile_passes=1, profile_warmup=0)
torch.manual_seed(1)
xs = [torch.randn(64, 32), torch.randn(64, 32)]
join.prepare(*xs)
lo, hi = join.min_budget_bytes, store_all_join_peak_bytes(join.net)
bad = 0
for b1, b2 in [(lo, hi), (hi, lo), (lo, (lo + hi) // 2)]:
    for m in (ta, tb, head, ra, rb, rh):
        m.zero_grad(set_to_none=True)
    join.replan(budget=b1)
    loss = join(*xs)
    join.replan(budget=b2)           # e.g. a callback lowering the budget after an OOM warning
    rh(ra(xs[0]), rb(xs[1])).backward()
    try:
        loss.backward()
        diff = max((p.grad - q.grad).abs().max().item() if p.grad is not None else float("inf")
                   for p, q in zip([*ta.parameters(), *tb.parameters(), *head.parameters()],
                                   [*ra.parameters(), *rb.parameters(), *rh.parameters()]))
        print(f"forward at {b1} B, replan to {b2} B, backward: max abs gradient difference {diff}")
        bad += diff != 0
    except Exception as exc:  # noqa: BLE001
        print(f"forward at {b1} B, replan to {b2} B, backward: {type(exc).__name__}: {str(exc)[:160]}")
        bad += 1
print("BUG" if bad else "ok")
raise SystemExit(1 if bad else 0)
