"""A model with a lazy module (``nn.LazyLinear(32)`` as its input layer, then 6 residual blocks: Linear 32 -> 64, tanh,
``F.dropout(0.3)`` + 0.1 * ``torch.randn`` noise, Linear 64 -> 32; loss ``out.pow(2).mean()``), input 8 x 4 x 32,
wrapped before its first call: ``auto_checkpoint(model, "60%", backend="cpu")``; the same model (same
``torch.manual_seed(0)`` at construction) trained by plain autograd; ``torch.manual_seed(9)`` before each one's first
call, then one step of SGD (lr 0.05, the optimizer made after the first backward, as lazy modules need) and a second
call.

A lazy module draws its initial weights from torch's default generator in its first forward. Plain autograd does it
at the first call, from the state the loop seeded; the draws of that call's dropout come after.

Observed (CPU, torch 2.13), no error, no warning about it:
  plain autograd: losses 0.864542, 2.288367
  auto_checkpoint 60%: losses 0.913692, 2.210633; the lazy layer's initial weights differ from plain autograd's
  (largest difference 3.343e-01), and torch's RNG state after the first step differs.

Cause (a guess): preparing (the probe, torch_exec/auto.py ``_probe_model``, then capture and profiling) runs the
forward first, which materialises the lazy weights, and then puts torch's RNG state back (Note [Probing the model]:
"Preparing leaves ... RNG state as they were"); the step's dropout masks then start from the state the
initialisation should have moved on from, and the weights are drawn at another point than plain autograd draws them.
The RNG state after the step misses the initialisation's draws.

Expected: plain autograd's initial weights, loss, gradients and RNG state (materialise lazy modules once, at the first
call, keeping their draws), or ONE clear error naming the uninitialised parameters and the fix (call the model once
before wrapping it). CheckpointedSequential on the same layers raises torch's own "Attempted to use an uninitialized
parameter ... Call `forward` with a dummy batch to initialize the parameters" (acceptable). Exits 1 while the
wrapper's weights, loss or RNG state after the first step differ from plain autograd's without an error.

Run: GS_ROOT=<tree> python bench/repros/rv21d_auto_lazy_module_init_draws.py   (~10 s)"""
import sys

from _setup import F, nn, te, torch

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, h):
        z = F.dropout(torch.tanh(self.a(h)), 0.3, self.training)
        return h + self.b(z + 0.1 * torch.randn(z.shape))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.LazyLinear(D)
        self.blocks = nn.Sequential(*[Block() for _ in range(6)])

    def forward(self, x):
        return self.blocks(self.inp(x)).pow(2).mean()


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def train(wrap):
    torch.manual_seed(0)
    model = Net()
    run = wrap(model)
    torch.manual_seed(9)
    losses = []
    loss = run(X)
    loss.backward()
    losses.append(loss.item())
    weight = model.inp.weight.detach().clone()
    state = torch.get_rng_state()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt.step()
    opt.zero_grad()
    losses.append(run(X * 2).item())
    return weight, losses, state


pw, pl, ps = train(lambda m: m)
ww, wl, ws = train(lambda m: te.auto_checkpoint(m, "60%", backend="cpu"))
same_w, same_s = torch.equal(pw, ww), torch.equal(ps, ws)
print(f"plain autograd: losses {[round(v, 6) for v in pl]}")
print(f"auto_checkpoint 60%: losses {[round(v, 6) for v in wl]}; the lazy layer's initial weights as plain autograd's: "
      f"{same_w} (max difference {(pw - ww).abs().max().item():.3e}); RNG state after the first step as plain "
      f"autograd's: {same_s}")
bad = not same_w or not same_s or any(abs(a - b) > 1e-6 for a, b in zip(pl, wl))
print("BUG: a lazy module's initial draws are not those of plain autograd, silently" if bad else "ok")
sys.exit(1 if bad else 0)
