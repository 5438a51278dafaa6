"""Noise from the model's own ``torch.Generator`` that a module holds in a list or dict attribute
(``self.gens = [g]`` / ``self.gens = {"noise": g}``: one generator per noise source, a registry of named
generators) rather than directly as an attribute. Note [Generators of the model's own] (torch_exec/_util.py,
commit 2b4a812) records and replays the generators "that the wrapped modules hold as attributes"; but
``generators_of`` looks only at ``vars(m).values()`` of each module, not into the lists/dicts there (which
``reachable_state`` does walk for plain callables). So the profiler's per-stage ``rng`` flag says no stage draws,
nothing is recorded, and each recomputed stage draws fresh noise from the generator in the backward.

A CheckpointedSequential of Linear / (noise, LayerNorm, Linear, Tanh, Linear) x 6 at "40%"; the generator reset to
the same state before each step in the wrapper and in a plain-autograd deepcopy.
Observed (torch 2.13 CPU, commit 2b4a812): held as an attribute: 1 generator found, 6 drawing stages, max |grad
diff| 0 and the same generator state after each step. Held in a list (and likewise a dict): 0 generators found,
0 drawing stages, the losses equal (0.0300387, 0.0349333) but max |grad - plain grad| 2.075e-03 and 2.247e-03
(list), 2.150e-03 and 2.171e-03 (dict; the figures move a little with the plan the timings give), and the
generator ends each step elsewhere than plain autograd's. No error, no warning.
Expected: plain autograd's gradients and generator state for the list/dict case too (walk the modules' container
attributes as reachable_state does), or a refusal/warning naming the generator. Exits 1 while not."""
import copy
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT

D = 64


class Noisy(nn.Module):
    def __init__(self, how, g):
        super().__init__()
        self.how = how
        if how == "attr":
            self.gen = g
        elif how == "list":
            self.gens = [g]
        else:
            self.gens = {"noise": g}

    def g(self):
        return {"attr": lambda: self.gen, "list": lambda: self.gens[0], "dict": lambda: self.gens["noise"]}[self.how]()

    def forward(self, h):
        return h + 0.1 * torch.randn(h.shape, generator=self.g())


def gen_of(mods):
    return next(m.g() for m in mods if isinstance(m, Noisy))


bad = False
for how in ("attr", "list", "dict"):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    mods = [nn.Linear(16, D)]
    for _ in range(6):
        mods += [Noisy(how, g), nn.LayerNorm(D), nn.Linear(D, 2 * D), nn.Tanh(), nn.Linear(2 * D, D)]
    mods += [nn.Linear(D, 5)]
    ref = nn.Sequential(*copy.deepcopy(mods))
    w = te.CheckpointedSequential(copy.deepcopy(mods), budget="40%", backend="cpu")
    x = torch.randn(64, 16)
    w.prepare(x)
    entry = next(iter(w._entries.values()))
    print(f"{how}: generators found {len(getattr(entry, 'generators', ()))}, drawing stages {sum(entry.rng[1:])}, "
          f"recomputed stages {sum(entry.recomputed[1:])}")
    for step in range(2):
        s = torch.Generator().manual_seed(100 + step).get_state()
        gen_of(ref).set_state(s)
        gen_of(w.modules()).set_state(s)
        la = ref(x).square().mean()
        la.backward()
        lb = w(x).square().mean()
        lb.backward()
        gd = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), w.parameters()))
        same = torch.equal(gen_of(ref).get_state(), gen_of(w.modules()).get_state())
        print(f"  step {step}: loss {la.item():.7f} / {lb.item():.7f}, max |grad - plain grad| {gd:.3e}, "
              f"generator state as plain autograd's: {same}")
        bad |= gd > 1e-6 or not same
        ref.zero_grad()
        w.zero_grad()
print("BUG: a generator held in a module's list/dict attribute is not replayed" if bad else "ok")
sys.exit(1 if bad else 0)
