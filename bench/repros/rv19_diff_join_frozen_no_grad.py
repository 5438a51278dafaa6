"""A CheckpointedJoin called in grad mode where nothing needs a gradient (every parameter frozen, no input requiring
grad: a frozen two-tower feature extractor run without torch.no_grad()) is profiled and then refused with an
InfeasibleBudgetError ("budget ... is below plain autograd's measured peak ...; raise the budget to at least ...",
"this input needs at least 100%"): there is no backward to plan for, and raising the budget is not the remedy. Review
rv18 (bench/repros/rv18_input_frozen_no_grad_infeasible.py) found this for CheckpointedSequential and auto_checkpoint,
and session 18 fixed those two (torch_exec/_util.py nothing_requires_grad, called in CheckpointedSequential.forward
and AutoCheckpointed.forward); CheckpointedJoin.forward (torch_exec/join.py) was left without the check. The same
model under torch.no_grad() runs directly.
Expected: the call runs the model plainly (as under no_grad, or as the other two wrappers now do) and returns the
plain output (which requires no grad). Observed: InfeasibleBudgetError after a profile (CPU, batch 64, width 64).
Review rv19 of the session 17-18 diff. Run: GS_ROOT=<tree> python rv19_diff_join_frozen_no_grad.py"""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")
torch.set_num_threads(1)


def blk():
    return nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64), nn.Tanh())


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 4)

    def forward(self, a, b):
        return self.fc(a + b).square().mean()


def make():
    torch.manual_seed(0)
    branches, head = [[blk(), blk(), blk()], [blk(), blk(), blk()]], Head()
    for m in [m for br in branches for m in br] + [head]:
        for p in m.parameters():
            p.requires_grad_(False)
    return branches, head


def main() -> int:
    x, y = torch.randn(64, 64, generator=torch.Generator().manual_seed(0)), torch.randn(64, 64)
    branches, head = make()
    plain = head(*[nn.Sequential(*br)(v) for br, v in zip(branches, (x, y))])
    with torch.no_grad():
        under = te.CheckpointedJoin(*make(), budget="60%", backend="cpu", profile_passes=1, profile_warmup=0)(x, y)
    print(f"plain model in grad mode: {float(plain):.6f} (requires_grad {plain.requires_grad}); CheckpointedJoin under "
          f"no_grad: {float(under):.6f}")
    w = te.CheckpointedJoin(*make(), budget="60%", backend="cpu", profile_passes=1, profile_warmup=0)
    try:
        out = w(x, y)
    except Exception as err:  # noqa: BLE001 (the bug: a refusal)
        print(f"CheckpointedJoin in grad mode, nothing requiring grad: {type(err).__name__}: {err}")
        print("BUG: refused a call that has no backward to plan")
        return 1
    same = torch.equal(out.detach(), plain.detach())
    print(f"CheckpointedJoin in grad mode, nothing requiring grad: {float(out):.6f} (requires_grad "
          f"{out.requires_grad}), equal to plain: {same}")
    return 0 if same and not out.requires_grad else 1


if __name__ == "__main__":
    sys.exit(main())
