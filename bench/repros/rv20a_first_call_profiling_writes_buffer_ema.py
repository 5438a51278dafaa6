"""A model that keeps an exponential moving average of its (detached) output in a buffer, as DINO's ``center``,
feature-statistics trackers or a running mean for normalisation do: 6 residual blocks (Linear 32 -> 64, tanh,
Linear 64 -> 32), then in training ``self.ema.mul_(0.9).add_(x.detach().mean((0, 1)), alpha=0.1)``
(``register_buffer("ema", zeros(32))``, persistent or not: the same), input 4 x 16 x 32, loss ``out.pow(2).mean()``;
``auto_checkpoint(model, "100%", backend="cpu")`` (the same at "50%" and at 1.1 x the least budget), one step,
compared with the same model trained by plain autograd.

Observed (CPU, torch 2.13): loss and every parameter gradient equal plain autograd's, but after the first step the
buffer is 18.0 x plain autograd's (ema[:3] ratio 18.000004, 18.0, 18.0; max abs diff 1.350); with
``profile_passes=1`` it is 10.0 x. The gap decays with later steps (max diff 1.215 after step 2, 1.093 after step 3
in a 3-step run): the first step's update is wrong for the rest of training. With ``model.prepare(x)`` before the
first step the buffer stays zeros through preparing and the step's ratio is 1.0 (the docs: "Preparing leaves
parameters, buffers, gradients and RNG state as they were").

Cause (not pinned down to a line): the first call of an input signature profiles inside its own step
(``AutoCheckpointed._call_scheduled`` -> executor ``_entry`` -> ``_build`` -> torch_exec/profiler.py's passes), and the
EMA's update, in the last exported stage, is applied once per profiling run of that stage without the buffer being put
back: 18 = the step + 17 profiling runs, the count a stage's own Python counter reaches in the first step under
CheckpointedSequential (bench/repros/rv20a_seq_stage_counter_attribute_rerun.py), and 10 with ``profile_passes=1``.
``prepare()`` snapshots the whole model (``U.ModelSnapshot([self._model])`` in ``AutoCheckpointed.prepare``) and
restores it; the first-call path's snapshot covers the capture only, and the profiler's own checks look at the
buffers of a stage's modules (Note [Buffers written behind their versions] in torch_exec/profiler.py), while ``ema``
is the root module's.

Expected: buffers equal plain autograd's after every step, the first included (as for BatchNorm statistics). Exits 1
while the buffer differs after the first step.

Run: GS_ROOT=<tree> python bench/repros/rv20a_first_call_profiling_writes_buffer_ema.py   (~5 s)"""
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
        self.register_buffer("ema", torch.zeros(D), persistent=False)

    def forward(self, x):
        for block in self.l:
            x = block(x)
        if self.training:
            self.ema.mul_(0.9).add_(x.detach().mean((0, 1)), alpha=0.1)
        return x


x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
torch.manual_seed(0)
ref = Net()
ref(x).pow(2).mean().backward()

bad = False
for prepare in (False, True):
    torch.manual_seed(0)
    model = Net()
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu")
    if prepare:
        wrapped.prepare(x)
    wrapped(x).pow(2).mean().backward()
    grads_equal = all(torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)
                      for p, q in zip(ref.parameters(), model.parameters()))
    ratio = (model.ema / ref.ema)[:3].tolist()
    diff = (model.ema - ref.ema).abs().max().item()
    print(f"{'prepare() first' if prepare else 'first call prepares'}: gradients equal {grads_equal}; "
          f"ema / plain autograd's ema [:3] = {[round(r, 6) for r in ratio]}, max abs diff {diff:.3e}")
    bad |= not torch.allclose(model.ema, ref.ema, rtol=1e-5, atol=1e-6)

print("BUG: the first step's profiling leaves the buffer's EMA updated once per profiling run" if bad else "ok")
sys.exit(1 if bad else 0)
