"""A dropout switched on after the first step (a model built with ``dropout=0.0`` and fine-tuned with dropout, a
dropout warm-up schedule: ``for m in model.modules(): if isinstance(m, nn.Dropout): m.p = 0.3``), through
CheckpointedSequential(stages, budget="50%"), the same with ``offload="1GB/s"``, and CheckpointedJoin of two such
towers, against the same modules (same seed, deepcopy before wrapping) under plain autograd, the same seeds before
each step. An MLP of 8 Linear(64, 64) + Tanh with a BatchNorm1d and one Dropout, batch 32; the join: two of them
meeting at an MSE.

Observed (CPU, torch 2.13), the first step at p=0.0, the second at p=0.3:
  CheckpointedSequential: loss 2.310734 = plain autograd's, parameter gradients up to 0.00224 off;
  offload="1GB/s":        loss equal, gradients up to 0.00196 off;
  CheckpointedJoin:       gradients up to 0.000233 off in one run (loss 0.014041 against plain autograd's 0.014173),
                          0.000125 in another (loss equal): its plan, from CPU-timed profiles, differs between runs;
no warning but the CPU's CPUTimingWarning. Built with p=0.3 from the first step, each matches plain autograd (gradient difference 0), and
auto_checkpoint matches too (Dropout.p is part of its input signature, so it captures and profiles again).

Cause: which stages draw random numbers is read once, when a signature is profiled (torch_exec/profiler.py, the
stage's ``rng`` field; ``Entry.rng`` in torch_exec/executor.py). A Dropout with p=0 draws nothing, so its stage is
marked as not drawing, and ``_Runtime`` records an RNG state before a recomputed stage's forward only
``if self.preserve_rng and self.recomputed[s] and entry.rng[s]``: the recomputation in the backward draws another
mask than the forward did. CheckpointedSequential's signature (``CheckpointedSequential._state_key``, through
torch_exec/_util.py ``_state_key(captured=False)``) holds shapes, dtypes, training mode and requires_grad, not
``Dropout.p``, so nothing is profiled again; the join plans its draw order (Note [Draw order]) from the same flags.

Expected: gradients equal plain autograd's after a module's scalar attribute changes, as auto_checkpoint's do: e.g. key
CheckpointedSequential's and CheckpointedJoin's signatures on the stages' scalar attributes as auto_checkpoint does,
or check at each recorded forward whether a stage marked as not drawing moved the generator and re-profile (or
refuse, naming it). Exits 1 while any of the three differs from plain autograd by more than 1e-6.

Run: python bench/repros/rv20b_dropout_enabled_after_profile_not_replayed.py   (~8 s)"""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


def mlp(out=10):
    layers = []
    for i in range(8):
        layers += [nn.Linear(D, D)] + ([nn.BatchNorm1d(D)] if i == 1 else []) + [nn.Tanh()]
        if i == 2:
            layers.append(nn.Dropout(0.0))
    return nn.Sequential(*layers, nn.Linear(D, out))


def max_grad_diff(a, b):
    return max((p.grad - q.grad).abs().max().item() for p, q in zip(a, b))


def set_p(modules, p):
    for m in modules:
        if isinstance(m, nn.Dropout):
            m.p = p


g = torch.Generator().manual_seed(0)
x, x2, y = torch.randn(32, D, generator=g), torch.randn(32, D, generator=g), torch.randint(0, 10, (32,), generator=g)
head = lambda a, b: ((a - b) ** 2).mean()  # noqa: E731
bad = False
for kind in ("CheckpointedSequential", "offload='1GB/s'", "CheckpointedJoin"):
    for p_first in (0.3, 0.0):  # the control: dropout on from the first step
        torch.manual_seed(0)
        if kind == "CheckpointedJoin":
            ta, tb = mlp(D), mlp(D)
            ref = nn.ModuleList([copy.deepcopy(ta), copy.deepcopy(tb)])
            wrapped = te.CheckpointedJoin([list(ta), list(tb)], head, budget="50%", backend="cpu")
            mods = list(ta) + list(tb)
            run = lambda: wrapped(x, x2)  # noqa: E731
            run_ref = lambda: head(ref[0](x), ref[1](x2))  # noqa: E731
        else:
            net = mlp()
            ref = copy.deepcopy(net)
            extra = {"offload": "1GB/s"} if kind.startswith("offload") else {}
            wrapped = te.CheckpointedSequential(net, budget="50%", backend="cpu", **extra)
            mods = list(net)
            run = lambda: F.cross_entropy(wrapped(x), y)  # noqa: E731
            run_ref = lambda: F.cross_entropy(ref(x), y)  # noqa: E731
        params, ref_params = list(wrapped.parameters()), list(ref.parameters())
        set_p(mods, p_first)
        set_p(ref.modules(), p_first)
        for step, seed in enumerate((1, 2)):
            for p in params + ref_params:
                p.grad = None
            if step == 1:
                set_p(mods, 0.3)
                set_p(ref.modules(), 0.3)
            torch.manual_seed(seed)
            loss = run()
            loss.backward()
            torch.manual_seed(seed)
            want = run_ref()
            want.backward()
        assert "plain" not in wrapped.plan.summary().splitlines()[0], "the budget must run a checkpointing plan"
        diff = max_grad_diff(params, ref_params)
        print(f"{kind}, p {p_first} then 0.3: loss {loss.item():.6f} vs plain {want.item():.6f}, max grad diff {diff:.3g}")
        if p_first == 0.0:
            bad |= diff > 1e-6 or loss.item() != want.item()
print("DEFECT: a dropout switched on after profiling is not replayed" if bad else "ok: gradients equal plain autograd's")
sys.exit(1 if bad else 0)
