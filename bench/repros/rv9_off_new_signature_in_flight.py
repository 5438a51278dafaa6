"""A new input signature's first call (or prepare()) while an earlier step still waits for its backward makes
that backward raise (a review, 2026-11-28). Two calls before one backward are supported (README "Several calls
before one backward"), but only while both inputs have a signature the wrapper has seen: micro-batches of
unequal size summed into one loss (the last, smaller batch of an epoch), multi-crop views of two resolutions,
or model.prepare(other_shape) called between a forward and its backward all hit it on their first step.

Observed (8 x Linear(64)+Tanh, a Linear(64, 8) head, budget "60%", offload="inf" and without offload, CPU):
    loss32 = f(w(x32)); loss16 = f(w(x16)); (loss32 + loss16).backward()
raises
    RuntimeError: one of the variables needed for gradient computation has been modified by an inplace
    operation: [torch.FloatTensor [64, 8]], which is output 0 of AsStrided, is at version 3; expected version 2
(the head's weight, saved by the first step's tape of the last stage). Plain autograd runs the same step.
The same happens with w.prepare(x16) between the batch-32 forward and its backward, with or without offload=, and
with auto_checkpoint(M(D=64, L=6), "60%", offload="inf") called on batches of 32 and 16 before one backward
(bench/repros/_setup.py's M; the head's [64, 10] weight).
Cause: profiling the new signature (torch_exec/profiler.py profile_dict) ends with ModelSnapshot.restore()
(torch_exec/_util.py), which writes every parameter and buffer back with p.copy_(data) under no_grad: the
values are unchanged but each parameter's version counter moves, and every graph alive that saved a parameter
(the pending step's tapes, or any other graph of the caller's) is invalidated.
Expected: the step's gradients equal plain autograd's (the restore leaves the version counters alone, e.g.
writing through .data, or skipping tensors whose values did not change). Exits 1 while the bug shows."""
import sys

from _setup import M, nn, te, torch


def make():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(8)], nn.Linear(64, 8))


def loss_of(y):
    return (y * torch.linspace(-1, 1, y.numel()).view_as(y)).square().sum()


torch.manual_seed(1)
x32, x16 = torch.randn(32, 64), torch.randn(16, 64)
bad = 0
for offload in ("inf", None):
    for how in ("second call", "prepare"):
        ref, model = make(), make()
        w = te.CheckpointedSequential(model, budget="60%", offload=offload, backend="cpu", profile_passes=1,
                                      profile_warmup=0)
        w.prepare(x32)
        loss_ref = loss_of(ref(x32)) + loss_of(ref(x16))
        loss_ref.backward()
        loss = loss_of(w(x32))
        if how == "second call":
            loss = loss + loss_of(w(x16))   # a new input signature: profiled and solved here
        else:
            w.prepare(x16)                  # another signature prepared while the step waits
        what = f"offload={offload!r:6} {how:12}:"
        try:
            loss.backward()
        except RuntimeError as err:
            print(f"{what} BUG: the backward raised {type(err).__name__}: {str(err)[:170]}")
            bad += 1
            continue
        if how == "prepare":
            ref.zero_grad()
            loss_of(ref(x32)).backward()
        diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
        print(f"{what} ok, largest gradient difference to plain autograd {diff:.3g}, plan swaps "
              f"{getattr(w.plan, 'swaps', 0)}")
        bad += diff != 0
# the one-call route: auto_checkpoint's first call of a new signature captures, profiles and solves the same way
torch.manual_seed(0)
auto = te.auto_checkpoint(M(D=64, L=6), "60%", offload="inf")
y32, y16 = torch.randint(0, 10, (32,)), torch.randint(0, 10, (16,))
auto(x32, y32).backward()
loss = auto(x32, y32) + auto(x16, y16)  # micro-batches of 32 and 16 summed: batch 16 is captured here
try:
    loss.backward()
    print("auto_checkpoint(offload='inf'), batches 32 + 16 before one backward: ok")
except RuntimeError as err:
    print(f"auto_checkpoint(offload='inf'), batches 32 + 16 before one backward: BUG: the backward raised "
          f"{type(err).__name__}: {str(err)[:150]}")
    bad += 1
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
