"""``auto_checkpoint`` on a model whose blocks are TorchScript modules (``nn.ModuleList(torch.jit.script(Block()) for _ in
range(6))``, Block a residual MLP Linear 32 -> 64, tanh, Linear 64 -> 32, as code bases that script their layers for
speed have), input 4 x 16 x 32, budgets "100%" and "60%" (a review harness: the same at 1.1 x the least); the same blocks as stages of
``CheckpointedSequential`` train with plain autograd's gradients.

Observed (CPU, torch 2.13): torch.export does not take the model, and the block fallback's search then raises, from
inside, at every budget:
    auto.py _build -> _find_blocks -> _bytes_made:
        handles.append(b.register_forward_pre_hook(enter(c)))
    RuntimeError: register_forward_pre_hook is not supported on ScriptModules

Cause: torch_exec/auto.py ``_bytes_made`` (called by ``_find_blocks`` for every candidate list) registers forward
pre-hooks on each block to measure what it makes; a ``torch.jit.ScriptModule`` refuses hooks, and the RuntimeError is
not turned into a reason the list is passed over (nor is the capture refused with a CaptureError).

Expected: ONE clear CaptureError naming the scripted blocks and the fix (the manual route,
``CheckpointedSequential(list_of_scripted_blocks, budget=...)``, which works; or do not script the blocks), or the list
skipped with that reason. Exits 1 while the call raises anything but CaptureError.

Run: GS_ROOT=<tree> python bench/repros/rv20a_blocks_scripted_blocks_hook_error.py   (~4 s)"""
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
        self.l = nn.ModuleList(torch.jit.script(Block()) for _ in range(6))

    def forward(self, x):
        for block in self.l:
            x = block(x)
        return x


x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
bad = False
for budget in ("100%", "60%"):
    torch.manual_seed(0)
    wrapped = te.auto_checkpoint(Net(), budget, backend="cpu")
    try:
        wrapped(x).pow(2).mean().backward()
        print(f"{budget}: trained ({wrapped.capture.method})")
    except te.CaptureError as err:
        print(f"{budget}: refused with CaptureError: {str(err)[:160]}")
    except Exception as err:  # noqa: BLE001
        bad = True
        print(f"{budget}: the first call raised {type(err).__name__}: {err}")

print("BUG: scripted blocks crash the block finder instead of a CaptureError" if bad else "ok")
sys.exit(1 if bad else 0)
