"""A two-tower model whose backbones are frozen, only their last layers trained (a review, 2026-11-27):
CheckpointedJoin (here found by auto_checkpoint) names as its least budget the join model's least,
which is above plain autograd's measured peak, at which the join runs (as plain autograd). The chain
wrapper (join=False) has the rule (plain_least_bytes); the join does not."""
from _setup import F, nn, te, torch


class Block(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(w), nn.LayerNorm(w)
        self.attn = nn.MultiheadAttention(w, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(w, 4 * w), nn.GELU(), nn.Linear(4 * w, w))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Flatten(), nn.Linear(768, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                   nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 16))
        self.emb = nn.Embedding(100, 64)
        self.blocks = nn.Sequential(*[Block(64) for _ in range(3)])
        self.proj = nn.Linear(64, 16)
        for name, p in self.named_parameters():   # frozen backbones: only the last layers train
            p.requires_grad_(name.startswith(("image.9.", "proj.")))

    def forward(self, images, ids):
        a = F.normalize(self.image(images), dim=1)
        b = F.normalize(self.proj(self.blocks(self.emb(ids)).mean(1)), dim=1)
        return F.cross_entropy(a @ b.T / 0.07, torch.arange(a.shape[0]))


torch.manual_seed(0)
args = (torch.randn(16, 3, 16, 16), torch.randint(0, 100, (16, 12)))
for join in (True, False):
    model = TwoTower()
    wrapped = te.auto_checkpoint(model, "100%", join=join)
    wrapped.prepare(*args)
    hundred = wrapped.plan.budget_bytes
    print(f"join={join}: {type(wrapped.executor).__name__}; '100%' = {hundred} B; "
          f"min_budget_bytes = {wrapped.executor.min_budget_bytes} B")
    for budget in (hundred, "99%"):
        try:
            wrapped.replan(budget)
            for p in model.parameters():
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
            wrapped.measure_memory(1)
            wrapped(*args).backward()
            record = wrapped.memory_report()[-1]
            print(f"  budget {budget}: runs; measured {record.beyond_param_grads} B within {record.budget} B: "
                  f"{record.within_budget}")
        except Exception as exc:  # noqa: BLE001
            print(f"  budget {budget}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
try:  # what the join's error asks for
    te.auto_checkpoint(TwoTower(), "100.5%")
    print("'100.5%': accepted")
except Exception as exc:  # noqa: BLE001
    print(f"'100.5%' (what the join's error asks for): {type(exc).__name__}: {str(exc).splitlines()[0]}")
