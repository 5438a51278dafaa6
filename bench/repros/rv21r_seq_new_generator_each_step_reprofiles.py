"""rv21r: a loop that gives the blocks a new torch.Generator at every step now re-profiles and re-solves at every
step, silently, and keeps every step's entry.

Setup: CheckpointedSequential(budget="75%", backend="cpu") over 10 residual blocks (Linear 32 -> 64, tanh, + 0.5 *
randn drawn from ``self.gen``, Linear 64 -> 32; rv21d_generator_replaced_between_steps.py's model), input 8 x 4 x
32; 12 steps, each ``g = torch.Generator().manual_seed(step); for m in net: m.gen = g``; profile_dict calls
counted, warnings recorded (the CPU timing warning aside).

Observed (CPU, torch 2.13, s21_r): 12 profiles in 12 steps (4.01 s and 3.92 s in all, two runs), 12 entries kept,
no warning.  A loop
that reseeds one generator instead profiles once (1 profile in 4 steps).  At 83aea4b: 1 profile in 12 steps (0.99 s), 1 entry, but gradients
off plain autograd's (rv21d_generator_replaced_between_steps.py).

Cause: torch_exec/_util.py ``_state_key`` keys a module's Generator attributes by object (today's fix for
rv21d_generator_replaced_between_steps); CheckpointedSequential's entries (torch_exec/executor.py ``_entries``) are
unbounded and nothing says why a signature is new; auto_checkpoint warns after MANY_CAPTURES captures, this wrapper
not at all.  Note [Generators of the model's own] documents the re-profiling, but the user is not told.

Expected: CheckpointedSequential (which runs the model's code live) looks the generators up at each call instead of
keying them (one profile), or at least one warning naming the replaced generator attribute and the remedy
(reseed one: ``self.gen.manual_seed(step)``).  Exits 1 while it re-profiles more than once without such a warning.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, time, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
import torch_exec.executor as E
import torch_exec.profiler as P

count = [0]
orig = P.profile_dict


def counted(*a, **k):
    count[0] += 1
    return orig(*a, **k)


P.profile_dict = E.profile_dict = counted


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.a, s.b, s.gen = nn.Linear(32, 64), nn.Linear(64, 32), torch.Generator()

    def forward(s, x):
        z = torch.tanh(s.a(x))
        return x + s.b(z + 0.5 * torch.randn(z.shape, generator=s.gen))


torch.manual_seed(0)
net = nn.Sequential(*[Block() for _ in range(10)])
x = torch.randn(8, 4, 32)
w = te.CheckpointedSequential(net, budget="75%", backend="cpu")
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    t = time.perf_counter()
    for step in range(12):
        g = torch.Generator().manual_seed(step)
        for m in net:
            m.gen = g
        w(x).pow(2).mean().backward()
told = [str(m.message)[:160] for m in ws if "enerator" in str(m.message)]
print(f"{count[0]} profiles in 12 steps ({time.perf_counter() - t:.2f} s), {len(getattr(w, '_entries', {}))} entries; "
      f"warnings naming a generator: {told[:1] or 'none'}")
sys.exit(1 if count[0] > 1 and not told else 0)
