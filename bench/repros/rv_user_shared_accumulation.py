"""Gradient accumulation (two backward calls before optimizer.step) on a model that uses one Linear at the
start and at the end of the chain: the wrapper adds each use's gradient into .grad separately
((G + g_late) + g_early), plain autograd adds their sum (G + (g_early + g_late)); one step alone is equal."""
import copy, warnings
from _setup import torch, te as torch_exec
from torch import nn
warnings.simplefilter("ignore")
class M(nn.Module):
    def __init__(s, d=32, L=4):
        super().__init__()
        s.shared = nn.Linear(d, d)
        s.blocks = nn.ModuleList([nn.Sequential(nn.Linear(d, 2*d), nn.Tanh(), nn.Linear(2*d, d)) for _ in range(L)])
    def forward(s, x):
        h = torch.tanh(s.shared(x))
        for b in s.blocks: h = h + b(h)
        return torch.tanh(s.shared(h))
torch.manual_seed(0); ref = M(); model = copy.deepcopy(ref)
w = torch_exec.auto_checkpoint(model, "60%", backend="cpu")
torch.manual_seed(1); xs = [torch.randn(4, 8, 32) for _ in range(3)]
for i, x in enumerate(xs):
    w(x).pow(2).mean().backward(); ref(x).pow(2).mean().backward()
    diffs = {n: (p.grad - q.grad).abs().max().item() for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()) if not torch.equal(p.grad, q.grad)}
    print(f"after micro-batch {i + 1}: params whose accumulated .grad differs from plain autograd's: {diffs or 'none'} (expected none)")
recomputed = sum(op.kind.name == "FWD_NOGRAD" for op in w.plan.schedule)
print(f"plan: {len(w.plan.schedule)} ops, {recomputed} forwards without grad")
