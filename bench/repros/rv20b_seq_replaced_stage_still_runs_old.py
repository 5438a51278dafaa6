"""Transfer learning through the wrappers: ``net = nn.Sequential(...)`` wrapped as CheckpointedSequential(net,
budget="50%") (also with ``offload="1GB/s"``), and CheckpointedJoin([tower_a, tower_b], head) with nn.Sequential
towers, trained a step; then the classifier is replaced the usual way, ``net[-1] = nn.Linear(64, 5)`` (a new task
with 5 classes) or ``tower_a[-1] = nn.Linear(64, 64)``, an optimizer is made over ``wrapper.parameters()``, and
training goes on. Compared with the same modules (same seed, deepcopy before wrapping) under plain autograd with
the same replacement. An MLP of 8 Linear(64, 64) + Tanh with a BatchNorm1d, batch 32.

Observed (CPU, torch 2.13): the new Linear is in ``wrapper.parameters()`` and ``wrapper.state_dict()``, but the
wrapper's forward still runs the old one: with ``net[-1] = nn.Linear(64, 5)`` the wrapper returns logits of shape
(32, 10) where plain autograd's are (32, 5), its loss is 2.309908 against 1.601956, the new head's ``.grad`` stays
None and the old head, which no longer is in ``parameters()``, is the one computed with, so the optimizer never trains
the new head (nor does ``state_dict()`` save what the forward computes with). The same with offload (same figures) and
with a CheckpointedJoin tower (loss 0.013936 against 0.015397, the new layer without a gradient); no error, no warning.

Cause: torch_exec/executor.py ``CheckpointedSequential.__init__`` shares the nn.Sequential's ``_modules`` dict (Note
[A Sequential's own names]), so the replacement shows in ``parameters()``, ``state_dict()`` and ``repr``, but it runs
``self._fns``, the list of callables taken at construction (``U.stage_list(stages)``), and keys its plans on
shapes, dtypes and ``requires_grad`` only (``_state_key``): nothing sees the new module. CheckpointedJoin runs its
branches' CheckpointedSequentials (torch_exec/join.py).

Expected: the wrapper runs the stages it registers, e.g. reads them from the Sequential at each call and treats a
changed stage as a new input signature (profiled and solved again), as auto_checkpoint does (its step after
``model.body[-1] = nn.Linear(64, 5)`` equals plain autograd's); or it refuses the call with an error naming the
replaced stage and the remedy (wrap again). Exits 1 while a wrapper's forward after the replacement differs from
plain autograd's, or the new module gets no gradient.

Run: python bench/repros/rv20b_seq_replaced_stage_still_runs_old.py   (~8 s)"""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


def mlp(out=10):
    layers = []
    for i in range(8):
        layers += [nn.Linear(D, D)] + ([nn.BatchNorm1d(D)] if i == 1 else []) + [nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(D, out))


g = torch.Generator().manual_seed(0)
x, x2, y = torch.randn(32, D, generator=g), torch.randn(32, D, generator=g), torch.randint(0, 10, (32,), generator=g)
y5 = y % 5
head = lambda a, b: ((a - b) ** 2).mean()  # noqa: E731
bad = False
for kind in ("CheckpointedSequential", "offload='1GB/s'", "CheckpointedJoin"):
    torch.manual_seed(0)
    if kind == "CheckpointedJoin":
        ta, tb = mlp(D), mlp(D)
        ref_a, ref_b = copy.deepcopy(ta), copy.deepcopy(tb)
        wrapped = te.CheckpointedJoin([ta, tb], head, budget="50%", backend="cpu")
        run, run_ref = (lambda: wrapped(x, x2)), (lambda: head(ref_a(x), ref_b(x2)))
        ref_params = lambda: list(ref_a.parameters()) + list(ref_b.parameters())  # noqa: E731
    else:
        net = mlp()
        ref = copy.deepcopy(net)
        extra = {"offload": "1GB/s"} if kind.startswith("offload") else {}
        wrapped = te.CheckpointedSequential(net, budget="50%", backend="cpu", **extra)
        run, run_ref = (lambda: wrapped(x)), (lambda: ref(x))
        ref_params = lambda: list(ref.parameters())  # noqa: E731
    loss_of = (lambda out: out) if kind == "CheckpointedJoin" else (lambda out: F.cross_entropy(out, y5 if out.shape[1] == 5 else y))
    loss_of(run()).backward()
    assert "plain" not in wrapped.plan.summary().splitlines()[0], "the budget must run a checkpointing plan"
    torch.manual_seed(7)  # the new layer, the same in both
    if kind == "CheckpointedJoin":
        new = nn.Linear(D, D)
        ta[-1], ref_a[-1] = new, copy.deepcopy(new)
    else:
        new = nn.Linear(D, 5)
        net[-1], ref[-1] = new, copy.deepcopy(new)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    opt.zero_grad(set_to_none=True)
    for p in ref_params():
        p.grad = None
    torch.manual_seed(2)
    out = run()
    loss = loss_of(out)
    loss.backward()
    torch.manual_seed(2)
    want_out = run_ref()
    want = loss_of(want_out)
    want.backward()
    in_params = any(p is new.weight for p in wrapped.parameters())
    print(f"{kind}: after replacing the last layer: output {tuple(out.shape)} vs plain {tuple(want_out.shape)}, loss "
          f"{loss.item():.6f} vs {want.item():.6f}; new layer in parameters(): {in_params}, its grad set: "
          f"{new.weight.grad is not None}")
    bad |= loss.item() != want.item() or new.weight.grad is None
print("DEFECT: the wrapper runs the replaced stage" if bad else "ok: the wrapper runs the new stage")
sys.exit(1 if bad else 0)
