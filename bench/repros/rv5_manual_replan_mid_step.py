"""replan() between a step's forward and its backward (a budget changed by a callback, between the
micro-batches of an accumulation, or by a memory watchdog) re-solves the entry in place: the pending
backward then interprets the new plan's program over the old forward's state. From a checkpointing
plan to "100%" (plain autograd) the backward returns without an error and most parameters get no
gradient at all; to other plans it raises internal errors (KeyError, "internal error: a_5 is not
held"). Expected: the step in flight keeps the plan it started with (or replan refuses while a step
is in flight, naming it)."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
D = 64
seq = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(D, D), nn.Tanh())], nn.Linear(D, 10))
ref = copy.deepcopy(seq)
x, y = torch.randn(32, D), torch.randint(0, 10, (32,))
F.cross_entropy(ref(x), y).backward()
w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
w.prepare(x)
least = w.min_budget_bytes
bad = 0
for first, second in ((least, "100%"), (least, "70%"), ("85%", least), ("100%", least)):
    w.replan(first)
    w.zero_grad()
    out = w(x)
    try:
        w.replan(second)
    except Exception as exc:  # noqa: BLE001 - refusing is a fine answer
        print(f"forward at {first}, replan({second!r}) refused: {type(exc).__name__}: {str(exc)[:120]}")
        w.replan(first)
    try:
        F.cross_entropy(out, y).backward()
    except Exception as exc:  # noqa: BLE001
        bad += 1
        print(f"forward at {first!r}, replan({second!r}), backward: {type(exc).__name__}: {str(exc)[:120]}")
        continue
    none = sum(p.grad is None for p in w.parameters())
    diff = max(((p.grad - q.grad).abs().max().item() for p, q in zip(w.parameters(), ref.parameters())
                if p.grad is not None), default=float("nan"))
    bad += none > 0 or diff > 1e-6
    print(f"forward at {first!r}, replan({second!r}), backward: no error; {none} of {len(list(w.parameters()))} "
          f"parameters without a gradient, max abs diff of the others {diff:.3g}")
sys.exit(1 if bad else 0)
