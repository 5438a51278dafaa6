"""rv_user_aux_attribute with the auxiliary loss kept in a tuple (self.aux_loss = (loss, n)): the probe looked at
plain tensor attributes and one level of lists and dicts, so this trained silently wrong (no aux gradient)."""
import copy, sys, warnings
from _setup import torch, te as torch_exec
from torch import nn
warnings.simplefilter("ignore")
D = 64
class Block(nn.Module):
    def __init__(s): super().__init__(); s.l = nn.Linear(D, D); s.g = nn.Linear(D, 4)
    def forward(s, x):
        s.aux_loss = (s.g(x.detach()).pow(2).mean(), x.shape[0])      # e.g. a router z-loss on the tokens it sees
        return x + torch.tanh(s.l(x))
class M(nn.Module):
    def __init__(s): super().__init__(); s.b = nn.ModuleList([Block() for _ in range(6)])
    def forward(s, x):
        for b in s.b:
            if x.abs().max().item() < 1e6:              # data-dependent control flow: torch.export fails -> block fallback
                x = b(x)
        return x
aux = lambda m: sum(b.aux_loss[0] for b in m.b)
torch.manual_seed(0); ref = M(); model = copy.deepcopy(ref)
bad = False
try:
    w = torch_exec.auto_checkpoint(model, "85%", backend="cpu")     # capture="auto" (default)
    for step in range(2):
        torch.manual_seed(step); x = torch.randn(32, D)
        model.zero_grad(); ref.zero_grad()
        l1 = w(x).square().mean() + aux(model); l1.backward()
        l2 = ref(x).square().mean() + aux(ref); l2.backward()
        print(f"step {step}: loss observed {l1.item():.6f} expected {l2.item():.6f}")
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            if p.grad is None or not torch.equal(p.grad, q.grad):
                bad = True
                print(f"   {n}.grad observed", "None" if p.grad is None else f"max|diff| = {(p.grad - q.grad).abs().max().item():.4f}", "(expected equal to plain autograd's)")
    print(w.capture.notes[0][:120])
except torch_exec.CaptureError as err:
    print(f'CaptureError: {str(err)[:160]}')
sys.exit(1 if bad else 0)
