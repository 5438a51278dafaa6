"""A model that calls ``retain_grad()`` in ``forward`` on an intermediate it returns, so that the training loop can
read the gradient of that feature map (saliency, gradient-norm logging, Grad-CAM style code): 6 residual blocks
(Linear 32 -> 64, tanh, Linear 64 -> 32), after the third ``h = x; h.retain_grad()``, ``return x, h``; input
4 x 16 x 32; loss ``out.pow(2).mean()``; ``auto_checkpoint(model, budget, backend="cpu")``.

Observed (CPU, torch 2.13): plain autograd fills ``h.grad`` (sum of |h.grad| 2.4377). Through the wrapper, at "100%"
and at 126156 B (1.1 x the least budget the "1%" error names, 114688 B), ``h.grad`` is None after the backward, with
no error and no warning; the parameters' gradients equal plain autograd's.

Cause: torch.export keeps operations, not ``retain_grad`` (a hook on the tensor, like ``register_hook``): the captured
graph's ``h`` is a new tensor without it. torch_exec/auto.py watches ``Tensor.register_hook`` in the forward and
refuses it naming the line (Note [Gradient hooks registered in the forward], ``_TensorHooks``), but
``Tensor.retain_grad`` is not watched, so it is dropped silently.

Expected: ``h.grad`` as plain autograd's (retain the returned tensor's gradient), or the same one-line CaptureError
as for ``register_hook``, naming the line and the fix (return the tensor and take its gradient with
``torch.autograd.grad``, or capture="blocks"). Exits 1 while the wrapper's ``h.grad`` is None where plain autograd's
is set.

Run: GS_ROOT=<tree> python bench/repros/rv20a_auto_retain_grad_in_forward_dropped.py   (~5 s)"""
import copy
import sys

from _setup import nn, te, torch
import gpusolve

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
        h = None
        for i, block in enumerate(self.l):
            x = block(x)
            if i == 2:
                h = x
                h.retain_grad()
        return x, h


torch.manual_seed(0)
base = Net()
x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
out, h = copy.deepcopy(base)(x)
out.pow(2).mean().backward()
print(f"plain autograd: h.grad sum |.| = {h.grad.abs().sum().item():.4f}")

probe = te.auto_checkpoint(copy.deepcopy(base), "1%", backend="cpu")
try:
    probe(x)[0].pow(2).mean().backward()
    least = None
except gpusolve.InfeasibleBudgetError as err:
    least = int(err.min_bytes * 1.1)
except te.CaptureError as err:  # a clear refusal (the expected fix) is fine
    print(f"1%: refused: {str(err)[:150]}")
    least = None

bad = False
for budget in ("100%", least):
    if budget is None:
        continue
    wrapped = te.auto_checkpoint(copy.deepcopy(base), budget, backend="cpu")
    try:
        out2, h2 = wrapped(x)
        out2.pow(2).mean().backward()
    except te.CaptureError as err:
        print(f"{budget}: refused: {str(err)[:150]}")
        continue
    got = None if h2.grad is None else h2.grad.abs().sum().item()
    print(f"{budget}: wrapper h.grad = {'None' if got is None else f'sum |.| {got:.4f}'}")
    bad |= got is None or not torch.allclose(h2.grad, h.grad, rtol=1e-5, atol=1e-6)

print("BUG: retain_grad() in forward is dropped by the capture, silently" if bad else "ok")
sys.exit(1 if bad else 0)
