"""``auto_checkpoint(model, "60%", backend="cpu", capture="blocks")`` on 10 residual blocks (an nn.Sequential; Linear
32 -> 64, tanh, + 0.5 * noise, Linear 64 -> 32) whose noise comes from a ``torch.Generator`` the wrapper does not
see (Note [Generators of the model's own] in torch_exec/_util.py): ``global``, a module-level generator the forward
names; ``object``, a generator held by a plain Python object on each block (``self.sampler.g``). Input 8 x 4 x 32,
one call.

Observed (CPU, torch 2.13): both raise CaptureError "running the blocks of '' as one chain changes the model's
outputs (the model uses a block's output for more than the next block, or its code between the blocks depends on
when they run)". Each block's output goes to the next block only, and there is no code between the blocks: the
outputs changed because the check's runs drew other noise from the generator it does not record. The message sends
the user after the model's structure; nothing names random numbers or the generator. (The same blocks as
CheckpointedSequential stages, or through export, train silently wrong: rv21d_seq_global_generator_unseen.py,
rv21d_seq_generator_in_plain_object_unseen.py.)

Cause (a guess): the block fallback's substitution check (torch_exec/auto.py, Note [Block fallback]) runs the model
and the chain from torch's recorded RNG state and compares their outputs; a generator ``generators_of`` does not see
is not put back between the runs, so the outputs differ, and the difference is blamed on the structure.

Expected: the blocks trained with plain autograd's gradients, or a refusal that names the cause (the forward draws
from a generator the wrapper cannot record: keep it as a module attribute). Exits 1 while the refusal blames the
structure, or the wrapper trains with other gradients than plain autograd's. (Until session 21f this exited 1 on any
run that trained; the wrapper now records both generators, Note [Generators of the model's own], and the check
compares the step's loss and gradients with plain autograd's instead. A third case, ``helper``, keeps a generator the
wrapper still does not see: a global named only by a helper function the forward calls; it must be refused naming
the random draws.)

Run: GS_ROOT=<tree> python bench/repros/rv21d_blocks_unseen_generator_refused_wrong_cause.py   (~10 s)"""
import copy
import re
import sys

from _setup import nn, te, torch
from gpusolve import InfeasibleBudgetError

D = 32
NOISE_GEN = torch.Generator().manual_seed(11)
HELPER_GEN = torch.Generator().manual_seed(5)


def helper_noise(shape):
    """Draws from a global the forward does not name itself."""
    return torch.randn(shape, generator=HELPER_GEN)


class Sampler:
    def __init__(self):
        self.g = torch.Generator().manual_seed(3)


class Block(nn.Module):
    def __init__(self, where):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.where = where
        self.sampler = Sampler()

    def forward(self, h):
        z = torch.tanh(self.a(h))
        if self.where == "helper":
            return h + self.b(z + 0.5 * helper_noise(z.shape))
        gen = NOISE_GEN if self.where == "global" else self.sampler.g
        return h + self.b(z + 0.5 * torch.randn(z.shape, generator=gen))


X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def step(model, run):
    NOISE_GEN.manual_seed(11)
    HELPER_GEN.manual_seed(5)
    for block in model:
        block.sampler.g.manual_seed(3)
    loss = run(X).pow(2).mean()
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters()]


bad = False
for where in ("global", "object", "helper"):
    torch.manual_seed(0)
    base = nn.Sequential(*[Block(where) for _ in range(10)])
    ref = copy.deepcopy(base)
    plain_loss, plain_grads = step(ref, ref)
    try:
        try:
            model = copy.deepcopy(base)
            loss, grads = step(model, te.auto_checkpoint(model, "60%", backend="cpu", capture="blocks"))
        except InfeasibleBudgetError as err:  # the generators' recorded states count in a CPU budget: the least
            least = min(100.0, float(re.search(r'needs at least ([0-9.]+)%', str(err)).group(1)) + 0.5)
            model = copy.deepcopy(base)
            loss, grads = step(model, te.auto_checkpoint(model, f"{least:.1f}%", backend="cpu", capture="blocks"))
        gd = max((a - b).abs().max().item() for a, b in zip(plain_grads, grads))
        print(f"{where}: trained; loss {loss:.6f} (plain autograd {plain_loss:.6f}), max |grad - plain grad| {gd:.2e}")
        bad |= where == "helper" or gd > 1e-6 or abs(loss - plain_loss) > 1e-6
    except te.CaptureError as err:
        msg = str(err)
        print(f"{where}: CaptureError: {msg[:400]}")
        bad |= not any(w in msg.lower() for w in ("generator", "random"))
print("BUG: an unseen generator is refused as a structural problem, or trains wrong" if bad else "ok")
sys.exit(1 if bad else 0)
