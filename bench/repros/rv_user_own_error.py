"""An error in the caller's own call (a misspelt keyword, wrong input type) that plain PyTorch reports as the
model's TypeError is turned by auto_checkpoint into CaptureError 'could not find a chain ... Cut the model by
hand: torch_exec.CheckpointedSequential(...)': the wrong diagnosis and the wrong fix."""
import warnings
from _setup import torch, te as torch_exec
from torch import nn
warnings.simplefilter("ignore")
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.blocks = nn.ModuleList([nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(6)])
    def forward(s, x, labels=None):
        for b in s.blocks: x = b(x)
        return x
x = torch.randn(32, 64)
for call in (lambda m: m(x, label=x),):          # typo: label= instead of labels=
    try: call(M())
    except Exception as e: print("expected (plain model):", type(e).__name__, e)
    try: call(torch_exec.auto_checkpoint(M(), "85%"))
    except Exception as e: print("observed (wrapped):   ", type(e).__name__, str(e)[:260], "...", str(e)[-150:])
