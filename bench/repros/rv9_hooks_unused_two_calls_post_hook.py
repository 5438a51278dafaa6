"""A parameter no stage's backward reaches (held by a stage, never read in its forward) runs its post-accumulate
hook in a backward of two calls when it also has a gradient hook and its .grad is already set (gradient
accumulation); plain autograd never calls its hooks (a review of 356cf20, 2026-11-28).

Observed (8 x Linear(64)+Tanh and a Linear(64, 8) under a CheckpointedSequential at its least budget, CPU; the
second block holds a parameter `spare` that its forward never reads; spare has a gradient hook (a clamp) and a
post-accumulate hook (Adam stepping it, as an optimizer in the backward); spare.grad already set, as while
micro-batches accumulate; two calls before one backward, (loss(w(x1)) + loss(w(x2))).backward()):
the post-accumulate hook runs once and Adam steps spare, which moves although no gradient reached it; plain
autograd on a copy calls neither hook and spare stays as it was. One call per backward, or .grad None before the
step, or a parameter with only the post-accumulate hook: no call, as in plain autograd (the guards of Note
[Hooks of routed parameters]).
Cause: torch_exec/_util.py, _PassHooks.run: a parameter with a gradient hook and .grad set is left to the
deferral of Note [Hooks across calls before one backward] while another call is in flight; run() skips its
gradient hooks when the pass gave it nothing (whole is None) but then calls every held post-accumulate hook
unconditionally. _RoutedHooks' guard of it sees its hooks already taken out, and guards nothing.
Expected: no hook of spare runs (as in plain autograd), spare unchanged. Exits 1 while the bug shows."""
import copy
import sys

from _setup import nn, te, torch


def make():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(8)], nn.Linear(64, 8))
    model[1].register_parameter("spare", nn.Parameter(torch.ones(64)))  # held by a stage, never read
    return model


def loss_of(y):
    return (y * torch.linspace(-1, 1, y.numel()).view_as(y)).square().sum()


def hook(model, calls):
    spare = model[1].spare
    opt = torch.optim.Adam([spare], lr=0.1)
    spare.register_hook(lambda g: g.clamp(-1e-2, 1e-2))

    def step(p):
        calls.append(p.grad.clone())
        opt.step()
    spare.register_post_accumulate_grad_hook(step)
    spare.grad = torch.full_like(spare, 0.5)  # an earlier micro-batch's gradient (here made up)


torch.manual_seed(1)
x1, x2 = torch.randn(32, 64), torch.randn(32, 64)
ref = make()
seq = copy.deepcopy(ref)
w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
w.prepare(x1)
w.replan(w.min_budget_bytes)
ours, theirs = [], []
hook(seq, ours)
hook(ref, theirs)
(loss_of(w(x1)) + loss_of(w(x2))).backward()
(loss_of(ref(x1)) + loss_of(ref(x2))).backward()
moved = (seq[1].spare - 1).abs().max().item()
print(f"post-accumulate hook calls on spare: wrapper {len(ours)}, plain autograd {len(theirs)}")
print(f"spare moved by (largest |spare - 1|): wrapper {moved:.3g}, plain autograd "
      f"{(ref[1].spare - 1).abs().max().item():.3g}")
other = max((p.grad - q.grad).abs().max().item() for (n, p), q in zip(seq.named_parameters(), ref.parameters())
            if not n.endswith("spare"))
print(f"largest gradient difference of the other parameters: {other:.3g}")
bad = len(ours) != len(theirs) or moved != 0
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
