"""The optimizer fused into the backward (PyTorch's "optimizer step in backward" recipe:
``p.register_post_accumulate_grad_hook(lambda p: (opt[p].step(), opt[p].zero_grad()))``, used precisely to
save memory) on a language model whose input embedding is tied to its output head (GPT-2, here a tiny
hand-made one). Under a checkpointing plan the tied weight's post-accumulate hook fires TWICE per backward:
Note [Shared leaves split tape runs] (torch_exec/executor.py) starts a new segment at the second reader of a
shared leaf, so each segment backward accumulates its part into ``.grad`` and runs the hook. The optimizer
then steps Adam twice on two partial gradients instead of once on their sum: the tied weight drifts from
plain autograd's after the first step, and every later loss differs. Plain autograd (and "100%") call the
hook once. A Siamese network (one encoder applied to two inputs, run as a CheckpointedJoin) is the same
for EVERY parameter of the shared encoder: each branch's backward accumulates and fires the hooks. Expected: each parameter's post-accumulate hook runs once per backward with the whole gradient
(or a refusal naming the tied parameter)."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

V, D, T = 200, 64, 16


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


def fuse_optimizer(model):
    opts, calls = {}, {}
    for name, p in model.named_parameters():
        opts[p] = torch.optim.Adam([p], lr=1e-2)

        def hook(p, name=name):
            calls[name] = calls.get(name, 0) + 1
            opts[p].step()
            opts[p].zero_grad()
        p.register_post_accumulate_grad_hook(hook)
    return calls


class Siamese(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(32, D), nn.ReLU(), *[m for _ in range(5) for m in (nn.Linear(D, D), nn.Tanh())],
                                 nn.Linear(D, 16))

    def forward(self, a, b, y):
        d = (self.enc(a) - self.enc(b)).pow(2).sum(1)
        return (y * d + (1 - y) * F.relu(1.0 - d)).mean()


bad = False
torch.manual_seed(0)
ref = Siamese()
model = copy.deepcopy(ref)
calls_ref = fuse_optimizer(ref)
w = te.auto_checkpoint(model, "50%", backend="cpu")
calls_w = fuse_optimizer(model)
g = torch.Generator().manual_seed(0)
for step in range(2):
    a, b = torch.randn(128, 32, generator=g), torch.randn(128, 32, generator=g)
    y = (torch.rand(128, generator=g) > 0.5).float()
    calls_ref.clear()
    calls_w.clear()
    ref(a, b, y).backward()
    w(a, b, y).backward()
    diff = max((p - q).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
    twice = sorted(n for n in calls_ref if calls_w.get(n) != calls_ref[n])
    print(f"Siamese ({type(w.executor).__name__}) 50% step {step}: max |param - plain param| {diff:.3e}; "
          f"{len(twice)} of {len(calls_ref)} parameters' hooks ran {sorted({calls_w[n] for n in twice})} times (plain 1)")
    bad |= diff > 0 or bool(twice)

for budget in ("40%", "100%"):
    torch.manual_seed(0)
    ref = TiedLM()
    model = copy.deepcopy(ref)
    calls_ref = fuse_optimizer(ref)
    w = te.auto_checkpoint(model, budget, backend="cpu", capture="export", caller_keeps="loss")
    calls_w = fuse_optimizer(model)
    g = torch.Generator().manual_seed(0)
    for step in range(3):
        ids = torch.randint(0, V, (8, T), generator=g)
        calls_ref.clear()
        calls_w.clear()
        la = ref(ids)
        la.backward()
        lb = w(ids)
        lb.backward()
        diff = max((p - q).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
        print(f"budget {budget} step {step}: loss {lb.item():.6f} (plain {la.item():.6f}); max |param - plain param| "
              f"{diff:.3e}; wte.weight hook calls {calls_w.get('wte.weight')} (plain {calls_ref.get('wte.weight')}); "
              f"plan overhead {w.plan.overhead:.3f}")
        bad |= diff > 0 or calls_w != calls_ref
print("BUG: the tied weight's optimizer steps twice per backward" if bad else "ok")
sys.exit(1 if bad else 0)
