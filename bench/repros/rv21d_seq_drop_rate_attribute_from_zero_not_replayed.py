"""A drop rate the training loop anneals up from 0, kept as a plain float attribute of the stage (not an
``nn.Dropout``): stochastic depth written as timm's ``DropPath(drop_prob)`` (``if self.drop_prob == 0. or not
self.training: return x``, else a per-sample ``bernoulli_`` mask), with the schedule set by the loop (``m.drop_prob =
0.1 * step``: drop-path / "early dropout" warm-up), and ``F.dropout(z, self.drop_p, self.training)`` with
``self.drop_p`` set the same way. 10 residual blocks (Linear 32 -> 64, tanh, [dropout], Linear 64 -> 32, [drop
path]), input 8 x 4 x 32 (x1, x2, x3 at steps 0-2), loss ``out.pow(2).mean()``, SGD lr 0.05, 3 steps from
``torch.manual_seed(123)``; ``CheckpointedSequential(blocks, budget="60%", backend="cpu")`` against plain autograd.

Observed (CPU, torch 2.13), no error, no warning about it; step 0 (rate 0) equals plain autograd's, then:
  DropPath:  step 1 (rate 0.1) loss 5.809978 as plain autograd's, gradients 5.45e-02 off; step 2 (0.2) loss
             10.328185 against 10.213573, gradients 1.66e-01 off;
  F.dropout: step 1 gradients 9.83e-02 off; step 2 loss 10.091355 against 10.116683, gradients 1.81e-01 off;
and torch's RNG state after steps 1 and 2 differs from plain autograd's.
With ``offload="2GB/s"`` (the combined recompute + offload plan) the same: DropPath 5.25e-02, then 10.384273 and
1.73e-01; F.dropout 1.01e-01, then 10.088573 and 2.01e-01.
auto_checkpoint(nn.Sequential(*blocks), "80%", backend="cpu") on the same blocks trains with plain autograd's
losses, gradients and RNG state (a captured graph keys every scalar attribute; at "60%" its second step's new capture
is infeasible), as CheckpointedSequential does for
an ``nn.Dropout`` whose ``p`` is raised from 0 (review rv20b).
(One run: past step 0 the figures vary from run to run, as the plan follows measured times.)

Cause (a guess): Note [Keys of modules run live] (torch_exec/_util.py, ``module_state_key``): for modules run live
only the training mode and a ``_DropoutNd``'s ``p`` are keyed in the input signature; any other scalar attribute is
read live without a new profile. But whether a stage draws random numbers is read off the profile (the profiler's
``rng`` flag), and the executor records a recomputed stage's RNG state only where it is set
(torch_exec/executor.py, ``Runtime.run_stage``). A stage profiled at rate 0 draws nothing, so when the rate rises
its recomputations draw other masks than its forward, and move torch's generator on.

Expected: plain autograd's losses, gradients and RNG state (e.g. record a recomputed stage's RNG state whether or
not the profile saw it draw, or find out at the stage's first run that it drew). Exits 1 while a loss, a gradient or
the RNG state after a step differs.

Run: GS_ROOT=<tree> python bench/repros/rv21d_seq_drop_rate_attribute_from_zero_not_replayed.py   (~15 s)"""
import copy
import sys

from _setup import F, nn, te, torch

D = 32


class DropPath(nn.Module):
    """As timm's (timm.layers.DropPath), per sample."""

    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class Block(nn.Module):
    def __init__(self, way):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.way = way
        self.drop_p = 0.0
        self.drop_path = DropPath(0.0)

    def forward(self, h):
        z = torch.tanh(self.a(h))
        if self.way == "F.dropout":
            z = F.dropout(z, self.drop_p, self.training)
        return h + self.drop_path(self.b(z))


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def train(model, run):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(123)
    out = []
    for step in range(3):
        for block in model:  # the loop's schedule
            if block.way == "F.dropout":
                block.drop_p = 0.1 * step
            else:
                block.drop_path.drop_prob = 0.1 * step
        loss = run(X * (1 + step)).pow(2).mean()
        loss.backward()
        out.append((loss.item(), [p.grad.clone() for p in model.parameters()], torch.get_rng_state()))
        opt.step()
        opt.zero_grad()
    return out


bad = False
for way in ("DropPath", "F.dropout"):
    torch.manual_seed(0)
    base = nn.Sequential(*[Block(way) for _ in range(10)])
    ref = copy.deepcopy(base)
    plain = train(ref, ref)
    model = copy.deepcopy(base)
    got = train(model, te.CheckpointedSequential(model, budget="60%", backend="cpu"))
    for step, ((la, ga, ra), (lb, gb, rb)) in enumerate(zip(plain, got)):
        gd = max((a - b).abs().max().item() for a, b in zip(ga, gb))
        same = torch.equal(ra, rb)
        print(f"{way} rate {0.1 * step:.1f}, step {step}: loss {lb:.6f} (plain autograd {la:.6f}), "
              f"max |grad - plain grad| {gd:.2e}, RNG state after the step as plain autograd's: {same}")
        bad |= abs(la - lb) > 1e-6 or gd > 1e-6 or not same
print("BUG: a drop rate raised from 0 on a live stage is not replayed in its recomputations, silently" if bad else "ok")
sys.exit(1 if bad else 0)
