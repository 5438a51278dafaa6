"""A hook the user puts by hand on a parameter's AccumulateGrad node, beside PyTorch's optimizer in the backward
(_apply_optimizer_in_backward) on the same parameter, gets ``grad_outputs == (None,)`` or a part of the gradient
where plain autograd passes the whole gradient (a review of 5d85963, 2026-11-28).

5d85963 (Note [Hooks on the accumulator node] in torch_exec/_util.py) says "A hook put on the node by hand stays
out of sight". It does not when the API hooked the same node: a Node keeps ONE Python dict of post hooks, shared
by every ``node.register_hook`` (the API's and the user's), and _node_hook_dicts finds that dict through the API's
handles, so post_hooks_of lists, takes out and runs the user's hook too, as ``fn((), (p.grad,))``. The API's
optimizer hook, first in the dict, has stepped and set ``p.grad = None`` by then.

Observed (tests/test_routed_hooks.py's LM: an embedding and six blocks wrapped at the least budget, the head tied
to the embedding outside the wrapper; SGD lr 0.1 through _apply_optimizer_in_backward, then a logging hook on each
AccumulateGrad node, which gets the incoming gradient's norm; 3 steps, CPU):
- blocks.0.0.weight: wrapper [None, 0.014305, 0.015098], plain autograd [0.01413, 0.014305, 0.015098] (the first
  backward, which runs the hooks after the schedule: None; every block parameter alike);
- wte.weight (tied): wrapper [0.070752, 0.051301, 0.039544], plain [0.070881, 0.05136, 0.039576] (a part);
- the weights themselves are equal (the API's hook ignores its arguments). At c0f90ad the same hook ran twice per
  backward for every parameter (the gradient, then None) and per part for the tied one.
Cause: torch_exec/_util.py _node_hook_dicts/post_hooks_of take every hook in the node's dict, and PostHook.__call__
passes ``(p.grad,)`` as the gradient, read after earlier hooks ran.
Expected: the user's node hook gets the whole gradient once per backward as under plain autograd, or it is left
to the engine as the Note says (take only the keys of the API's handles, ``handle.id``); in either case the Note
says which. Exits 1 while the bug shows."""
import copy
import sys

from _setup import F, nn, te, torch
from torch.distributed.optim import _apply_optimizer_in_backward  # noqa: E402

V, D = 60, 32


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.wte = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, 2 * D), nn.Tanh(), nn.Linear(2 * D, D))
                                    for _ in range(6))
        self.body = None

    def forward(self, ids):
        if self.body is not None:
            h = self.body(ids)
        else:
            h = self.wte(ids)
            for b in self.blocks:
                h = b(h)
        return F.cross_entropy(F.linear(h, self.wte.weight).flatten(0, 1), ids.flatten())


ref = LM()
model = copy.deepcopy(ref)
model.body = te.CheckpointedSequential([model.wte, *model.blocks], budget="100%", backend="cpu")
model.body.prepare(torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(0)))
model.body.replan(model.body.min_budget_bytes)
logs = {}
for tag, m in (("wrapper", model), ("plain", ref)):
    _apply_optimizer_in_backward(torch.optim.SGD, m.parameters(), {"lr": 0.1})
    for name, p in m.named_parameters():
        node = p.view_as(p).grad_fn.next_functions[0][0]  # the API keeps this node alive
        node.register_hook(lambda grad_inputs, grad_outputs, name=name, tag=tag: logs.setdefault((tag, name), []).append(
            None if grad_outputs[0] is None else round(grad_outputs[0].norm().item(), 6)))
for step in range(3):
    ids = torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(step + 1))
    model(ids).backward()
    ref(ids).backward()
weights = max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
print(f"largest weight difference to plain autograd: {weights:.3g}")
bad = 0
for name, _ in ref.named_parameters():
    ours, theirs = logs.get(("wrapper", name), []), logs.get(("plain", name), [])
    same = len(ours) == len(theirs) and all(
        (a is None) == (b is None) and (a is None or abs(a - b) <= 1e-5 * max(1.0, abs(b))) for a, b in zip(ours, theirs))
    if not same:
        bad += 1
        if name in ("wte.weight", "blocks.0.0.weight"):
            print(f"  {name}: the node hook's grad_outputs[0] norms: wrapper {ours}, plain autograd {theirs}")
print(f"BUG: {bad} parameter(s) whose hand-put node hook saw other gradients than under plain autograd" if bad
      else "ok")
sys.exit(1 if bad else 0)
