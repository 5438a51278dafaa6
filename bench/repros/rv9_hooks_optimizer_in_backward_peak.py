"""An optimizer stepped from a post-accumulate-grad hook (PyTorch's "optimizer step in the backward", which frees
each parameter's gradient as soon as it has stepped) no longer saves any memory through a CheckpointedSequential:
every parameter's gradient is held until the schedule's whole backward has ended (a review of 356cf20,
2026-11-28).

Observed (9 x Linear(256) + Tanh, batch 16, the least budget, CPU, plain .backward(), .grad None before each step):
the step's measured peak (torch_exec.meter.measure_peak around forward + backward) is 2 130 472 B with the optimizer
in the backward, the same as without it (all 2 113 568 B of gradients alive at once); before 356cf20 it was
312 840 B (the plan's peak); plain autograd with the optimizer in the backward: 410 632 B. The weights equal plain
autograd's. A gradient hook (a clamp) besides the optimizer: the same 2 130 472 B. The wrapper's own memory_report()
shows the same (measured_peak 2 130 472 B, against 312 840 B before 356cf20), but its within_budget stays True:
peak_beyond_set_grads subtracts the gradients set.
Cause: Note [Hooks of routed parameters] (torch_exec/executor.py, class _RoutedHooks): a parameter with only
post-accumulate hooks is "suspend"ed: its hooks are taken out for the whole schedule backward, and run only at the
engine's AccumulateGrad call after the parameter tap's backward, i.e. after every segment has run. The Note says
"an optimizer step in the backward still frees each gradient early", which holds only where another part (a
tied head outside the wrapper) makes the hooks wait anyway.
Expected: with no reader outside the wrapper, each post-accumulate hook runs when its gradient is whole (in the
stage's segment, as before 356cf20): the peak with the optimizer in the backward well below the peak without
it. The weights equal plain autograd's either way. Exits 1 while the bug shows."""
import sys

from _setup import nn, te, torch
from torch_exec.meter import measure_peak


def make():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.Tanh()) for _ in range(8)], nn.Linear(256, 8))


def loss_of(y):
    return (y * torch.linspace(-1, 1, y.numel()).view_as(y)).square().sum()


def optimizer_in_backward(model):
    for p in model.parameters():
        opt = torch.optim.SGD([p], lr=1e-2)

        def step(p, opt=opt):
            opt.step()
            opt.zero_grad(set_to_none=True)
        p.register_post_accumulate_grad_hook(step)


def one_step(model, x):
    loss_of(model(x)).backward()


torch.manual_seed(1)
x = torch.randn(16, 256)
grads = sum(p.numel() * 4 for p in make().parameters())

ref = make()
optimizer_in_backward(ref)
one_step(ref, x)  # warm
_, plain = measure_peak(one_step, ref, x)

peaks = {}
for hooked in (False, True):
    seq = make()
    w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
    w.prepare(x)
    w.replan(w.min_budget_bytes)
    if hooked:
        optimizer_in_backward(seq)
    one_step(w, x)  # warm
    for p in seq.parameters():
        p.grad = None
    _, reading = measure_peak(one_step, w, x)
    peaks[hooked] = reading.peak
    if hooked:
        weights = seq
budget = w.min_budget_bytes
diff = max((p - q).abs().max().item() for p, q in zip(weights.parameters(), ref.parameters()))
print(f"gradients of all parameters: {grads} B; the wrapper's least budget {budget} B")
print(f"plain autograd, optimizer in the backward:      step peak {plain.peak:>9} B")
print(f"CheckpointedSequential, no hooks:               step peak {peaks[False]:>9} B")
print(f"CheckpointedSequential, optimizer in the backward: step peak {peaks[True]:>9} B")
print(f"largest weight difference to plain autograd after 2 steps: {diff:.3g}")
bad = peaks[True] > peaks[False] - grads // 2
print("BUG: every gradient is held until the schedule's backward ends" if bad else "ok")
sys.exit(1 if bad else 0)
