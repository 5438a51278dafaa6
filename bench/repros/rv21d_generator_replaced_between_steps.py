"""A training loop that gives the model a new ``torch.Generator`` at each step (``g =
torch.Generator().manual_seed(100 * step); for b in model: b.gen = g``: per-step reproducible noise, a generator
rebuilt after loading a checkpoint or per epoch), which the blocks' forwards draw from (``torch.randn(shape,
generator=self.gen)``): the model's own generator, as Note [Generators of the model's own] in torch_exec/_util.py
supports. 10 residual blocks (Linear 32 -> 64, tanh, + 0.5 * noise, Linear 64 -> 32), input 8 x 4 x 32 (x1, x2, x3 at
steps 0-2), loss ``out.pow(2).mean()``, SGD lr 0.05, 3 steps, against plain autograd;
``CheckpointedSequential(blocks, budget, backend="cpu")``, ``auto_checkpoint(nn.Sequential(*blocks), budget,
backend="cpu")`` (torch.export) and the same with ``capture="blocks"``, at "75%" and "85%".

Observed (CPU, torch 2.13), no error, no warning about it; plain autograd's losses 3.286042, 6.790236, 10.780576:
  CheckpointedSequential 75%: 3.286042, 6.790236, 10.792108, gradients 1.38e-01 off; 85%: 10.805616 at step 2, 1.31e-01
  auto_checkpoint (export) 75% and 85%: 3.286042, 6.509498, 10.604126, gradients 1.54e-01 off
  capture="blocks" 75%: 10.825785 at step 2, 1.49e-01 off; 85%: 10.805616, 1.31e-01 off
and each step's generator ends the step elsewhere than plain autograd's, in every run.
(One run: past step 0 the figures vary from run to run, as the plan follows measured times.)

Cause (a guess): the generators are found once per input signature, when it is profiled (torch_exec/executor.py
``CheckpointedSequential._build``: ``generators = U.generators_of(...)``, kept in the entry; the join wrapper reuses
the entry's), and the executor records and replays those objects only (``Runtime.run_stage``): a generator put on the
modules later is not recorded, so its recomputed stages draw the next numbers instead of their forward's, and it
ends each step elsewhere. Under export the generator object is a constant of the captured graph (Note [What a
captured graph fixes] in torch_exec/auto.py), and the input signature (``_state_key``) keys scalar and tensor
attributes but not a Generator attribute: the graph draws from the first step's generator at every step.

Expected: plain autograd's losses, gradients and generator states (look the generators up at each step, as the
modules' training flags are; key a Generator attribute in the signature), or ONE clear error at the call naming the
replaced generator. Exits 1 while a loss or a gradient differs.

Run: GS_ROOT=<tree> python bench/repros/rv21d_generator_replaced_between_steps.py   (~40 s)"""
import copy
import sys

from _setup import nn, te, torch

D = 32


class Block(nn.Module):
    def __init__(self, gen):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.gen = gen

    def forward(self, h):
        z = torch.tanh(self.a(h))
        return h + self.b(z + 0.5 * torch.randn(z.shape, generator=self.gen))


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def train(model, run):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out = []
    for step in range(3):
        gen = torch.Generator().manual_seed(100 * step)  # the loop's new generator for this step
        for block in model:
            block.gen = gen
        loss = run(X * (1 + step)).pow(2).mean()
        loss.backward()
        out.append((loss.item(), [p.grad.clone() for p in model.parameters()], gen.get_state()))
        opt.step()
        opt.zero_grad()
    return out


torch.manual_seed(0)
first = torch.Generator().manual_seed(1)
base = nn.Sequential(*[Block(first) for _ in range(10)])
ref = copy.deepcopy(base)
plain = train(ref, ref)
print(f"plain autograd: losses {[round(s[0], 6) for s in plain]}")
wrappers = {"CheckpointedSequential": lambda m, b: te.CheckpointedSequential(m, budget=b, backend="cpu"),
            "auto_checkpoint": lambda m, b: te.auto_checkpoint(m, b, backend="cpu"),
            "auto_checkpoint capture='blocks'": lambda m, b: te.auto_checkpoint(m, b, backend="cpu", capture="blocks")}
bad = False
for name, wrap in wrappers.items():
    for budget in ("75%", "85%"):
        model = copy.deepcopy(base)
        got = train(model, wrap(model, budget))
        gd = max((a - b).abs().max().item() for (_, ga, _), (_, gb, _) in zip(plain, got) for a, b in zip(ga, gb))
        same = all(torch.equal(a[2], b[2]) for a, b in zip(plain, got))
        print(f"{name} {budget}: losses {[round(s[0], 6) for s in got]}, max |grad - plain grad| {gd:.2e}, "
              f"the step's generator after each step as plain autograd's: {same}")
        bad |= gd > 1e-6 or any(abs(a[0] - b[0]) > 1e-6 for a, b in zip(plain, got)) or not same
print("BUG: a generator the loop puts on the modules after the first step is not replayed, silently" if bad else "ok")
sys.exit(1 if bad else 0)
