"""An infeasible budget under auto_checkpoint whose chain has boundaries no backward saves tells the user to do
what they did: "... Cut the stages where an op saves its input (after a Linear or a LayerNorm, not before a dropout
or an addition), or wrap the model with auto_checkpoint, which chooses its cuts". The text is
CheckpointedSequential's (torch_exec/executor.py, _merged_hint), written for hand-cut stages; under auto_checkpoint
the user cut nothing and already wrapped the model with auto_checkpoint.

Observed (CPU, torch 2.13): six Linear+Tanh blocks in an nn.ModuleList with Python control flow on a tensor's value
between them (``if x.abs().mean().item() > 0.3: x = x * 0.5``): torch.export cannot capture it, the block fallback
takes the list 'layers.0' (one block's nn.Sequential: Linear, Tanh; the ModuleList is not a chain as the scaling sits
between its blocks), and at "60%" the first call raises
    InfeasibleBudgetError: budget 12.0840 KiB (12374 B) is below the minimum feasible budget 20.1406 KiB (20624 B)
    ...; 1 stage (2 profiled; 1 merged where no backward saves the tensor between): ... Cut the stages where an op
    saves its input (...), or wrap the model with auto_checkpoint, which chooses its cuts (...)
The same message for an nn.LSTM model captured by torch.export ("6 stages (13 profiled; 7 merged ...)").
Expected: under auto_checkpoint, a hint that fits it (e.g. the blocks list it took and why the model's list was not a
chain, or capture=/CheckpointedSequential advice), not "wrap the model with auto_checkpoint".
Exits 1 while the message advises wrapping with auto_checkpoint."""
import sys

from gpusolve.errors import InfeasibleBudgetError

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT


class Net(nn.Module):
    def __init__(self, D=32):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.Tanh()) for _ in range(6))
        self.head = nn.Linear(D, 5)

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
            if x.abs().mean().item() > 0.3:  # data-dependent Python control flow: the block fallback
                x = x * 0.5
        return F.cross_entropy(self.head(x), y)


torch.manual_seed(0)
w = te.auto_checkpoint(Net(), "60%", backend="cpu")
try:
    w(torch.randn(16, 32), torch.randint(0, 5, (16,))).backward()
    print("no error: ok")
    sys.exit(0)
except InfeasibleBudgetError as err:
    msg = str(err)
print(msg)
print("chain:", w.capture.notes[0] if w.capture else None)
bad = "wrap the model with auto_checkpoint" in msg
print("BUG: the error of an auto_checkpoint wrapper advises wrapping the model with auto_checkpoint" if bad else "ok")
sys.exit(1 if bad else 0)
