"""auto_checkpoint(DDP(model), budget): the wrapper's first call runs the DDP module's forward with grad
several times without a backward (the probe, the block fallback's checks and its measurement of the rest;
export itself fails on DDP's compiler.disable), and DDP's reducer then raises its own "Expected to have finished
reduction in the prior iteration" on the next forward, naming unused parameters the user's model does not have.
Plain DDP(model) trains; the README documents DDP(auto_checkpoint(model)) but nothing says the other order
is refused, and the message points at find_unused_parameters instead of the order."""
import copy
import sys
import tempfile

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT


class Net(nn.Module):
    def __init__(self, D=16, L=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.ReLU()) for _ in range(L))
        self.head = nn.Linear(D, 3)

    def forward(self, x, y):
        for b in self.blocks:
            x = b(x)
        return F.cross_entropy(self.head(x), y)


dist.init_process_group("gloo", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1)
torch.manual_seed(0)
net = Net()
x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
plain = DDP(copy.deepcopy(net))
plain(x, y).backward()
print("plain DDP(model): step ran")
bad = False
try:
    w = te.auto_checkpoint(DDP(copy.deepcopy(net)), "60%", backend="cpu")
    w(x, y).backward()
    g = max((p.grad - q.grad).abs().max().item() for p, q in zip(w.parameters(), plain.parameters()))
    print(f"auto_checkpoint(DDP(model)): step ran, max |grad - DDP grad| {g:.3e}")
    bad = g > 0
except Exception as exc:  # noqa: BLE001
    msg = " ".join(str(exc).split())
    print(f"auto_checkpoint(DDP(model)): {type(exc).__name__}: {msg[:230]}...")
    bad = "auto_checkpoint" not in msg and "DDP(auto_checkpoint" not in msg
dist.destroy_process_group()
print("BUG: unhelpful crash (or wrong gradients) for auto_checkpoint(DDP(model))" if bad else "ok")
sys.exit(1 if bad else 0)
