"""A LayerDrop that draws its numbers before the first block (fairseq's LayerDropModuleList: one ``uniform_()`` per
layer in ``__iter__``, then ``if dropout_probs[i] > p: yield layer``) is not seen by the probe of Note [Draws between
the blocks]: auto_checkpoint takes the list as the chain, and training then raises at random steps ("called out of
order" / "called 5 of the 6 blocks") instead of the list being refused at capture naming LayerDrop (a review of
6514efb, 2026-11-28).

_DrawsBetween (torch_exec/auto.py) zeroes only the draws made outside the blocks AFTER the first block started; the
LayerDropModuleList's draws come before it, so the probe runs on real (forked) random numbers: where they skip no
block (about 0.9^6 = 53 % with p = 0.1 and 6 layers) the list passes, _check_blocks draws the same numbers, and the
first training steps skip blocks. A LayerDrop written "run while rand < 1 - p" is missed the same way (0 runs).
Observed (6 blocks Linear(16, 16) + Tanh in a LayerDropModuleList(p=0.1), a head, batch 8,
auto_checkpoint(model, "100%", backend="cpu", capture="blocks"); this script, torch.manual_seed(0)): the capture takes
'layers' (6 blocks); of the next 30 steps 9 raise, the first at step 2 ("block 4 of 'layers' was called out of
order"); d97ccc3 took it too (8 of 30 raised; a skipped last block trained silently there). The guarantee of 6514efb
holds: no step trains on blocks the model skipped.
Cause: torch_exec/auto.py _DrawsBetween counts a draw only between the first block's start and the last one's end,
and the zero it sets skips a block only for comparisons of the form ``rand < p``.
Expected: the list is refused at capture naming LayerDrop, e.g. by probing twice with the model's random draws set
to two extremes (0, and just below 1) and refusing a list whose blocks do not all run once in both, wherever the
draws are made. Exits 1 while such a list is taken and a later step raises."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")


class LayerDropModuleList(nn.ModuleList):
    """fairseq.modules.LayerDropModuleList."""

    def __init__(self, p, modules=None):
        super().__init__(modules)
        self.p = p

    def __iter__(self):
        dropout_probs = torch.empty(len(self)).uniform_()
        for i, m in enumerate(super().__iter__()):
            if not self.training or (dropout_probs[i] > self.p):
                yield m


class Encoder(nn.Module):
    def __init__(self, d=16, n=6, p=0.1):
        super().__init__()
        self.layers = LayerDropModuleList(p, [nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(n)])
        self.head = nn.Linear(d, 3)

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
        return nn.functional.cross_entropy(self.head(x), y)


x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
torch.manual_seed(0)
w = te.auto_checkpoint(Encoder(), "100%", backend="cpu", capture="blocks")
try:
    w(x, y).backward()
except te.CaptureError as err:
    print(f"refused at capture: {str(err)[:200]}")
    print("ok")
    sys.exit(0)
name = w.capture.blocks[0].name
print(f"capture: the chain is '{name}' ({len(w.capture.blocks[0].blocks)} blocks)")
raised, first = 0, None
for step in range(30):
    try:
        w(x, y).backward()
    except RuntimeError as err:
        raised += 1
        first = first or (step + 1, str(err)[:110])
print(f"of the next 30 steps {raised} raised; the first: {first}")
bad = name == "layers" and raised > 0
print("BUG: a LayerDrop list was taken as the chain, and training raises at random steps" if bad else "ok")
sys.exit(1 if bad else 0)
