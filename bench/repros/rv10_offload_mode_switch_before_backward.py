"""A step whose modules change training mode between its forward and its backward gets wrong gradients, with
offload= and without (a review of the offload path, 2026-11-28). The recomputed stages run in the mode the
modules are in when the BACKWARD runs, not the mode of the forward they recompute; plain autograd's graph keeps
the forward's. The offload review met it first: CheckpointedSequential(..., offload="inf") trained with an
evaluation pass between a forward and its backward.

Observed (CheckpointedSequential over 8 x (Linear(128), BatchNorm1d, ReLU(inplace), Dropout(0.2)) + Linear(128, 4),
batch 64, budget "70%", backend cpu, CPU; one ordinary training step first; largest parameter-gradient difference
to plain autograd on the same model and seeds, offload="inf" (4-9 checkpoints swapped) / offload=None):
- ``loss = f(w(x)); model.eval(); loss.backward(); model.train()``                        6.6     / 6.65
- ``loss = f(w(x)); model.eval(); with no_grad: w(xv); loss.backward(); model.train()``   6.6     / 6.65
  (a validation pass inside the step, the backward before model.train())
- ``model.eval(); loss = f(w(xv)); model.train(); loss.backward()``                        2.82e3  / 0.0246
- ``l1 = f(w(x)); model.eval(); l2 = f(w(xv)); model.train(); (l1 + l2).backward()``     5.14e4  / 0.0248
(0.004-0.04 with the BatchNorms left out: dropout switched off or on in the recomputation). auto_checkpoint's
torch.export graphs fix the mode and are right; its block fallback is not (auto_checkpoint(model, "70%",
offload="inf", capture="blocks"): 8.55 for the first case, 6.76e4 for the third). Setting each stage's modules' training flags, around
its recomputations, to what they were at its first run in the step (a monkeypatch of Runtime.run_stage) makes
every case above bit-equal to plain autograd, with and without offload.
Cause: torch_exec/executor.py Runtime.run_stage replays a recomputed stage with the RNG state, autocast state and
scratch buffers recorded at its first run, but calls the stage's modules in their live training mode.
Expected: gradients equal plain autograd's (bit for bit, as in every other CPU test): record the stage modules'
training flags at the stage's first run of the step (the signature already keys on them,
U.module_state_key) and set them around its recomputations, as the autocast state is. Exits 1 while the bug
shows."""
import sys

from _setup import nn, te, torch


def make():
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU(inplace=True), nn.Dropout(0.2)]
    return nn.Sequential(*layers, nn.Linear(128, 4))


def loss_of(y):
    return (y * torch.linspace(-1, 1, y.numel()).view_as(y)).square().sum()


def eval_backward(net, model, x, xv):
    torch.manual_seed(1)
    loss = loss_of(net(x))
    model.eval()
    loss.backward()
    model.train()


def validation_inside(net, model, x, xv):
    torch.manual_seed(1)
    loss = loss_of(net(x))
    model.eval()
    with torch.no_grad():
        net(xv)
    loss.backward()
    model.train()


def eval_forward_train_backward(net, model, x, xv):
    model.eval()
    torch.manual_seed(1)
    loss = loss_of(net(xv))
    model.train()
    loss.backward()


def two_modes_one_backward(net, model, x, xv):
    torch.manual_seed(1)
    l1 = loss_of(net(x))
    model.eval()
    l2 = loss_of(net(xv))
    model.train()
    (l1 + l2).backward()


torch.manual_seed(5)
x, xv = torch.randn(64, 128), torch.randn(64, 128)
bad = 0
for offload in ("inf", None):
    for case in (eval_backward, validation_inside, eval_forward_train_backward, two_modes_one_backward):
        ref, model = make(), make()
        w = te.CheckpointedSequential(model, budget="70%", offload=offload, backend="cpu")
        for net, m in ((ref, ref), (w, model)):  # one ordinary training step first
            torch.manual_seed(0)
            loss_of(net(x)).backward()
            m.zero_grad()
        for net, m in ((ref, ref), (w, model)):
            case(net, m, x, xv)
        diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
        swaps = w.plan.swaps if offload else 0
        verdict = "ok" if diff <= 1e-6 else "BUG"
        bad += verdict == "BUG"
        print(f"offload={offload!r:6} {case.__name__:28}: largest gradient difference to plain autograd {diff:.3g} "
              f"(swaps {swaps}) {verdict}")
print("ok" if not bad else f"BUG: {bad} case(s) with gradients other than plain autograd's")
sys.exit(1 if bad else 0)
