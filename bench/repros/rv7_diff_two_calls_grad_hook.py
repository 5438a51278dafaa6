"""Gradient clipping by value with tensor hooks (``p.register_hook(lambda g: g.clamp(-c, c))``) on a language
model whose input embedding is tied to its output head, and two calls of the wrapper before one backward (two
micro-batches summed, a contrastive pair of views, R-Drop: supported, bench/repros/rv5_train_two_forwards_side.py).
Plain autograd sums both calls' gradients and runs each parameter's hook once, on the sum. The README (and Note
[Hooks on a leaf several segments read] in torch_exec/executor.py) now say a shared parameter's gradient hook
runs "once per step, with the whole gradient, as in plain autograd", and that with a ``.grad`` already set the
step is refused. Here each call's backward (its own _ScheduleFunction.backward, its own
torch_exec._util.leaf_hooks_deferred block) runs the hooks on that call's gradient: the second call's block
finds the first call's result in ``.grad`` (the case refuse_shared_hazards refuses, but it only looks at
``.grad`` when a forward runs, when both were still None), sets it aside, clamps its own part and adds it.
Observed (torch 2.13 CPU, least budget 1052872 B): the tied weight's gradient off plain autograd's by
2.000e-03 (= the clip), no error, no warning; every untied parameter by 2.000e-03 too (their segments' own
AccumulateGrad runs the hooks once per call: as before this commit).
Expected: gradients equal to plain autograd's (max |diff| below 1e-6), or a refusal naming the remedy.
Exits 1 while neither holds."""
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


torch.manual_seed(0)
model = TiedLM()
ref = copy.deepcopy(model)
for m in (model, ref):
    for p in m.parameters():
        p.register_hook(lambda g: g.clamp(-CLIP, CLIP))
ids1, ids2 = torch.randint(0, V, (8, 32)), torch.randint(0, V, (8, 32))
wrapped = te.auto_checkpoint(model, "100%", backend="cpu", caller_keeps="loss", profile_passes=1)
wrapped.prepare(ids1)
wrapped.replan(wrapped.min_budget_bytes)
print(f"least budget {wrapped.min_budget_bytes} B; segments split the tied weight's readers: "
      f"{bool(wrapped.executor._last.shared_params) and not wrapped.executor._last.plain}")
for m in (model, ref):
    for p in m.parameters():
        p.grad = None
try:
    (wrapped(ids1) + wrapped(ids2)).backward()
except RuntimeError as e:
    refused = ("zero_grad" in str(e) or "register_hook" in str(e)
               or "Back-propagate each call's loss before the next call" in str(e))
    print(f"refused ({'names a remedy' if refused else 'unexpected error'}): {str(e)[:200]}")
    sys.exit(0 if refused else 1)
(ref(ids1) + ref(ids2)).backward()
diffs = {name: (p.grad - q.grad).abs().max().item() for (name, p), q in zip(model.named_parameters(), ref.parameters())}
untied = max(v for k, v in diffs.items() if k != "wte.weight")
print(f"max |grad - plain autograd's|: tied weight {diffs['wte.weight']:.3e}, untied parameters {untied:.3e}")
sys.exit(1 if max(diffs.values()) > 1e-6 else 0)
