"""Python-level randomness in forward (LayerDrop / stochastic depth with random.random(), noise from numpy):
torch.export runs the Python once at capture, so the wrapper replays the capture's draws every step. Plain
autograd with the same seeds draws anew each step; the wrapper's loss and gradients silently differ."""
import copy, random, warnings, numpy as np
from _setup import torch, te as torch_exec
from torch import nn
warnings.simplefilter("ignore")
D = 64
class M(nn.Module):
    def __init__(s, L=8, p=0.5):
        super().__init__(); s.p = p
        s.blocks = nn.ModuleList([nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(L)])
    def forward(s, x):
        for b in s.blocks:
            if s.training and random.random() < s.p:      # LayerDrop / stochastic depth
                continue
            x = x + b(x)
        noise = torch.from_numpy(np.random.randn(*x.shape).astype("float32"))   # numpy noise injection
        return x + 0.1 * noise
torch.manual_seed(0); ref = M(); model = copy.deepcopy(ref)
try:
    w = torch_exec.auto_checkpoint(model, "80%", backend="cpu")
    for step in range(4):
        torch.manual_seed(step); x = torch.randn(32, D)
        model.zero_grad(set_to_none=True); ref.zero_grad(set_to_none=True)
        random.seed(step); np.random.seed(step); l1 = w(x).square().mean(); l1.backward()
        random.seed(step); np.random.seed(step); l2 = ref(x).square().mean(); l2.backward()
        got = [n.split(".")[1] for n, p in model.named_parameters() if p.grad is not None and n.endswith("0.weight")]
        exp = [n.split(".")[1] for n, p in ref.named_parameters() if p.grad is not None and n.endswith("0.weight")]
        print(f"step {step}: loss observed {l1.item():.5f} expected {l2.item():.5f}; blocks trained observed {got} expected {exp}")
    print(w.capture.notes[0])
except torch_exec.CaptureError as err:
    print(f'CaptureError: {str(err)[:160]}')
