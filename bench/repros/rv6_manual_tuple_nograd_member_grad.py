"""A tuple state with a float tensor that needs no gradient (here a gate made from the input, which needs
none: Pair returns (linear(x), tanh(x)), each block (tanh(l(a)) * b, b + 1)): under a checkpointing plan
CheckpointedSequential makes that tensor require grad at every segment input after the first stage, so the
segment backwards compute its gradient through every stage, a whole tensor plain autograd never makes. The
stages see b.requires_grad True where plain autograd's never do, and the measured steps go over their
budgets (memory_report(), D=32 batch 16: 19208 B against 18003 B, 23304 B against 22753 B; at D=128 every
budget tried, up to 1.12 x). torch_exec/executor.py, _interpret: `U.SegmentInput(rt.input_of(s), rt.rg0 if
s == 1 else True)` (True: every differentiable tensor of a_{s-1}; torch_exec/join.py, JoinRuntime does the
same for branch outputs). Told which tensors need a gradient (monkeypatched below, for the diagnosis
only), the same steps hold every budget. Expected: a segment input requires grad only where plain
autograd's tensor does (what the forward recorded per tensor of a_s). Exits 1 while b requires grad
inside the plan or a step goes over."""
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
import torch_exec._util as U  # noqa: E402

D = 32
seen = []  # per block call under grad: whether its b requires grad


class Pair(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)

    def forward(s, x):
        return s.l(x), torch.tanh(x)


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)

    def forward(s, t):
        a, b = t
        if torch.is_grad_enabled():
            seen.append(b.requires_grad)
        return torch.tanh(s.l(a)) * b, b + 1


class Merge(nn.Module):
    def forward(s, t):
        return t[0] + t[1]


def sweep(label):
    torch.manual_seed(1)
    w = te.CheckpointedSequential([Pair(), Block(), Block(), Block(), Merge(), nn.Linear(D, 10)], budget="100%",
                                  backend="cpu")
    w.prepare(x)
    least, full = w.min_budget_bytes, w.plan.budget_bytes
    over = []
    seen.clear()
    for i in range(9):
        budget = least + (full - least) * i // 8
        w.replan(budget)
        w.measure_memory(1)
        for p in w.parameters():
            p.grad = None
        F.cross_entropy(w(x), y).backward()
        r = w.memory_report()[-1]
        if not r.within_budget:
            over.append(f"{r.beyond_param_grads} B against {budget} B (predicted {r.predicted_peak})")
    print(f"{label}: block calls under grad with b requiring grad: {sum(seen)} of {len(seen)}; "
          f"steps over budget: {len(over)} of 9 {over}")
    return sum(seen), over


torch.manual_seed(0)
x, y = torch.randn(16, D), torch.randint(0, 10, (16,))
h = x
torch.manual_seed(1)
plain = [Pair(), Block(), Block(), Block(), Merge(), nn.Linear(D, 10)]
seen.clear()
for f in plain:
    h = f(h)
F.cross_entropy(h, y).backward()
print(f"plain autograd: block calls with b requiring grad: {sum(seen)} of {len(seen)}")
grads, over = sweep("CheckpointedSequential")

original = U.SegmentInput.__init__


def first_only(self, state, requires_grad):  # diagnosis: only the first tensor of a tuple needs a gradient here
    if requires_grad is True and isinstance(state, tuple):
        requires_grad = [i == 0 for i in range(len(state))]
    original(self, state, requires_grad)


U.SegmentInput.__init__ = first_only
sweep("the same, segment inputs told that b needs no gradient (diagnosis)")
U.SegmentInput.__init__ = original
sys.exit(1 if grads or over else 0)
