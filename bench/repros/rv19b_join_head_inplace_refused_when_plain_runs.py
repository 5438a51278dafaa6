"""CheckpointedJoin refuses a head that writes a branch output in place also where the step runs as plain autograd
(a budget at or above plain autograd's peak: "100%", or the default "6GiB" on a small model), which trained before
commit 43926ee: the refusal moved from the planned step's head forward (JoinRuntime._head_forward, reached only
under a plan) to profiling the head (CheckpointedJoin._profile_head: ``if data["stages"][0].get("writes_input"):
raise RuntimeError(_HEAD_WROTE_ERROR)``), which runs for every budget, before the plan says whether the step runs
plainly. Under plain autograd nothing holds the branch output for a re-read: the write is as legal as in the bare
model (here ``a.relu_()`` on a Linear's output, which no backward saves). A review, rv19b.

Observed: "100%" and "1GiB" both raise RuntimeError("CheckpointedJoin: the head wrote in place into a branch
output, ..."); at the session start (b37860a) both ran as plain autograd with the bare model's loss.
Expected: a budget at which plain autograd runs trains as plain autograd (the refusal, before any step, only
where a plan runs). Exits 1 while a plain-autograd budget is refused.

Run: GS_ROOT=<tree> python bench/repros/rv19b_join_head_inplace_refused_when_plain_runs.py
"""
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT


def tower():
    return [nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(3)] + [nn.Linear(32, 32)]


def head(a, b):
    return ((a.relu_() - b) ** 2).mean()  # writes branch 0's output (a Linear's, saved by no backward) in place


torch.manual_seed(0)
a, b = tower(), tower()
xa, xb = torch.randn(16, 32), torch.randn(16, 32)
expected = head(nn.Sequential(*a)(xa), nn.Sequential(*b)(xb))
print(f"the bare model: loss {float(expected):.6f}")
bad = False
for budget in ("100%", "1GiB"):
    join = te.CheckpointedJoin([a, b], head, budget=budget, backend="cpu", profile_passes=1, profile_warmup=0)
    try:
        loss = join(xa, xb)
        loss.backward()
    except RuntimeError as err:
        print(f"budget {budget}: RuntimeError: {str(err)[:110]}")
        bad = True
        continue
    print(f"budget {budget}: ran ({join.plan.decided_by}), loss {float(loss):.6f}")
    bad |= not torch.allclose(loss, expected)
if bad:
    print("BUG: a budget at which the join runs as plain autograd is refused for the head's in-place write")
    sys.exit(1)
sys.exit(0)
