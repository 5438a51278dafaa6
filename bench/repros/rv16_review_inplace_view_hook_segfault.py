"""CheckpointedSequential killed the process (SIGSEGV) profiling a valid model whose stage returns a view of a
tensor it then modified in place through another view: y = fc(t); v = y[:h]; y[h:].mul_(0.5); return (y, v).
Plain autograd trains it fine. Cause: torch_exec/profiler.py _Boundaries.watch called t.register_hook on v while
v's grad_fn was stale (its base written in place): a PyTorch 2.13 crash with no gpusolve involved
(``fc = nn.Linear(4, 4); y = fc(torch.randn(6, 4)); v = y[:3]; y[3:].mul_(0.5); v.register_hook(f)``). Reading
t.grad_fn first regenerates the view's grad_fn and avoids it: torch_exec._util.register_grad_hook since session 16.
Review rv16 (2026-11-29). Exits 1 when the child process dies."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = os.environ.get("GS_ROOT", str(Path(__file__).resolve().parents[2]))  # the tree under test

CHILD = r'''
import sys, warnings
ROOT = sys.argv[1]
sys.path.insert(0, ROOT)
import torch
from torch import nn
import torch_exec as te
torch.set_num_threads(1); warnings.simplefilter("ignore")

class Lin(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(64, 64)
    def forward(self, t):
        return torch.tanh(self.fc(t))

class InplaceDup(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(64, 64)
    def forward(self, t):
        y = self.fc(t)
        h = y.shape[0] // 2
        v = y[:h]
        y[h:].mul_(0.5)
        return y, v

class MulMerge(nn.Module):
    def forward(self, p):
        a, b = p
        return a[: b.shape[0]] * b

class Loss(nn.Module):
    def forward(self, t):
        return t.square().mean()

torch.manual_seed(0)
model = nn.Sequential(Lin(), InplaceDup(), MulMerge(), Loss())
x = torch.randn(512, 64)
model(x).backward()
print("plain autograd: ok", flush=True)
w = te.CheckpointedSequential(model, budget="1TiB", backend="cpu", profile_passes=1, profile_warmup=0)
w(x).backward()
print("CheckpointedSequential: ok", flush=True)
'''
r = subprocess.run([sys.executable, "-c", CHILD, ROOT], capture_output=True, text=True)
print(r.stdout.strip())
print("child exit status", r.returncode)
sys.exit(1 if r.returncode != 0 else 0)
