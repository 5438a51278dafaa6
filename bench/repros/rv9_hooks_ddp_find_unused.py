"""DistributedDataParallel(CheckpointedSequential(...), find_unused_parameters=True) raises in the first backward
when any parameter has a Python hook (an optimizer stepped from a post-accumulate-grad hook, a gradient clamp)
(a review of 356cf20, 2026-11-28; the same before that commit).

Observed (8 x Linear(32)+Tanh and a Linear(32, 5), a CheckpointedSequential at its least budget, DDP on a
single-process gloo group, CPU): with one hooked parameter, the first .backward() raises
    RuntimeError: Expected to mark a variable ready only once. ...
(DDP's reducer); the same without hooks, or with find_unused_parameters=False, trains with plain autograd's
gradients. The README ("Distributed training") says the wrapper is DDP's module in either setting, and names only
"a checkpointed part inside a larger DDP module" as unsupported with find_unused_parameters=True.
Cause: torch_exec/executor.py _tap_params: inside the forward of a DDP that searches its graph for unused
parameters, a parameter with a Python hook is left out of the parameter tap (Note [Hooks of routed parameters]
keeps the DDP case out): DDP's search, from the wrapper's output, does not reach it, marks it unused (ready) at
the forward's end, and the stage's segment backward then marks it ready again. 356cf20 routed hooked parameters
through the tap everywhere else.
Expected: the step runs and every gradient and hook call equals plain autograd's. Exits 1 while the bug shows."""
import os
import sys
import tempfile

from _setup import F, nn, te, torch
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def make():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(8)], nn.Linear(32, 5))


torch.manual_seed(1)
x, y = torch.randn(16, 32), torch.randint(0, 5, (16,))
store = tempfile.mkdtemp()
dist.init_process_group("gloo", store=dist.FileStore(os.path.join(store, "store"), 1), rank=0, world_size=1)
bad = 0
try:
    for find_unused in (False, True):
        for hooked in (False, True):
            ref, seq = make(), make()
            w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
            w.prepare(x)
            w.replan(w.min_budget_bytes)
            calls = {id(seq): 0, id(ref): 0}
            if hooked:
                for m in (seq, ref):
                    m[0][0].weight.register_post_accumulate_grad_hook(
                        lambda p, m=m: calls.__setitem__(id(m), calls[id(m)] + 1))
            ddp = DDP(w, find_unused_parameters=find_unused)
            what = f"find_unused_parameters={find_unused!s:5} {'one hooked parameter' if hooked else 'no hook':20}:"
            try:
                for _ in range(2):
                    for p in (*seq.parameters(), *ref.parameters()):
                        p.grad = None
                    F.cross_entropy(ddp(x), y).backward()
                    F.cross_entropy(ref(x), y).backward()
            except RuntimeError as err:
                print(f"{what} BUG: the backward raised {type(err).__name__}: {str(err)[:60]}...")
                bad += 1
                continue
            diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(seq.parameters(), ref.parameters()))
            print(f"{what} ok, largest gradient difference to plain autograd {diff:.3g}, hook calls "
                  f"{calls[id(seq)]} (plain autograd {calls[id(ref)]})")
            bad += diff > 1e-6 or calls[id(seq)] != calls[id(ref)]
finally:
    dist.destroy_process_group()
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
