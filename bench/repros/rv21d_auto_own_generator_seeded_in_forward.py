"""A model whose forward seeds a ``torch.Generator`` itself before drawing from it: the fix the CaptureError for
``torch.manual_seed`` in the forward names (docs/pytorch.md's table: "draw from a ``torch.Generator`` of the module's
own, seeded in ``forward`` (``torch.randn(shape, generator=self.gen)``)"; the CaptureError itself: "draw from a
torch.Generator of the module's own seeded in the forward (self.gen.manual_seed(1234); torch.randn(x.shape,
generator=self.gen)), which the executor records and replays"). 10 residual blocks (Linear 32 -> 64,
tanh, + 0.5 * noise, Linear 64 -> 32), input 8 x 4 x 32, loss ``out.pow(2).mean()``, SGD lr 0.05, 3 steps,
``auto_checkpoint(model, "60%", backend="cpu")`` (torch.export captures it) against plain autograd, each from
``torch.manual_seed(123)``. Two ways of writing it:

- ``own``: each block holds ``self.gen = torch.Generator()`` and its forward does ``self.gen.manual_seed(1234);
  noise = torch.randn(shape, generator=self.gen)`` (fixed noise, reproducible apart from the data pipeline);
- ``fresh``: the forward makes ``torch.Generator().manual_seed(9)`` at each call and draws from it.

Observed (CPU, torch 2.13), no error, no warning about it:
  own:   losses 3.243135, 6.702315, 10.218403 against plain autograd's 3.385489, 6.342297, 9.849458; the largest
         parameter-gradient difference 1.41e-01; the blocks' generators end the steps elsewhere than plain autograd's;
  fresh: step 0 equal (3.140955), then 6.701601, 10.356749 against 6.140033, 9.68701; gradients 1.33e-01 off.
In the review's harness capture="blocks" trained ``own``, and CheckpointedSequential ``fresh``, with plain
autograd's losses and gradients (difference 0).

Cause (a guess): torch.export keeps operations, not Python side effects: ``Generator.manual_seed`` is not recorded
in the graph, so the graph's ``randn`` draws from wherever the generator object is (``own``: the state the capture
and profiling runs left; ``fresh``: the one Generator made at capture time, kept as a constant of the graph and
never re-seeded, so each call continues its stream; seen in the capture: the prologue holds ``aten.randn.generator(...,
generator=_0_lifted_custom_0)`` with the generators as attributes ``lifted_custom_0`` ... ``lifted_custom_9``, and
no seeding). torch_exec/auto.py's probe (``_probe_model``, Note [Probing the
model]) refuses torch.manual_seed in the forward and a forward that moves Python's or NumPy's generator, but not a
forward that seeds a torch.Generator (neither the model's own nor one it makes).

Expected: plain autograd's losses and gradients (the block fallback runs the forward's code), or ONE CaptureError
naming the seeding and capture="blocks" (and the torch.manual_seed error not naming a fix that export trains wrong).
Exits 1 while a loss or a gradient differs from plain autograd's without an error.

Run: GS_ROOT=<tree> python bench/repros/rv21d_auto_own_generator_seeded_in_forward.py   (~15 s)"""
import copy
import sys

from _setup import nn, te, torch

D = 32


class Block(nn.Module):
    def __init__(self, way):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.way = way
        self.gen = torch.Generator()

    def forward(self, h):
        z = torch.tanh(self.a(h))
        if self.way == "own":
            self.gen.manual_seed(1234)
            gen = self.gen
        else:
            gen = torch.Generator().manual_seed(9)
        return h + self.b(z + 0.5 * torch.randn(z.shape, generator=gen))


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def train(model, run):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(123)
    losses, grads = [], []
    for step in range(3):
        try:
            loss = run(X * (1 + step)).pow(2).mean()
        except te.CaptureError as err:
            return f"refused: {str(err)[:200]}", None, None
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        opt.zero_grad()
        losses.append(round(loss.item(), 6))
    return losses, grads, [b.gen.get_state() for b in model]


bad = False
for way in ("own", "fresh"):
    torch.manual_seed(0)
    base = nn.Sequential(*[Block(way) for _ in range(10)])
    ref = copy.deepcopy(base)
    pl, pg, ps = train(ref, ref)
    model = copy.deepcopy(base)
    wl, wg, ws = train(model, te.auto_checkpoint(model, "60%", backend="cpu"))
    if wg is None:
        print(f"{way}: plain autograd losses {pl}; auto_checkpoint {wl}")
        continue
    gd = max((a - b).abs().max().item() for ga, gb in zip(pg, wg) for a, b in zip(ga, gb))
    same_gen = all(torch.equal(a, b) for a, b in zip(ps, ws))
    print(f"{way}: plain autograd losses {pl}; auto_checkpoint at 60% {wl}; max |grad - plain grad| {gd:.2e}; "
          f"the blocks' generators after the steps as plain autograd's: {same_gen}")
    bad |= gd > 1e-6 or any(abs(a - b) > 1e-6 for a, b in zip(pl, wl))
print("BUG: a generator seeded in the forward is not replayed by the captured graph, silently" if bad else "ok")
sys.exit(1 if bad else 0)
