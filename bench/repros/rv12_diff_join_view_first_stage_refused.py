"""CheckpointedJoin refuses, under a plan, one tensor fed to several branches where a branch's first stage is
a VIEW of its input (nn.Flatten, a transpose, a reshape, nn.Identity), saying the stage "writes its input in
place", which it does not: such a join trained like plain autograd at 35f9e72 and raises ValueError now.

Here: h = x * 1 of shape (64, 16, 16) fed to two branches, join(h, h); branch 0 starts with nn.Flatten() (a
view of h), branch 1 with nn.Tanh() (out of place) then nn.Flatten(); each then 6 x (Linear(256), Tanh); the
least budget, below plain autograd's peak, so the join DP's plan runs. 35f9e72: loss and gradients equal plain
autograd's.
Cause: torch_exec/join.py _refuse_shared_input_written takes a branch's ``clone_input`` as "its first stage
writes its input in place", but clone_input (gpusolve/chain.py clones_input) is set where stage 1's output
ALIASES its input: in place, or a view (``first["aliases"] or first["x"] == 0``).
Expected: the same loss and gradients as plain autograd, no refusal (only a first stage that writes into its
input is a hazard: e.g. ask the profile whether the stage wrote its input, a version counter bump, rather than
whether its output aliases it). Exits 1 while the join refuses (or differs from plain autograd)."""
import copy
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")
D = 256


def blk():
    return nn.Sequential(nn.Linear(D, D), nn.Tanh())


def head(a, b):
    return (a * b).sum()


torch.manual_seed(0)
branches = [nn.Sequential(nn.Flatten(), *[blk() for _ in range(6)]),
            nn.Sequential(nn.Tanh(), nn.Flatten(), *[blk() for _ in range(6)])]
ref = copy.deepcopy(branches)
torch.manual_seed(1)
x = torch.randn(64, 16, 16)

join = te.CheckpointedJoin([list(b) for b in branches], head, budget="1GiB", backend="cpu", profile_passes=1,
                           profile_warmup=0)
xa = x.clone().requires_grad_()
ha = xa * 1
join.prepare(ha, ha)
join.replan(budget=join.min_budget_bytes)  # below plain autograd's peak: the join DP's plan runs
print(f"branch clone_input flags: {[getattr(b, 'clone_input', None) for b in join._last.branches]}")
try:
    loss = join(ha, ha)
except ValueError as err:
    print(f"refused: {str(err)[:200]}...")
    print("BUG: a view first stage is refused as an in-place write")
    sys.exit(1)
loss.backward()
xb = x.clone().requires_grad_()
hb = xb * 1
expected = head(ref[0](hb), ref[1](hb))
expected.backward()
gdiff = (xa.grad - xb.grad).abs().max().item()
print(f"plan decided by {join.plan.decided_by!r}; loss join {loss.item():.6f}, plain autograd {expected.item():.6f}; "
      f"max |input grad diff| {gdiff:.3g}")
bad = abs(loss.item() - expected.item()) > 1e-4 * abs(expected.item()) or gdiff > 1e-5
print("BUG: differs from plain autograd" if bad else "ok")
sys.exit(1 if bad else 0)
