"""rv20r: a stage that logs a statistic of its dropout output on itself is refused, even at a budget where the steps
run as plain autograd; it trained as plain autograd does before 0ef5aa7.

Setup: CheckpointedSequential over six ``Logged`` stages: ``h = Dropout(0.1)(tanh(Linear(32, 32)(x)));
self.last_mean = float(h.detach().mean()); return h`` (a value kept for a logger, overwritten at each call, never
read by the forward), input 8 x 32, budget "100%" (plain autograd's peak: the steps run plainly).

Observed (CPU): AttributeWriteError at the first call, "stage 1's forward writes Logged.last_mean at every call
(-0.0174 -> -0.0191; and 5 more)".  At 0ddb3ab: it trains, gradients equal plain autograd's (max abs diff 0.0)
and ``last_mean`` equal to plain autograd's (-0.015722...).  Same with budget 60000 B (above plain autograd's
peak).  With Dropout(0.0) the value repeats across passes and it is not refused.

Cause: torch_exec/profiler.py ``_refuse_attribute_writes`` (Note [Attributes a forward writes]) calls any scalar
attribute that differs after the first timing pass "written at every call"; the timing pass draws other dropout
masks than the memory pass, so an attribute computed from the output (overwritten, not accumulated) differs too.
The refusal is meant for counters (``self.calls += 1``), which a re-run moves again; an overwritten value a re-run
with the step's RNG state recomputes identically.

Expected: attributes the forward only overwrites from its inputs pass (e.g. run the compared pass from the memory
pass's RNG state, and refuse only what still moves; or compare two runs from the same state), and at budgets
where the wrapper runs plain autograd nothing is refused.  Exits 1 while the model is refused.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy, sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")


class Logged(nn.Module):
    def __init__(s):
        super().__init__()
        s.l, s.d, s.last_mean = nn.Linear(32, 32), nn.Dropout(0.1), None

    def forward(s, x):
        h = s.d(torch.tanh(s.l(x)))
        s.last_mean = float(h.detach().mean())  # for a logger
        return h


torch.manual_seed(0)
net = nn.Sequential(*[Logged() for _ in range(6)])
ref = copy.deepcopy(net)
x = torch.randn(8, 32)
try:
    w = te.CheckpointedSequential(net, budget="100%")
    torch.manual_seed(1)
    w(x).sum().backward()
    torch.manual_seed(1)
    ref(x).sum().backward()
except te.AttributeWriteError as e:
    print(f"refused: {str(e)[:150]}...")
    sys.exit(1)
d = max((p.grad - q.grad).abs().max().item() for p, q in zip(net.parameters(), ref.parameters()))
print(f"trained: grad max abs diff {d:.3g}; last_mean {net[0].last_mean} vs plain {ref[0].last_mean}")
sys.exit(0 if d < 1e-6 else 1)
