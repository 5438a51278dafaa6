"""rv20r: a counter kept by a module given as ``modules=`` (reached by a stage, not registered under it) is re-run by
every profiling pass and recomputation, silently; the rv20a refusal (Note [Attributes a forward writes]) only
looks at the stage modules' own submodules.

Setup: ``Shared``: ``self.calls += 1; return self.l(x) * (1 + 0.1 * self.calls)`` (Linear(16, 16)); ``Uses(sh)``
calls it without registering it (``self.__dict__["m"] = sh``, a shared/tied module); ``seq = Sequential(3 x
(Linear, Tanh), Uses(sh), 3 x (Linear, Tanh))``; ``CheckpointedSequential(seq, budget="75%", modules=[sh])``,
two steps of ``out.pow(2).mean()`` against plain autograd on a copy.

Observed (CPU): after step 1 ``sh.calls`` is 19 (plain autograd: 1), after step 2 38 (2); losses 0.023647 vs
0.022388, then 0.025852 vs 0.022366; parameter gradients 3.1e-2 off plain autograd's; no error, no warning.  Had
``Shared`` been registered inside a stage, the first call would raise AttributeWriteError.

Cause: torch_exec/profiler.py ``_module_scalars(self.fns)`` walks ``fn.modules()`` of the stage modules only; the
extras (``modules=``) and other modules the stages reach are not compared by ``_refuse_attribute_writes``.

Expected: the refusal covers every module the step's stages reach (the extras at least), as the parameter checks
do; here an AttributeWriteError naming Shared.calls, or gradients equal to plain autograd's.  Exits 1 while the
step trains silently differently.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")


class Shared(nn.Module):
    def __init__(s):
        super().__init__()
        s.l, s.calls = nn.Linear(16, 16), 0

    def forward(s, x):
        s.calls += 1
        return s.l(x) * (1 + 0.1 * s.calls)


class Uses(nn.Module):
    def __init__(s, m):
        super().__init__()
        s.__dict__["m"] = m  # reached, not registered: passed as modules=

    def forward(s, x):
        return torch.tanh(s.m(x)) + x


def build():
    torch.manual_seed(0)
    sh = Shared()
    return sh, nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3)], Uses(sh),
                             *[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3)])


sh, seq = build()
sh_ref, ref = build()
x = torch.randn(8, 16)
try:
    w = te.CheckpointedSequential(seq, budget="75%", modules=[sh])
    for step in range(2):
        a, b = w(x).pow(2).mean(), ref(x).pow(2).mean()
        a.backward()
        b.backward()
        print(f"step {step + 1}: loss {a.item():.6f} (plain autograd {b.item():.6f}), Shared.calls {sh.calls} "
              f"(plain autograd {sh_ref.calls})")
except te.AttributeWriteError as e:
    print(f"refused: {str(e)[:120]}")
    sys.exit(0)
d = max((p.grad - q.grad).abs().max().item()
        for p, q in zip([*seq.parameters(), *sh.parameters()], [*ref.parameters(), *sh_ref.parameters()]))
print(f"gradients: max abs diff vs plain autograd {d:.3g}")
sys.exit(1 if d > 1e-6 or sh.calls != sh_ref.calls else 0)
