"""CheckpointedJoin refuses a head that writes in place into a branch output ("the head wrote in place into a branch
output, which the schedule holds; make that operation out of place") only AFTER the step's forward phase has run:
the refused call has already updated every branch's BatchNorm running statistics and advanced the RNG, and the
error comes on every call, so the model is left changed by a step that never trained (a review, 2026-11-29).

torch_exec/join.py, JoinRuntime._head_forward: ``interpret(rt.forward_ops, rt)`` runs every branch (BatchNorm
statistics updated, dropout masks drawn) and then the head; ``leaf.written()`` is checked after the head ran. The
head ran on the sample branch outputs while profiling (CheckpointedJoin._profile_head), where the same write could
be seen and refused before any step, and profiling restores the model's state (U.ModelSnapshot) while the step
does not. (Plain autograd runs this head: the write is into a Linear's output, which no backward saves.)

Observed (branch 0: 4 x (Linear(64), BatchNorm1d, Tanh, Dropout(0.1), Linear(64)); branch 1: 4 x (Linear(64), Tanh);
head ((a.relu_() - b) ** 2).mean(); budget "60%"; CPU): RuntimeError on the first call, and the BatchNorm running
statistics moved by up to 0.098 and the global RNG advanced (the next torch.rand differs) by the refused call.
Expected: the refusal before the step touches the model (at profiling, or with the statistics and RNG state put
back), as the join's other refusals (_refuse_shared_input_written: "Refused before the step runs") are.
Exits 1 while the refused call leaves the statistics or the RNG changed.

Run: GS_ROOT=<tree> python bench/repros/rv19_join_head_inplace_refusal_after_step.py
"""
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT

D, B = 64, 32
torch.manual_seed(0)


def block():
    return nn.Sequential(nn.Linear(D, D), nn.BatchNorm1d(D), nn.Tanh(), nn.Dropout(0.1), nn.Linear(D, D))


branches = [nn.Sequential(*[block() for _ in range(4)]),
            nn.Sequential(*[nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(4)])]


def head(a, b):
    return ((a.relu_() - b) ** 2).mean()   # in place into branch 0's output (a Linear's: no backward saves it)


xs = [torch.randn(B, D) for _ in range(2)]
join = te.CheckpointedJoin([list(b) for b in branches], head, budget="60%", backend="cpu", profile_passes=1,
                           profile_warmup=0)
stats = [t.clone() for t in branches[0].buffers() if t.is_floating_point()]
torch.manual_seed(7)
rng = torch.get_rng_state()
try:
    join.prepare(*xs)   # profiling: restores what it changes (the refusal may come here, before any step)
    print(f"plan: {join.plan.decided_by}")
    join(*xs).backward()
    print("the step ran (no refusal)")
    sys.exit(0)
except RuntimeError as err:
    print(f"refused: {str(err)[:140]}")
moved = max((a - b).abs().max().item() for a, b in zip(stats, [t for t in branches[0].buffers()
                                                                 if t.is_floating_point()]))
rng_moved = not torch.equal(rng, torch.get_rng_state())
print(f"after the refused call: BatchNorm running statistics moved by up to {moved:.4g}; RNG advanced: {rng_moved}")
if moved > 0 or rng_moved:
    print("BUG: a refused call changed the model's statistics / the RNG (the forward phase ran before the check)")
    sys.exit(1)
sys.exit(0)
