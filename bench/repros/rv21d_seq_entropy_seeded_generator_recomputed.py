"""A stage that makes a new ``torch.Generator`` at each call seeded from the OS (``g = torch.Generator(); g.seed()``,
or ``seed=None`` helpers, noise that is random at every call and independent of torch's global state) and draws from
it. 10 residual blocks (Linear 32 -> 64, tanh, + 0.5 * ``torch.randn(shape, generator=g)``, Linear 64 -> 32), input
8 x 4 x 32, loss ``out.pow(2).mean()``, one call and backward under ``CheckpointedSequential(blocks, budget,
backend="cpu")`` at "60%" and "30%". Plain autograd cannot be rerun with the same noise, so the script records the
noise each block's code draws (in a list outside the model): the forward's draws are the first 10; the truth is plain
autograd's gradient of the same blocks fed exactly that noise.

Observed (CPU, torch 2.13), no error, no warning about it:
  60%: loss 3.115463, equal to plain autograd's at the forward's noise; 6 recomputed draws; gradients 1.02e-01 off;
  30%: loss 3.166198 (equal too); 37 recomputed draws; gradients 9.22e-02 off
(one run; the noise, so the figures, change from run to run).

Cause (a guess): a recomputed stage is replayed from the recorded states of torch's default generators and of the
generators the model holds (Note [Generators of the model's own], torch_exec/_util.py); a generator made and seeded
from the OS inside the call cannot be replayed, so a recomputation draws other noise than the forward and the stage's
gradient is taken at values the forward never computed. Nothing checks it: the profiler's two timing passes
(``RngState`` restored between them, Note [Attributes a forward writes] in torch_exec/profiler.py) draw the same
torch numbers and could compare the stage's outputs, but compare scalar attributes only.

Expected: the gradient of the forward that ran, or ONE clear error at the first call naming the stage whose outputs
differ from the same inputs and RNG state (a generator the wrapper cannot replay). Exits 1 while the gradients
differ from the truth without an error.

Run: GS_ROOT=<tree> python bench/repros/rv21d_seq_entropy_seeded_generator_recomputed.py   (~10 s)"""
import copy
import sys

from _setup import nn, te, torch

D = 32
DRAWN = []  # every noise tensor the blocks' code draws, in order


class Block(nn.Module):
    def __init__(self, given=None):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.given = given  # the truth's copy reads the forward's noise from here

    def forward(self, h):
        z = torch.tanh(self.a(h))
        if self.given is None:
            g = torch.Generator()
            g.seed()  # from the OS: other noise at every call
            noise = torch.randn(z.shape, generator=g)
            DRAWN.append(noise)
        else:
            noise = self.given
        return h + self.b(z + 0.5 * noise)


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))
torch.manual_seed(0)
base = nn.Sequential(*[Block() for _ in range(10)])
bad = False
for budget in ("60%", "30%"):
    model = copy.deepcopy(base)
    wrapped = te.CheckpointedSequential(model, budget=budget, backend="cpu")
    wrapped(X)  # the first call profiles: its draws are not the step's
    DRAWN.clear()
    loss = wrapped(X).pow(2).mean()
    forward_noise = list(DRAWN[:10])
    loss.backward()
    truth = copy.deepcopy(base)
    for block, noise in zip(truth, forward_noise):
        block.given = noise
    ref = truth(X).pow(2).mean()
    ref.backward()
    gd = max((p.grad - q.grad).abs().max().item() for p, q in zip(truth.parameters(), model.parameters()))
    print(f"CheckpointedSequential {budget}: loss {loss.item():.6f}, plain autograd at the forward's noise "
          f"{ref.item():.6f}; {len(DRAWN) - 10} recomputed draws; max |grad - plain grad at the forward's noise| "
          f"{gd:.2e}")
    bad |= gd > 1e-5
print("BUG: a stage whose noise cannot be replayed is recomputed with other noise, silently" if bad else "ok")
sys.exit(1 if bad else 0)
