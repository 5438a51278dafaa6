"""Gradient clipping by value with tensor hooks (``p.register_hook(lambda g: g.clamp(-c, c))``) and an evaluation
pass that runs under grad (``model.eval()`` without ``torch.no_grad()``, or a validation loss kept for logging /
early stopping: ``val_loss = w(xv).mean()``) whose result is still alive when training resumes. Plain autograd
trains on: the validation graph is never back-propagated and each training backward runs every hook once.
Note [Hooks across calls before one backward] (torch_exec/executor.py, commit 2b4a812) refuses a call while an
earlier call's runtime is in ``IN_FLIGHT`` and the parameters have user hooks; a runtime leaves ``IN_FLIGHT``
only at the end of its backward or with its graph, so the validation call's runtime, whose graph the caller still
holds and will never back-propagate, makes the next training call raise "called again before the backward of
its previous call". The refusal is made at the forward, where nothing says that the two calls' graphs will meet
in one backward (the only case the Note needs to refuse).

CheckpointedSequential of 7 Linear/ReLU pairs and a head at "60%", a clamp hook on every parameter.
Observed (torch 2.13 CPU, commit 2b4a812): a training step runs (gradients equal plain autograd's on a deepcopy);
after ``w.eval(); val_loss = w(xv).mean(); w.train()`` the next training call raises RuntimeError
("CheckpointedSequential: called again before the backward of its previous call, and 16 parameter(s) ... have
gradient or post-accumulate-grad hooks"); the deepcopy trains on. Without the hooks, or after ``del val_loss``, it
runs; at the parent commit (b4954f3) both steps run with gradients equal to plain autograd's (0.000e+00).
Expected: the training step runs with plain autograd's gradients (refuse, if at all, where two calls' graphs meet
in one backward). Exits 1 while it is refused or its gradients differ."""
import copy
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT

D, CLIP = 64, 1e-2
torch.manual_seed(0)
mods = [nn.Linear(16, D), nn.ReLU()]
for _ in range(6):
    mods += [nn.Linear(D, D), nn.ReLU()]
mods.append(nn.Linear(D, 1))
ref = nn.Sequential(*copy.deepcopy(mods))
w = te.CheckpointedSequential(copy.deepcopy(mods), budget="60%", backend="cpu")
x, xv = torch.randn(64, 16), torch.randn(64, 16)
w.prepare(x)
for p in list(ref.parameters()) + list(w.parameters()):
    p.register_hook(lambda g: g.clamp(-CLIP, CLIP))

bad = False
for step in range(2):
    ref(x).square().mean().backward()
    try:
        w(x).square().mean().backward()
    except RuntimeError as e:
        print(f"step {step}: REFUSED: {str(e)[:160]}...")
        bad = True
        break
    gd = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), w.parameters()))
    print(f"step {step}: ran, max |grad - plain grad| {gd:.3e}")
    bad |= gd > 1e-6
    ref.zero_grad()
    w.zero_grad()
    # evaluation under grad; the loss is kept for logging (plain autograd: fine)
    ref.eval(), w.eval()
    ref_val, val_loss = ref(xv).mean(), w(xv).mean()
    ref.train(), w.train()
    print(f"  validation loss {ref_val.item():.6f} / {val_loss.item():.6f}")
print("BUG: a training call is refused while a validation graph (never back-propagated) is alive" if bad else "ok")
sys.exit(1 if bad else 0)
