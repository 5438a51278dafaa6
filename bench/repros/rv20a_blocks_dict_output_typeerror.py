"""``auto_checkpoint(model, "60%", capture="blocks", backend="cpu")`` on a model whose blocks (an ``nn.ModuleList`` of 5
residual blocks, Linear 32 -> 64, tanh, Linear 64 -> 32) pass a dict to each other (``{"h": tensor}``; block i reads
``state["h"]``), a last module returning the tensor; input 4 x 16 x 32. (With the default capture torch.export takes the
model and trains it with plain autograd's gradients; ``capture="blocks"`` is the documented way to run forward hooks
at every step, and the fallback is also what any model export refuses gets.)

Observed (CPU, torch 2.13): the first call raises, from inside the block finder:
    auto.py _build -> _find_blocks -> probe -> _blocks_of:
        stale = [v for v in pytree.tree_leaves(list(out[1:])) if tuple_out ...
    TypeError: unhashable type: 'slice'

Cause: torch_exec/auto.py ``_blocks_of``: the ``stale`` comprehension evaluates its iterable ``out[1:]`` before its
condition ``tuple_out`` is tested, so a block output that is neither a tuple/list nor sliceable (a dict; also a
dataclass or ModelOutput-like mapping) raises TypeError instead of the list being passed over with a reason (as
"block 1 does not take block 0's output as its first argument" is for other lists). (A tensor output is sliced there
for nothing.)

Expected: ONE clear CaptureError naming the list and the reason (blocks returning a dict), with the manual route, as
for other lists the fallback cannot use; no TypeError. Exits 1 while the call raises anything but CaptureError (or
trains with gradients off plain autograd's).

Run: GS_ROOT=<tree> python bench/repros/rv20a_blocks_dict_output_typeerror.py   (~4 s)"""
import copy
import sys

from _setup import nn, te, torch

D = 32


class DictBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, state):
        x = state["h"] if isinstance(state, dict) else state
        return {"h": x + self.b(torch.tanh(self.a(x)))}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(DictBlock() for _ in range(5))

    def forward(self, x):
        state = x
        for block in self.blocks:
            state = block(state)
        return state["h"]


torch.manual_seed(0)
base = Net()
x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
ref = copy.deepcopy(base)
ref(x).pow(2).mean().backward()

model = copy.deepcopy(base)
wrapped = te.auto_checkpoint(model, "60%", capture="blocks", backend="cpu")
bad = False
try:
    wrapped(x).pow(2).mean().backward()
    off = [n for (n, p), q in zip(ref.named_parameters(), model.parameters())
           if q.grad is None or not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)]
    print(f"trained ({wrapped.capture.method}); gradients off or missing: {off or 'none'}")
    bad = bool(off)
except te.CaptureError as err:
    print(f"refused with CaptureError: {str(err)[:200]}")
except Exception as err:  # noqa: BLE001
    bad = True
    print(f"the first call raised {type(err).__name__}: {err}")

print("BUG: a block list passing dicts crashes the block finder with a TypeError" if bad else "ok")
sys.exit(1 if bad else 0)
