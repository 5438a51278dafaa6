"""A gradient hook that keeps the gradient it is given (gradient logging: ``p.register_hook(lambda g:
log.__setitem__(name, g))``, as logging tools do), on a language model whose input embedding is tied to its
output head, then ``clip_grad_norm_`` (which scales every ``.grad`` in place) before the logged gradient is
read. Plain autograd's AccumulateGrad copies a gradient a hook still references, so the logged tensor and
``.grad`` are two tensors and the clip leaves the log alone. Under a checkpointing plan that splits the tied
weight's readers, torch_exec._util.leaf_hooks_deferred (this commit) calls the hooks with ``p.grad`` itself
and keeps the hook's result as ``.grad``: the logged gradient IS ``.grad`` and the clip rewrites it.
Observed (torch 2.13 CPU, least budget 1052872 B): logged tensor is ``.grad``: True (plain autograd:
False); the tied weight's logged gradient's norm after the clip 9.03e-11 vs plain autograd's 1.075 (the
pre-clip value). The untied parameters (one segment each, plain AccumulateGrad) log as plain autograd does.
(Before this commit the log held the last segment's part alone: norm 0.581.)
Expected: the tied weight's logged gradient equals plain autograd's (and is not the ``.grad`` object).
Exits 1 while it differs."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

V, D = 200, 64


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.n, self.a, self.b = nn.LayerNorm(D), nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, h):
        return h + self.b(F.gelu(self.a(self.n(h))))


class TiedLM(nn.Module):
    def __init__(self, L=4):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Blk() for _ in range(L))
        self.ln = nn.LayerNorm(D)

    def forward(self, ids):
        h = self.wte(ids)
        for b in self.blocks:
            h = b(h)
        logits = F.linear(self.ln(h), self.wte.weight)  # the head tied to the embedding
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))


torch.manual_seed(0)
model = TiedLM()
ref = copy.deepcopy(model)
logs = {}
for tag, m in (("ours", model), ("plain", ref)):
    for name, p in m.named_parameters():
        p.register_hook(lambda g, key=(tag, name): logs.__setitem__(key, g))  # keeps what it is given
ids = torch.randint(0, V, (8, 32))
wrapped = te.auto_checkpoint(model, "100%", backend="cpu", caller_keeps="loss", profile_passes=1)
wrapped.prepare(ids)
wrapped.replan(wrapped.min_budget_bytes)
print(f"least budget {wrapped.min_budget_bytes} B; segments split the tied weight's readers: "
      f"{bool(wrapped.executor._last.shared_params) and not wrapped.executor._last.plain}")
wrapped(ids).backward()
ref(ids).backward()
for m in (model, ref):
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-9)  # scales each .grad in place
worst = 0.0
for name, _ in model.named_parameters():
    ours, theirs = logs[("ours", name)], logs[("plain", name)]
    diff = (ours - theirs).abs().max().item()
    rel = diff / max(theirs.abs().max().item(), 1e-30)
    worst = max(worst, rel)
    if name == "wte.weight" or rel > 1e-6:
        print(f"{name}: logged is .grad: ours {ours is dict(model.named_parameters())[name].grad}, plain "
              f"{theirs is dict(ref.named_parameters())[name].grad}; logged norm ours {ours.norm().item():.3e}, "
              f"plain {theirs.norm().item():.3e} (max |diff| / max |plain| {rel:.3e})")
sys.exit(1 if worst > 1e-6 else 0)
