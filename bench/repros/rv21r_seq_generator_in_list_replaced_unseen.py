"""rv21r: a generator the loop replaces between steps inside a list attribute (``self.gens[0] = new``) is not
followed: recomputed stages draw other noise than their forward did.

Setup: CheckpointedSequential(budget="75%", backend="cpu") over 10 residual Noisy blocks (Linear 32 -> 64, tanh,
+ 0.5 * randn drawn from ``self.gens[0]``, Linear 64 -> 32; as rv21d_generator_replaced_between_steps.py), input
8 x 4 x 32; the generator held in a list attribute, which Note [Generators of the model's own] in
torch_exec/_util.py lists as seen); one step, then every block's ``gens[0]`` replaced by one new generator seeded 7;
the second step's parameter gradients compared with plain autograd's on a copy whose generators are replaced the
same way.  The same with the generator as a direct attribute (``self.gen = new``, keyed by the signature since
today) as the control.

Observed (CPU, torch 2.13), no error, no warning: s21_r: list case 0.113 max abs gradient difference from plain
autograd at the second step, the control 0; 83aea4b: 0.113 and 0.113 (today's keying fixed the direct attribute
only, while Note [Generators of the model's own] and docs/pytorch.md now say a generator in a list is the model's
own and "a generator attribute the loop replaces between steps is followed").

Cause: torch_exec/_util.py ``_state_key`` keys only the generators a module holds directly (``type(v) is
torch.Generator`` over its ``__dict__``), while ``generators_of`` (run once per signature, at profiling) also finds
those in lists, tuples, dicts and plain objects: a replaced one inside a container keeps the signature, and the
executor's entry records and replays the old generator (torch_exec/executor.py).

Expected: the gradients equal plain autograd's (the container's generator keyed too, or the generators looked up
again per call), or the case refused / documented as unseen.  Exits 1 while the list case's gradients differ.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy, sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")


class Noisy(nn.Module):
    def __init__(s, in_list, g):
        super().__init__()
        s.a, s.b, s.in_list = nn.Linear(32, 64), nn.Linear(64, 32), in_list
        if in_list:
            s.gens = [g]
        else:
            s.gen = g

    def gen_(s):
        return s.gens[0] if s.in_list else s.gen

    def put(s, g):
        if s.in_list:
            s.gens[0] = g
        else:
            s.gen = g

    def forward(s, x):
        z = torch.tanh(s.a(x))
        return x + s.b(z + 0.5 * torch.randn(z.shape, generator=s.gen_()))


def run(in_list):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)  # one generator, shared by the blocks (as in rv21d)
    net = nn.Sequential(*[Noisy(in_list, g) for _ in range(10)])
    ref = copy.deepcopy(net)
    x = torch.randn(8, 4, 32, generator=torch.Generator().manual_seed(1))
    w = te.CheckpointedSequential(net, budget="75%", backend="cpu")
    w(x).pow(2).mean().backward()
    ref(x).pow(2).mean().backward()
    for model in (net, ref):
        new = torch.Generator().manual_seed(7)
        for m in model:
            m.put(new)
    net.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    w(x).pow(2).mean().backward()
    ref(x).pow(2).mean().backward()
    return max((p.grad - q.grad).abs().max().item() for p, q in zip(net.parameters(), ref.parameters()))


d_list, d_attr = run(True), run(False)
print(f"generator in a list, replaced: grad max abs diff vs plain autograd {d_list:.3g}")
print(f"generator as an attribute, replaced (control): {d_attr:.3g}")
sys.exit(1 if d_list > 1e-6 else 0)
