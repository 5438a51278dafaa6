"""First call of auto_checkpoint on a model that mutates its input in place: the capture/profiling
runs apply the mutation several times, so the first step's loss and gradients are wrong (silently)."""
import copy, warnings
from _setup import torch, te as torch_exec
from torch import nn
warnings.simplefilter("ignore")

class M(nn.Module):
    def __init__(s, d=32, L=5):
        super().__init__()
        s.blocks = nn.ModuleList([nn.Sequential(nn.Linear(d, 2*d), nn.ReLU(), nn.Linear(2*d, d)) for _ in range(L)])
        s.head = nn.Linear(d, 3)
    def forward(s, x):
        x.mul_(2.0)                 # e.g. in-place normalisation of the batch (x /= 255)
        for b in s.blocks: x = x + torch.tanh(b(x))
        return s.head(x)

torch.manual_seed(0); ref = M(); model = copy.deepcopy(ref)
for cap in ("auto", "blocks"):
  torch.manual_seed(0); ref = M(); model = copy.deepcopy(ref)
  print("capture", cap)
  try:
    w = torch_exec.auto_checkpoint(model, "100%", backend="cpu", capture=cap)
    x = torch.randn(16, 32)
    xa, xb = x.clone(), x.clone()
    l1 = w(xa).square().mean(); l1.backward()
    l2 = ref(xb).square().mean(); l2.backward()
    print("input after call: wrapped x/orig =", (xa / x).flatten()[:3].tolist(), " expected (plain):", (xb / x).flatten()[:3].tolist())
    print("loss  observed", l1.item(), " expected", l2.item())
    d = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    print("max |grad diff| observed", d, " expected 0.0")
  except (torch_exec.CaptureError, ValueError) as err:
    print(f'CaptureError: {str(err)[:160]}')
