"""Models, random policies and checks shared by the torch_exec tests (chain, offload, join, API; CPU and GPU).

Imported after ``pytest.importorskip("torch")`` by each test module."""
from __future__ import annotations

import functools

import torch
from torch import nn

import torch_exec as te
from conftest import random_policy  # noqa: F401  (the torch tests' random policies: one definition)
from torch_exec.meter import measure_peak
from torch_exec.split import CrossEntropyStage

DT = torch.float64





@functools.cache
def export_takes_generators() -> bool:
    """Whether this torch's ``torch.export`` captures a draw from a module's own ``torch.Generator`` (2.13 does; 2.11,
    the GPU machine's, raises NotImplementedError "argument of type: <class 'torch._C.Generator'>", and auto_checkpoint
    then takes the block fallback, or with ``capture="export"`` raises CaptureError naming it)."""
    class Draw(nn.Module):
        def __init__(self):
            super().__init__()
            self.gen = torch.Generator().manual_seed(0)

        def forward(self, x):
            return x + torch.randn(x.shape, generator=self.gen)
    try:
        torch.export.export(Draw(), (torch.zeros(2),), strict=False)
    except NotImplementedError:
        return False
    return True


# ---------------------------------------------------------------------------- models
def mlp(width=6, depth=5, inplace=False, seed=0):
    torch.manual_seed(seed)
    layers = [nn.Linear(4, width)]
    for d in range(depth):
        layers += [nn.ReLU(inplace=inplace) if d % 2 == 0 else nn.Tanh(), nn.Linear(width, width)]
    layers += [nn.Linear(width, 3)]
    return nn.Sequential(*layers).to(DT)


def convnet(seed=0, dropout=0.0, inplace=True, conv_tanh=False):
    """Conv/BatchNorm/ReLU (in place)/Dropout stages; ``conv_tanh``: one more conv and a tanh before the
    classifier."""
    torch.manual_seed(seed)
    layers = [nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=inplace),
              nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=inplace),
              nn.Dropout(dropout), nn.Conv2d(4, 5, 3, stride=2, padding=1), nn.BatchNorm2d(5), nn.ReLU()]
    if conv_tanh:
        layers += [nn.Conv2d(5, 5, 3, padding=1), nn.Tanh()]
    layers += [nn.Flatten(), nn.Dropout(dropout), nn.Linear(5 * 4 * 4, 3)]
    return nn.Sequential(*layers).to(DT)


class LinearStage(nn.Module):
    """A stage with one n x n ``Linear`` (``lin``); subclasses say what it does to the state."""

    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)


class Fork(LinearStage):
    def forward(self, x):
        return (x, torch.tanh(self.lin(x)))


class Mix(LinearStage):
    def forward(self, state):
        x, h = state
        return (x + h, self.lin(h) * x)


class Join(nn.Module):
    def forward(self, state):
        x, h = state
        return x * h


def loss_of(y):
    return (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).square().sum()


def wrap(model, **kwargs):
    """A CheckpointedSequential for CPU tests: CPU solver, one profiling pass, no warm-up, a 1 GiB budget
    (each overridable)."""
    kwargs.setdefault("backend", "cpu")
    kwargs.setdefault("profile_passes", 1)
    kwargs.setdefault("profile_warmup", 0)
    kwargs.setdefault("budget", "1GiB")
    return te.CheckpointedSequential(model, **kwargs)


# ---------------------------------------------------------------------------- CUDA (tests marked gpu)
def cuda_net(targets, device="cuda"):
    """A small conv net ending in a cross-entropy stage over ``targets``, on the CUDA device (``device``:
    the CPU rehearsals)."""
    torch.manual_seed(0)
    layers = []
    channels = [3, 32, 32, 64, 64, 128, 128]
    for c_in, c_out in zip(channels, channels[1:], strict=False):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
        if c_out != c_in and c_in != 3:
            layers.append(nn.MaxPool2d(2))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10), CrossEntropyStage(targets)]
    return nn.Sequential(*layers).to(device)


def budget_between(chain, where: float) -> int:
    """A budget ``where`` of the way from the least feasible budget of ``chain`` (0) to its store-all peak
    (1): feasible whatever the network. A fixed fraction of the store-all peak is not: cuda_net's least
    is 0.55 of its peak at batch 64 (a backward through a 64-channel 64x64 BatchNorm + ReLU holds its
    input, its tape, the output's gradient and the input's: four 64 MiB tensors)."""
    from gpusolve import store_all_peak_bytes
    from gpusolve.dp.minpeak import min_feasible_bytes
    lo, hi = min_feasible_bytes(chain), store_all_peak_bytes(chain)
    return int(lo + where * (hi - lo))


def measure_cuda_step(model, x):
    """Peak bytes of one step (forward and backward) above what was allocated before it (parameters,
    their gradients, allocated first as the profile assumes, and the input)."""
    for p in model.parameters():  # gradients allocated before the step, as the profile assumes
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = model(x)
    loss.backward()
    del loss
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def assert_grads_close(ref, model, buffers: bool = True) -> None:
    """Parameter gradients (and buffers) of ``model`` close to ``ref``'s, at the GPU tests' tolerances."""
    for p, q in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    if buffers:
        for b, c in zip(ref.buffers(), model.buffers(), strict=True):
            torch.testing.assert_close(c, b, rtol=1e-5, atol=1e-6)


def measured_step(module: nn.Module, step):
    """The CPU meter's reading of ``step()`` (a forward and backward of ``module``) once it is steady: the
    parameters' gradients allocated (zeros where there are none) and one step run first, so that what a
    first step makes lazily is not counted."""
    for p in module.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    step()
    _, reading = measure_peak(step)
    return reading


def optimizer_in_backward(model: nn.Module, calls: dict | None = None) -> dict:
    """PyTorch's optimizer step in the backward: an Adam of its own per parameter, stepped (and its gradient set to
    zero) from a post-accumulate-grad hook that counts its calls by parameter name in ``calls`` (returned)."""
    calls = {} if calls is None else calls
    for name, p in model.named_parameters():
        opt = torch.optim.Adam([p], lr=1e-2)

        def step(p, name=name, opt=opt):
            calls[name] = calls.get(name, 0) + 1
            opt.step()
            opt.zero_grad()
        p.register_post_accumulate_grad_hook(step)
    return calls
