"""Stages whose forward takes another code path when no gradient is being recorded, as "inference fast paths" do
(a kernel chosen by ``torch.is_grad_enabled()`` or by ``x.requires_grad``: fused attention wrappers, approximate
activations, caches): a residual block Linear 32 -> 64, GELU, Linear 64 -> 32, whose GELU is exact when
``torch.is_grad_enabled()`` (variant ``grad``) or when ``x.requires_grad`` (variant ``req``) and the tanh
approximation otherwise; 6 stages in ``CheckpointedSequential(stages, budget="60%")``, and the same blocks under
``auto_checkpoint(model, "60%", capture="blocks")``; input 4 x 16 x 32, loss ``out.pow(2).mean()``, against plain
autograd (which always records, so always takes the exact path).

Observed (CPU, torch 2.13), this script:
  CheckpointedSequential, grad variant: loss 1.3955474 against plain autograd's 1.3955719; largest gradient
    difference 7.562e-06 (l.5.b.bias), beyond rtol 1e-5 / atol 1e-6;
  CheckpointedSequential, req variant: loss 1.3955474 against 1.3955714; 5.402e-06 (l.0.b.bias);
  auto_checkpoint capture="blocks", grad variant: loss 1.395527 against 1.3955719; 7.179e-06 (l.2.b.bias).
  (torch.export's capture records the grad path only and trains like plain autograd; "100%" runs plain autograd.)
The step's forward output comes from the no-grad path, the backward from tapes recorded on the grad path, so the
loss and the gradients belong to two different functions, without a warning.

Cause: torch_exec/executor.py runs a schedule's ``fwd_nograd`` ops (checkpoints, and the forward of every stage
before the first taped one) under ``torch.no_grad()`` with inputs that do not require grad; the stages' Python code sees
``torch.is_grad_enabled() == False`` and ``x.requires_grad == False`` where plain autograd (and non-reentrant
``torch.utils.checkpoint``, which records with grad enabled and drops the saved tensors through saved-tensor hooks)
shows True.

Expected: the losses and gradients of plain autograd (run the no-tape forwards with grad mode on and the saved tensors
dropped, as non-reentrant torch.utils.checkpoint does, or at least with ``torch.is_grad_enabled()`` True), or the
difference documented with a way to detect it (e.g. a flag stages can read). Exits 1 while a checkpointed step's loss
differs from plain autograd's beyond 1e-6 relative.

Run: GS_ROOT=<tree> python bench/repros/rv20a_seq_nograd_forward_takes_inference_path.py   (~8 s)"""
import copy
import sys

import torch.nn.functional as F
from _setup import nn, te, torch

D = 32


class FastPath(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.variant = variant

    def forward(self, x):
        h = self.a(x)
        recording = torch.is_grad_enabled() if self.variant == "grad" else x.requires_grad
        h = F.gelu(h) if recording else F.gelu(h, approximate="tanh")
        return x + self.b(h)


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.l = nn.ModuleList(FastPath(variant) for _ in range(6))

    def forward(self, x):
        for block in self.l:
            x = block(x)
        return x


x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
bad = False
for label, variant, how in (("CheckpointedSequential, grad", "grad", "seq"),
                            ("CheckpointedSequential, req", "req", "seq"),
                            ("auto_checkpoint blocks, grad", "grad", "blocks")):
    torch.manual_seed(0)
    base = Net(variant)
    ref, mod = copy.deepcopy(base), copy.deepcopy(base)
    l1 = ref(x).pow(2).mean()
    l1.backward()
    wrapped = (te.CheckpointedSequential(list(mod.l), budget="60%", backend="cpu") if how == "seq"
               else te.auto_checkpoint(mod, "60%", capture="blocks", backend="cpu"))
    l2 = wrapped(x).pow(2).mean()
    l2.backward()
    worst = max(((p.grad - q.grad).abs().max().item(), n) for (n, p), q in zip(ref.named_parameters(), mod.parameters()))
    print(f"{label}: loss {l2.item():.8g} (plain autograd {l1.item():.8g}); largest gradient difference "
          f"{worst[0]:.3e} ({worst[1]})")
    bad |= abs(l1.item() - l2.item()) > 1e-6 * abs(l1.item())

print("BUG: the schedule's no-grad forwards run the stages' no-grad code path; loss and gradients differ" if bad
      else "ok")
sys.exit(1 if bad else 0)
