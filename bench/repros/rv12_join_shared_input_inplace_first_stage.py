"""CheckpointedJoin called with ONE tensor as the input of several branches (join(h, h, h): parallel
towers over one stem output, an empty branch reading it too) where a branch's first stage writes in
place (nn.ReLU(inplace=True)): the loss and gradients differ from plain autograd's (a review, 2026-11-28).

Plain autograd runs branch 0 first; its in-place ReLU rewrites h, so branch 1 and the head read relu(h).
The join's branch runtimes get detached aliases of h, and the chain executor clones a_0 before an
in-place first stage (torch_exec/executor.py, Runtime.run_stage: `if s == 1 and entry.clone_input:
state = U.clone(state)`, "an in-place first stage must not overwrite the caller's input"), so branch 1
and the head read the un-rectified h: a different function (here loss 3.962 against plain autograd's
4.044, parameter gradients 0.58 apart), silently, whenever the join DP's plan runs; where plain autograd
fits the budget (it then runs as such) the same model gives plain autograd's numbers, so the function
trained depends on the budget. README (Join networks): "Gradients ...
equal plain autograd's bit for bit".
Expected: the same loss/gradients as plain autograd, or a clear refusal/warning when one tensor is fed
to several branches and a branch's first stage writes into it. Exits 1 while they differ silently.
"""
import copy
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT

D = 256


def blk():
    return nn.Sequential(nn.Linear(D, D), nn.Tanh())


def head(a, b, c):
    return (a * b).sum() + (c * a).mean()


torch.manual_seed(0)
branches = [nn.Sequential(nn.ReLU(inplace=True), *[blk() for _ in range(6)]),
            nn.Sequential(*[blk() for _ in range(8)]), None]
ref = copy.deepcopy(branches)
torch.manual_seed(1)
x = torch.randn(64, D)

join = te.CheckpointedJoin([list(b) if b is not None else None for b in branches], head, budget="1GiB",
                           backend="cpu", profile_passes=1, profile_warmup=0)
bad = False
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    xa = x.clone().requires_grad_()
    ha = xa * 1                       # a non-leaf (a stem's output): in-place is allowed on it
    join.prepare(ha, ha, ha)
    join.replan(budget=join.min_budget_bytes)  # below plain autograd's peak: the join DP's plan runs
    try:
        loss = join(ha, ha, ha)
    except ValueError as err:  # a clear refusal before the step runs is the fix
        print(f"refused: {err}")
        sys.exit(0 if "in place" in str(err) else 1)
    loss.backward()
said = [str(w.message)[:160] for w in caught if "Timing" not in type(w.message).__name__]

xb = x.clone().requires_grad_()
hb = xb * 1
expected = head(ref[0](hb), ref[1](hb), hb)
expected.backward()
gdiff = (xa.grad - xb.grad).abs().max().item()
pdiff = max((p.grad - q.grad).abs().max().item() for m, r in zip(branches[:2], ref[:2])
            for p, q in zip(m.parameters(), r.parameters()))
print(f"plan decided by {join.plan.decided_by!r}")
print(f"loss: join {loss.item():.6f}, plain autograd {expected.item():.6f}")
print(f"max |input grad diff| {gdiff:.3g}, max |param grad diff| {pdiff:.3g}")
print(f"warnings: {said}")
if (loss.item() != expected.item() or gdiff > 1e-6 or pdiff > 1e-6) and not said:
    print("BUG: the join computes another function than plain autograd, silently")
    bad = True
sys.exit(1 if bad else 0)
