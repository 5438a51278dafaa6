"""A parameter written in place between a step's forward and its backward: a second optimizer (or a weight
clipping, an in-place EMA) steps one layer after ``loss.backward(retain_graph=True)`` and a second backward follows,
or the write comes before the only backward. Through auto_checkpoint, CheckpointedSequential (also with
``offload="1GB/s"``), CheckpointedJoin and auto_checkpoint's join capture, at "50%", against the same model (same
seed, deepcopy before wrapping) under plain autograd. An MLP of 8 Linear(64, 64) + Tanh with a BatchNorm1d and a
Dropout (towers of 7 such layers for the joins), batch 32; the write: ``layers[1].weight.mul_(0.9)`` under no_grad.

Observed (CPU, torch 2.13): plain autograd raises at the backward, "one of the variables needed for gradient
computation has been modified by an inplace operation", for every model. Every wrapper runs the backward without an
error or a warning and sets gradients: its checkpointed stages are recomputed with the new weight. On
CheckpointedSequential with the write before the only backward, the gradients equal plain autograd's at the new
weights (max abs diff 2.93e-08) and are 0.000361 off its gradients at the old weights, with which the forward computed
the loss the step returned: the loss and the gradients are of two different functions, and which stages see the new
weight depends on the plan (docs/pytorch.md: a retained graph's backward "replays the step from the state the forward
left").

Cause: torch_exec/executor.py replays a recomputed stage from its checkpoint with the module's parameters as they
are at the backward (``_Runtime``: the stage's forward under grad in the backward), and nothing records the
parameters' ``_version`` when the forward runs, so autograd's own check (the version a saved tensor had when saved)
never sees the write: the weight is saved only by the recomputation, after the write.

Expected: as plain autograd, the backward raises naming the modified parameter (e.g. record the ``_version`` of the
parameters and buffers each recomputed stage reads at its forward, and compare before recomputing it), never
a loss of one function with gradients of another. Exits 1 while a wrapper's backward runs after the write.

Run: python bench/repros/rv20b_param_written_before_backward_unchecked.py   (~12 s)"""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


def mlp(L=8, out=10, drop=True):
    layers = []
    for i in range(L):
        layers += [nn.Linear(D, D)] + ([nn.BatchNorm1d(D)] if i == 1 else []) + [nn.Tanh()]
        if drop and i == 2:
            layers.append(nn.Dropout(0.1))
    return nn.Sequential(*layers, nn.Linear(D, out))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, x, y):
        return F.cross_entropy(self.body(x), y)


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.ta, self.tb = mlp(7, D, drop=False), mlp(7, D, drop=False)

    def forward(self, a, b):
        return ((self.ta(a) - self.tb(b)) ** 2).mean()


g = torch.Generator().manual_seed(0)
x, x2, y = torch.randn(32, D, generator=g), torch.randn(32, D, generator=g), torch.randint(0, 10, (32,), generator=g)
head = lambda a, b: ((a - b) ** 2).mean()  # noqa: E731


def build(kind):
    """(wrapper, plain model, loss of a model, its second Linear)"""
    torch.manual_seed(0)
    if kind in ("auto_checkpoint", "auto_checkpoint join"):
        m = Net() if kind == "auto_checkpoint" else TwoTower()
        ref = copy.deepcopy(m)
        w = te.auto_checkpoint(m, "50%", backend="cpu")
        return w, ref, (lambda mod: mod(x, y) if kind == "auto_checkpoint" else mod(x, x2))
    if kind == "CheckpointedJoin":
        ta, tb = mlp(7, D, drop=False), mlp(7, D, drop=False)
        ref = nn.ModuleList([copy.deepcopy(ta), copy.deepcopy(tb)])
        w = te.CheckpointedJoin([ta, tb], head, budget="50%", backend="cpu")
        return w, ref, (lambda mod: mod(x, x2) if mod is w else head(mod[0](x), mod[1](x2)))
    net = mlp()
    ref = copy.deepcopy(net)
    w = te.CheckpointedSequential(net, budget="50%", backend="cpu", **({"offload": "1GB/s"} if "offload" in kind else {}))
    return w, ref, (lambda mod: F.cross_entropy(mod(x), y))


def second_linear(mod):
    return [m for m in mod.modules() if isinstance(m, nn.Linear)][1]


def run(mod, loss_of, retain):
    """'raised: ...' or 'ran'"""
    torch.manual_seed(3)
    loss = loss_of(mod)
    try:
        if retain:
            loss.backward(retain_graph=True)
            torch.optim.SGD(second_linear(mod).parameters(), lr=0.5).step()  # a second optimizer, one layer
        else:
            with torch.no_grad():
                second_linear(mod).weight.mul_(0.9)
        loss.backward()
    except RuntimeError as exc:
        return "raised: " + str(exc).split(":")[0][:90]
    return "ran"


bad = False
for kind in ("auto_checkpoint", "CheckpointedSequential", "offload='1GB/s'", "CheckpointedJoin", "auto_checkpoint join"):
    for retain in (True, False):
        w, ref, loss_of = build(kind)
        torch.manual_seed(1)
        loss_of(w).backward()  # the first step profiles and plans
        torch.manual_seed(1)
        loss_of(ref).backward()
        w.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        got, want = run(w, loss_of, retain), run(ref, loss_of, retain)
        what = "backward(retain_graph=True), a step of layer 1, backward" if retain else "layer 1 written, backward"
        print(f"{kind}: {what}: wrapper {got}; plain autograd {want}")
        bad |= got == "ran" and want != "ran"

# the gradients such a step gives: neither the old function's nor the new one's
w, ref, loss_of = build("CheckpointedSequential")
torch.manual_seed(1)
loss_of(w).backward()
w.zero_grad(set_to_none=True)
run(w, loss_of, retain=False)
for label, scale in (("old weights", 1.0), ("new weights", 0.9)):
    r = copy.deepcopy(ref)
    torch.manual_seed(1)
    loss_of(r).backward()  # the same first step (BatchNorm statistics)
    r.zero_grad(set_to_none=True)
    with torch.no_grad():
        second_linear(r).weight.mul_(scale)
    torch.manual_seed(3)
    loss_of(r).backward()
    if any(p.grad is None for p in w.parameters()):  # the fix: that backward raised, no gradient was set
        print(f"CheckpointedSequential's backward raised: no gradients to compare at the {label}")
        continue
    diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(w.parameters(), r.parameters()))
    print(f"CheckpointedSequential's gradients against plain autograd's at the {label}: max abs diff {diff:.3g}")
print("DEFECT: a backward after a parameter write runs" if bad else "ok: the write is refused as plain autograd refuses it")
sys.exit(1 if bad else 0)
