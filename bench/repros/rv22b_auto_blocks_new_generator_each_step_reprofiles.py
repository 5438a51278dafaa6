"""rv22b: auto_checkpoint's block fallback captures, profiles and solves again at every step when the training loop
puts a new generator on the modules each step, though its stages run live and the step's runtime looks the
generators up where profiling found them (as CheckpointedSequential now does, with one profile); none of those steps
is measured.

Setup: 6 blocks ``tanh(Linear(32, 32)(h) + 0.5 * randn(h.shape, generator=self.gen))`` (one generator shared by the
blocks), a Linear(32, 1) head; ``auto_checkpoint(model, "95%", backend="cpu", capture="blocks", profile_passes=1)``,
``measure_memory(6)``; 6 steps on a 64 x 4 x 32 input, each putting ``torch.Generator().manual_seed(100 * step)`` on
every block first (a generator per step or epoch: Note [Generators of the model's own] in torch_exec/_util.py), a
deepcopy of the model run as plain autograd the same way.

Observed (CPU, torch 2.13): s22_rev2 (b9aa889): 6 profiles and 6 captures in 6 steps, no memory record (every step
profiles, and a profiling call is not measured); gradients equal plain autograd's. With ``GeneratorSites.key``
returning () (this script's ``--unkeyed``, a check of the cause, not a fix): 1 profile, 1 capture, gradients still
equal, 5 records.

Cause: torch_exec/auto.py ``AutoCheckpointed._key`` keys ``U.GeneratorSites.key()`` (the generators' identities)
for every capture, which a graph torch.export made needs (it holds the generator as a constant), but the block
fallback runs the model's own modules live, and its executor's Runtime records and replays ``GeneratorSites.now()``
(the generators at their sites at each call), which alone keeps the gradients right: keying re-profiles it at
every step, the cost the session's change removed from CheckpointedSequential
(bench/repros/rv21r_seq_new_generator_each_step_reprofiles.py), and every capture is kept (one per step).

Expected: the block fallback profiles once (generators not keyed where no graph holds them), and its steps are
measured. Exits 1 while the 6 steps take more than one profile.

Run: python bench/repros/rv22b_auto_blocks_new_generator_each_step_reprofiles.py   (~3 s)
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy
import sys

from _setup import nn, te, torch
import torch_exec._util as U
import torch_exec.executor as E

D = 32
if "--unkeyed" in sys.argv:  # the cause, checked: the generators left out of the capture's key
    U.GeneratorSites.key = lambda self: ()


class Block(nn.Module):
    def __init__(self, gen):
        super().__init__()
        self.l, self.gen = nn.Linear(D, D), gen

    def forward(self, h):
        return torch.tanh(self.l(h) + 0.5 * torch.randn(h.shape, generator=self.gen))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.blocks = nn.ModuleList(Block(gen) for _ in range(6))
        self.head = nn.Linear(D, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = Net()
ref = copy.deepcopy(model)
w = te.auto_checkpoint(model, "95%", backend="cpu", capture="blocks", profile_passes=1)
w.measure_memory(6)
profiles, profile_dict = [0], E.profile_dict


def counted(*args, **kwargs):
    profiles[0] += 1
    return profile_dict(*args, **kwargs)


E.profile_dict = counted
x = torch.randn(64, 4, D, generator=torch.Generator().manual_seed(1))
diff = 0.0
for step in range(6):
    for m, run in ((model, w), (ref, ref)):
        gen = torch.Generator().manual_seed(100 * step)  # the loop's generator of this step
        for block in m.blocks:
            block.gen = gen
        run(x).pow(2).mean().backward()
    diff = max(diff, max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters())))
    model.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
records = list(w.memory_report())
print(f"6 steps, a new generator each: {profiles[0]} profiles, {len(w._captures)} captures, {len(records)} memory "
      f"records; gradients {diff:.3g} off plain autograd's")
sys.exit(1 if profiles[0] > 1 else 0)
