"""What the rv19 join repros over transformer towers share: the tree under test (``GS_ROOT``, as ``_setup`` reads it),
the wrapper's profiling options, the head (the squared distance of the towers' mean tokens) and one seeded step."""
from _setup import nn, te, torch

__all__ = ["D", "OPTS", "head", "nn", "step", "te", "torch"]

D = 32
OPTS = dict(backend="cpu", profile_passes=1, profile_warmup=0)


def head(a, b):
    return ((a.mean(1) - b.mean(1)) ** 2).mean()


def step(model, others, run):
    """``run()``'s loss and ``model``'s parameter gradients, every gradient of ``model`` and ``others`` set to None
    first and the RNG seeded, so two models compare draw for draw."""
    for m in (model, *others):
        for p in m.parameters():
            p.grad = None
    torch.manual_seed(1)
    loss = run()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]
