"""A model that branches on its data with ``torch.cond`` (PyTorch's export-friendly control flow, the documented way to
write a data-dependent branch that ``torch.export`` captures): 6 residual blocks (Linear 32 -> 64, tanh,
Linear 64 -> 32), after the third ``x = torch.cond(x.sum() > 0, lambda x: self.g(x) * 2, lambda x:
torch.tanh(self.g(x)), (x,))`` with ``self.g = nn.Linear(32, 32)``; input 4 x 16 x 32; ``auto_checkpoint(model, budget,
backend="cpu")`` at "100%" and "60%". Plain autograd trains it (``torch.export.export`` takes it too).

Observed (CPU, torch 2.13): at both budgets the first call raises a CaptureError whose reasons are the project's own
machinery, not the model, and which names no fix that applies:
    "auto_checkpoint could not find a chain in Cond: torch.export: the model runs custom autograd Functions whose
    backward torch.export would drop (Note [Custom autograd Functions]): torch._higher_order_ops.cond.CondAutogradOp:
    its first call was not seen in a forward without grad; no nn.ModuleList/nn.Sequential of blocks could be the chain
    (lists tried: 'l': the model raised without grad (NotImplementedError: There was no rule registered for
    HigherOrderOperator cond and mode <torch_exec.auto._DrawsBetween object at 0x...>.Hint: set
    <torch_exec.auto._DrawsBetween object at 0x...>'s supports_higher_order_operators to True. ..."

Cause: torch_exec/auto.py's check of custom autograd Functions (Note [Custom autograd Functions],
``_custom_functions``) takes torch.cond's internal ``CondAutogradOp`` for a user Function (export keeps the ``cond``
higher-order op and its backward), and the block fallback's own ``TorchFunctionMode`` ``_DrawsBetween`` does not set
``supports_higher_order_operators``, so the model's forward raises NotImplementedError inside it; the message then
reports both as the model's failures.

Expected: torch.cond captured and trained like plain autograd (a ``cond`` node kept inside one stage), or ONE clear
CaptureError naming torch.cond and the manual route; never a Hint about the project's own TorchFunctionMode.
Exits 1 while the call raises a CaptureError that names ``_DrawsBetween`` or ``CondAutogradOp``, or anything else than
a CaptureError, or trains with gradients off plain autograd's.

Run: GS_ROOT=<tree> python bench/repros/rv20a_auto_torch_cond_refused_wrong_cause.py   (~6 s)"""
import copy
import sys

from _setup import nn, te, torch
from gpusolve import InfeasibleBudgetError

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class Cond(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(6))
        self.g = nn.Linear(D, D)

    def forward(self, x):
        for i, block in enumerate(self.l):
            x = block(x)
            if i == 2:
                x = torch.cond(x.sum() > 0, lambda x: self.g(x) * 2, lambda x: torch.tanh(self.g(x)), (x,))
        return x


torch.manual_seed(0)
base = Cond()
x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
ref = copy.deepcopy(base)
ref(x).pow(2).mean().backward()

bad = False
for budget in ("100%", "60%"):
    model = copy.deepcopy(base)
    wrapped = te.auto_checkpoint(model, budget, backend="cpu")
    try:
        wrapped(x).pow(2).mean().backward()
    except InfeasibleBudgetError as err:
        print(f"{budget}: {str(err)[:120]}")
        continue
    except te.CaptureError as err:
        text = str(err)
        wrong = "_DrawsBetween" in text or "CondAutogradOp" in text
        bad |= wrong
        print(f"{budget}: CaptureError{' (names the project internals)' if wrong else ''}: {text[:300]}")
        continue
    except Exception as err:  # noqa: BLE001
        bad = True
        print(f"{budget}: raised {type(err).__name__}: {str(err)[:200]}")
        continue
    off = [n for (n, p), q in zip(ref.named_parameters(), model.parameters())
           if not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)]
    print(f"{budget}: trained ({wrapped.capture.method}); gradients off plain autograd's: {off or 'none'}")
    bad |= bool(off)

print("BUG: torch.cond is refused with the project's own internals as the cause" if bad else "ok")
sys.exit(1 if bad else 0)
