"""The join executor (``torch_exec.join.CheckpointedJoin``: two towers of 6 residual blocks, Linear 32 -> 64, tanh,
Linear 64 -> 32, meeting at a head ``Linear(32, 1)(a * b).pow(2).mean()``), input 8 x 4 x 32 per tower (x1, x2, x3
at steps 0-2), SGD lr 0.05, 3 steps from ``torch.manual_seed(123)``, budget "75%", against plain autograd, with
stages that draw on some calls only (as rv21d_seq_drop_rate_attribute_from_zero_not_replayed.py and
rv21d_seq_data_dependent_draw_not_replayed.py for CheckpointedSequential):

- ``rate``: a timm-style ``DropPath`` after each block, its ``drop_prob`` (a float attribute) raised by the loop from
  0 (0, 0.1, 0.2);
- ``data``: noise only where the activations are large (``if z.abs().mean() > 0.5: z = z + 0.5 * torch.randn(...)``).

Observed (CPU, torch 2.13), no error and no JoinOrderWarning (warnings recorded); step 0 equals plain autograd's;
the figures vary between runs, as the plan (from measured times) varies; plain autograd: rate 0.795648, 2.009697,
264.876892; data 0.795648, 2.748445, 456.136841. Three runs:
  rate: 0.795648, 2.009697, 256.041534 (gradients 2.6e-01 off at step 1, 7.2e+01 at step 2); 0.795648, 2.204302,
        262.89386 (1.8e+00, 9.5e+01); 0.795648, 2.341626, 337.974121 (3.6e+00, 1.1e+02);
  data: 0.795648, 2.748445, 486.414612 (5.8e-01, 9.6e+01), twice; 0.795648, 3.633777, 458.438934 (6.3e+00, 1.3e+02);
and torch's RNG state after steps 1 and 2 differs from plain autograd's in every run. Where step 1's loss differs, the
plan presumably ran the towers' drawing stages in another order than plain autograd (a guess), which the join warns
of only for stages the profile saw draw.

Cause (a guess): as in the CheckpointedSequential repros: whether a stage draws is the profile's ``rng`` flag
(torch_exec/profiler.py), read on the first call; the join's runtime (torch_exec/join.py ``JoinRuntime``, which runs
the executor's ``Runtime.run_stage``) records a recomputed stage's RNG state only where it is set, and the join's
signature keys a ``_DropoutNd``'s ``p`` but not other scalar attributes (Note [Keys of modules run live] in
torch_exec/_util.py). The order check (``_order_sensitive``) reads the same flags, so no JoinOrderWarning either.

Expected: plain autograd's losses, gradients and RNG state. Exits 1 while a loss, a gradient or the RNG state
after a step differs.

Run: GS_ROOT=<tree> python bench/repros/rv21d_join_live_stage_draws_not_replayed.py   (~25 s)"""
import copy
import sys
import warnings

from _setup import nn, torch
from torch_exec.join import CheckpointedJoin

D = 32


class DropPath(nn.Module):
    """As timm's (timm.layers.DropPath), per sample."""

    def __init__(self):
        super().__init__()
        self.drop_prob = 0.0

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1 - self.drop_prob
        return x * x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep) / keep


class Block(nn.Module):
    def __init__(self, way):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.way = way
        self.drop_path = DropPath()

    def forward(self, h):
        z = torch.tanh(self.a(h))
        if self.way == "data" and z.abs().mean() > 0.5:
            z = z + 0.5 * torch.randn(z.shape)
        return h + self.drop_path(self.b(z))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(D, 1)

    def forward(self, a, b):
        return self.out(a * b).pow(2).mean()


class Net(nn.Module):
    def __init__(self, way):
        super().__init__()
        self.t1 = nn.Sequential(*[Block(way) for _ in range(6)])
        self.t2 = nn.Sequential(*[Block(way) for _ in range(6)])
        self.head = Head()

    def forward(self, a, b):
        return self.head(self.t1(a), self.t2(b))


X1 = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))
X2 = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(2))


def train(model, run, way):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(123)
    out = []
    for step in range(3):
        for m in model.modules():
            if isinstance(m, DropPath) and way == "rate":
                m.drop_prob = 0.1 * step
        loss = run(X1 * (1 + step), X2 * (1 + step))
        loss.backward()
        out.append((loss.item(), [p.grad.clone() for p in model.parameters()], torch.get_rng_state()))
        opt.step()
        opt.zero_grad()
    return out


bad = False
for way in ("rate", "data"):
    torch.manual_seed(0)
    base = Net(way)
    ref = copy.deepcopy(base)
    plain = train(ref, ref, way)
    model = copy.deepcopy(base)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = train(model, CheckpointedJoin([model.t1, model.t2], model.head, budget="75%", backend="cpu"), way)
    order_warnings = sum(type(w.message).__name__ == "JoinOrderWarning" for w in seen)
    gd = [max((a - b).abs().max().item() for a, b in zip(ga, gb)) for (_, ga, _), (_, gb, _) in zip(plain, got)]
    same = [torch.equal(a[2], b[2]) for a, b in zip(plain, got)]
    print(f"{way}: CheckpointedJoin 75% losses {[round(s[0], 6) for s in got]}, plain autograd "
          f"{[round(s[0], 6) for s in plain]}; max |grad - plain grad| per step {[f'{g:.1e}' for g in gd]}; "
          f"RNG state after each step as plain autograd's: {same}; JoinOrderWarnings: {order_warnings}")
    bad |= max(gd) > 1e-6 or not all(same) or any(abs(a[0] - b[0]) > 1e-6 for a, b in zip(plain, got))
print("BUG: the join recomputes stages that draw on some calls only with other random numbers, silently"
      if bad else "ok")
sys.exit(1 if bad else 0)
