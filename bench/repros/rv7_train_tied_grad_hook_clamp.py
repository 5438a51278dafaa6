"""Gradient clipping by value with tensor hooks (``p.register_hook(lambda g: g.clamp(-c, c))``, a common
recipe) on a language model whose input embedding is tied to its output head. Plain autograd sums the two
readers' gradients of the tied weight and runs the hook once, on the sum. Under a checkpointing plan that
puts the two readers in separate segments (Note [Shared leaves split tape runs], torch_exec/executor.py),
each segment's backward ran the hook on its own part: the clamp of each part, summed, is not the clamp of
the sum. One step at the least budget, from ``.grad = None`` and again with a gradient already set
(gradient accumulation). Expected: the tied weight's gradient equals plain autograd's (max |diff| below
1e-6), or, with a gradient already set (the whole gradient then needs a buffer the plan does not count),
a refusal before the step that names the remedy. Exits 1 while neither holds."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

V, D, CLIP = 200, 64, 2e-3


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


def clip(model):
    for p in model.parameters():
        p.register_hook(lambda g: g.clamp(-CLIP, CLIP))


torch.manual_seed(0)
model = TiedLM()
ref = copy.deepcopy(model)
clip(model)
clip(ref)
ids = torch.randint(0, V, (8, 32))
wrapped = te.auto_checkpoint(model, "100%", backend="cpu", caller_keeps="loss", profile_passes=1)
wrapped.prepare(ids)
wrapped.replan(wrapped.min_budget_bytes)
print(f"least budget {wrapped.min_budget_bytes} B; segments split the tied weight's readers: "
      f"{bool(wrapped.executor._last.shared_params) and not wrapped.executor._last.plain}")
worst = 0.0
for prior in (None, 0.5):
    for m in (model, ref):
        for p in m.parameters():
            p.grad = None if prior is None else torch.full_like(p, prior)
    try:
        loss = wrapped(ids)
    except RuntimeError as e:
        refused = prior is not None and "zero_grad" in str(e)
        print(f".grad before the step {prior}: refused ({'as expected' if refused else 'unexpected'}): "
              f"{str(e)[:160]}...")
        worst = worst if refused else 1.0
        continue
    loss.backward()
    ref(ids).backward()
    diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    tied = (model.wte.weight.grad - ref.wte.weight.grad).abs().max().item()
    worst = max(worst, diff)
    print(f".grad before the step {prior}: max |grad - plain autograd's| {diff:.3e} (tied weight {tied:.3e})")
sys.exit(0 if worst < 1e-6 else 1)
