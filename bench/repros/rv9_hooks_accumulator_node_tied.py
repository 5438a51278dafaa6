"""torch.distributed.optim._apply_optimizer_in_backward (PyTorch's optimizer in the backward through a hook on each
parameter's gradient accumulator node) steps a weight tied to a head computed outside the wrapper twice per
backward (a review of 356cf20, 2026-11-28; the same before that commit). 356cf20 made the tensor hooks
(register_hook, register_post_accumulate_grad_hook) of such a parameter run once; hooks on its AccumulateGrad node
(the documented `p.view_as(p).grad_fn.next_functions[0][0].register_hook(...)` route that this API takes) still
run once per accumulator call.

Observed (tests/test_routed_hooks.py's model: an embedding and six blocks wrapped in a CheckpointedSequential at
its least budget, the head tied to the embedding computed outside it; SGD with momentum 0.9 from
_apply_optimizer_in_backward on every parameter; 2 steps, CPU): the embedding's weight differs from plain
autograd's on a copy (every other parameter equal); without the tie, all equal.
Cause: torch_exec/executor.py: the segment backwards call the embedding's AccumulateGrad (the stages' part), and
the engine calls it again with the head's part after the parameter tap; a node hook fires on each call, and
_RoutedHooks only handles the parameter's tensor hooks.
Expected: the weights equal plain autograd's (one step per backward). Exits 1 while the bug shows."""
import copy
import sys

from _setup import F, nn, te, torch
from torch.distributed.optim import _apply_optimizer_in_backward  # noqa: E402

V, D = 60, 32


class LM(nn.Module):
    def __init__(self, tied):
        super().__init__()
        torch.manual_seed(0)
        self.wte = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, 2 * D), nn.Tanh(), nn.Linear(2 * D, D))
                                    for _ in range(6))
        self.head = None if tied else nn.Linear(D, V, bias=False)
        self.body = None

    def forward(self, ids):
        if self.body is not None:
            h = self.body(ids)
        else:
            h = self.wte(ids)
            for b in self.blocks:
                h = b(h)
        w = self.wte.weight if self.head is None else self.head.weight
        return F.cross_entropy(F.linear(h, w).flatten(0, 1), ids.flatten())


bad = 0
for tied in (False, True):
    ref = LM(tied)
    model = copy.deepcopy(ref)
    model.body = te.CheckpointedSequential([model.wte, *model.blocks], budget="100%", backend="cpu")
    ids0 = torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(0))
    model.body.prepare(ids0)
    model.body.replan(model.body.min_budget_bytes)
    for m in (model, ref):
        _apply_optimizer_in_backward(torch.optim.SGD, m.parameters(), {"lr": 0.1, "momentum": 0.9})
    for step in range(2):
        ids = torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(step + 1))
        model(ids).backward()
        ref(ids).backward()
    diffs = {n: (p - q).abs().max().item() for (n, p), q in zip(model.named_parameters(), ref.parameters())}
    worst = max(diffs, key=diffs.get)
    print(f"{'tied head' if tied else 'untied head'}: largest weight difference to plain autograd "
          f"{diffs[worst]:.3g} ({worst})")
    bad += diffs[worst] > 1e-6
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
