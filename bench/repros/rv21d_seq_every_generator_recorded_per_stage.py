"""Each block with a ``torch.Generator`` of its own (``self.gen = torch.Generator().manual_seed(i)``, noise
``torch.randn(shape, generator=self.gen)``: per-layer reproducible noise, Note [Generators of the model's own]). 10
residual blocks (Linear 32 -> 64, tanh, + 0.5 * noise, Linear 64 -> 32), input 8 x 4 x 32, on the CPU;
``CheckpointedSequential(blocks, budget="10%", backend="cpu")``, whose InfeasibleBudgetError names the least
budget, for three versions of the same blocks: noise from torch's default generator, from one generator all
blocks share, and from a generator per block.

Observed (CPU, torch 2.13): least budgets 104 896 B (46.6 % of plain autograd's 225 408 B peak) with the default
generator, 160 512 B (71.3 %) with one shared generator, and 661 056 B with a generator per block: 2.93x plain
autograd's peak, so the model cannot be checkpointed at any budget ("raise the budget to at least 225408 B", plain
autograd). The blocks' activations are the same in all three.

Cause (a guess): every recomputed stage that draws records the state of every generator the wrapped modules hold
(torch_exec/executor.py ``Runtime.run_stage``: ``U.RngState.capture(self.devices, self.generators)``, with
``entry.generators`` the whole model's; ``executor_chain`` reserves that for each drawing stage), 5 056 B per CPU
generator: with a generator per block each stage records all ten, 10 x 5 056 B, where its forward draws from one.
The blocks here are tiny (4 KiB activations), so the states dominate; the waste grows as L^2 x 5 056 B for L blocks
with a CPU generator each.

Expected: a stage records the generators it draws from (those its own modules hold or its callables reach, or
those whose state its profiled run moved), so that a generator per block costs about what one shared generator
costs (the least budget below plain autograd's peak). Exits 1 while the least budget with a generator per block
is above plain autograd's peak (or more than 1.5x the shared generator's least).

Run: GS_ROOT=<tree> python bench/repros/rv21d_seq_every_generator_recorded_per_stage.py   (~10 s)"""
import re
import sys

from _setup import nn, te, torch
from gpusolve import InfeasibleBudgetError

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
least = {}
for way in ("default", "shared", "per block"):
    shared = torch.Generator().manual_seed(1)
    gens = [None if way == "default" else shared if way == "shared" else torch.Generator().manual_seed(i)
            for i in range(10)]
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(g) for g in gens])
    try:
        te.CheckpointedSequential(model, budget="10%", backend="cpu")(X)
        print(f"{way}: 10% fits")
        least[way] = 0
        continue
    except InfeasibleBudgetError as err:
        msg = str(err)
    plain = int(re.search(r"plain autograd's (?:measured )?peak (\d+) B", msg).group(1))
    got = re.search(r"least budget, (\d+) B|minimum feasible budget [^(]*\((\d+) B\)", msg)
    least[way] = int(got.group(1) or got.group(2))
    print(f"{way}: least budget {least[way]} B = {least[way] / plain:.2f} x plain autograd's peak {plain} B")
bad = least["per block"] > plain or least["per block"] > 1.5 * least["shared"]
print("BUG: every recomputed stage records every generator of the model" if bad else "ok")
sys.exit(1 if bad else 0)
