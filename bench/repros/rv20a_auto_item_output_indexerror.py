"""A model that returns a Python number beside its output, computed with ``.item()`` in ``forward`` (a norm or an
accuracy logged by the training loop): 6 residual blocks (Linear 32 -> 64, tanh, Linear 64 -> 32), ``return x,
x.norm().item()``; input 4 x 16 x 32; ``auto_checkpoint(model, budget, backend="cpu")``, loss ``out[0].pow(2).mean()``.

Observed (CPU, torch 2.13): at "100%" (plain autograd's plan) the wrapper returns (Tensor, 58.20781707763672) as plain
autograd does, gradients equal. At "50%", at 99123 B (1.1 x the least budget the "1%" error names, 90112 B) and at
90112 B, the first call raises from inside the wrapper:
    File "torch_exec/auto.py", line 2483, in _call_scheduled
        leaves.append(outs[value])
    IndexError: tuple index out of range

Cause: torch_exec/auto.py ``AutoCheckpointed._call_scheduled``: ``cap.outputs`` lists the ``.item()`` value (a
symbolic float in the exported graph) as a "chain" output at an index past the tensors the executor returns (the chain
hands back tensors only), so ``outs[value]`` is out of range; the plain path returns the model's own outputs and is not
affected.

Expected: the model's outputs, the number included (computed from this call's values, not fixed at capture), or ONE
clear CaptureError naming the non-tensor output and the fix (return a tensor: ``x.norm().detach()``). Exits 1 while a
checkpointed step raises an IndexError (or returns another number than plain autograd's).

Run: GS_ROOT=<tree> python bench/repros/rv20a_auto_item_output_indexerror.py   (~5 s)"""
import copy
import sys

from _setup import nn, te, torch

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(6))

    def forward(self, x):
        for block in self.l:
            x = block(x)
        return x, x.norm().item()


torch.manual_seed(0)
base = Net()
x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
plain_out = copy.deepcopy(base)(x)

bad = False
for budget in ("100%", "50%", 99123):
    wrapped = te.auto_checkpoint(copy.deepcopy(base), budget, backend="cpu")
    try:
        out = wrapped(x)
        out[0].pow(2).mean().backward()
    except te.CaptureError as err:
        print(f"{budget}: refused: {str(err)[:150]}")
        continue
    except Exception as err:  # noqa: BLE001
        bad = True
        print(f"{budget}: the first call raised {type(err).__name__}: {err}")
        continue
    same = isinstance(out[1], float) and abs(out[1] - plain_out[1]) <= 1e-6 * abs(plain_out[1])
    print(f"{budget}: returned {type(out[1]).__name__} {out[1]} (plain autograd: {plain_out[1]})")
    bad |= not same

print("BUG: a .item() output beside the tensors breaks every checkpointed step" if bad else "ok")
sys.exit(1 if bad else 0)
