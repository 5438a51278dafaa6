"""CheckpointedJoin no longer refuses one tensor fed to several branches where a branch starts with a VIEW of its
input (nn.Flatten, nn.Identity) followed by a stage that writes in place (nn.ReLU(inplace=True)): that second
stage writes the shared tensor through the view in plain autograd, while under a plan the branch works on a clone
of its input (``clone_input``: stage 1 aliases a_0), so the other branch reads another tensor and the join trains
another function than plain autograd, silently. 8d78b68 refused it (ValueError naming the remedy).

Here: h = x * 1 of shape (64, 16, 16) (values of both signs) fed to two branches, join(h, h); branch 0 is
nn.Flatten(), nn.ReLU(inplace=True), then 6 x (Linear(256), Tanh); branch 1 is nn.Flatten() then the same; the
least budget, below plain autograd's peak, so the join DP's plan runs. Plain autograd (branch 0 first, as the join
runs them) lets branch 1 read relu(h).
Cause: torch_exec/join.py _writes_its_input asks only whether the FIRST stage's profile says ``writes_input``;
the profiler (torch_exec/profiler.py nograd_memory) sets it per stage for the stage's own input, and a later stage
whose input is still a view of a_0 (stage 1 a view, stage 2 in place) writes a_0 with stage 1's flag False.
Expected: refused (ValueError) as at 8d78b68, or the same loss and gradients as plain autograd. Exits 1 while the
join runs and differs from plain autograd."""
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
branches = [nn.Sequential(nn.Flatten(), nn.ReLU(inplace=True), *[blk() for _ in range(6)]),
            nn.Sequential(nn.Flatten(), *[blk() for _ in range(6)])]
ref = copy.deepcopy(branches)
torch.manual_seed(1)
x = torch.randn(64, 16, 16)

join = te.CheckpointedJoin([list(b) for b in branches], head, budget="1GiB", backend="cpu", profile_passes=1,
                           profile_warmup=0)
xa = x.clone().requires_grad_()
ha = xa * 1
join.prepare(ha, ha)
join.replan(budget=join.min_budget_bytes)
print(f"branch clone_input flags: {[getattr(b, 'clone_input', None) for b in join._last.branches]}; "
      f"writes_input of branch 0's stages 1-2: "
      f"{[s.get('writes_input') for s in join._last.branches[0].profile['stages'][:2]]}")
try:
    loss = join(ha, ha)
except ValueError as err:
    print(f"refused: {str(err)[:160]}...")
    print("ok (refused, as plain autograd would let branch 1 read what branch 0 wrote)")
    sys.exit(0)
loss.backward()
xb = x.clone().requires_grad_()
hb = xb * 1
expected = head(ref[0](hb), ref[1](hb))
expected.backward()
gdiff = (xa.grad - xb.grad).abs().max().item()
print(f"plan decided by {join.plan.decided_by!r}; loss join {loss.item():.6f}, plain autograd {expected.item():.6f}; "
      f"max |input grad diff| {gdiff:.3g}")
bad = abs(loss.item() - expected.item()) > 1e-4 * abs(expected.item()) or gdiff > 1e-5
print("BUG: the join trains another function than plain autograd, silently" if bad else "ok")
sys.exit(1 if bad else 0)
