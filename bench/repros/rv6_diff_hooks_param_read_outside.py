"""Note [Hooks on a leaf several segments read] (torch_exec/executor.py) defers the post-accumulate-grad hooks
of a parameter only where the modules of TWO OR MORE STAGES hold it (``params_read_by_several``). A parameter
that ONE stage holds and the caller's code outside the wrapper also reads (the usual tied language-model head
when the wrapper covers the embedding and the blocks, and the head is computed after it:
``logits = F.linear(h, wte.weight)``) gets its gradient in two parts as well: the schedule's segment backward
accumulates the stage's part into ``.grad`` (running the hook), then the outer engine accumulates the head's
part (running it again). With the optimizer fused into the backward (the recipe the Note cites) Adam steps
twice per backward on partial gradients, and the weights drift from plain autograd's. Plain autograd (and the
same model with budget None) runs the hook once. Expected: one call per backward with the whole gradient (or
a refusal naming the parameter)."""
import copy
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

V, D = 100, 64


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
                                      for _ in range(6)])
        self.body = None  # the wrapper over [wte, *blocks], set below

    def forward(self, ids):
        h = self.body(ids) if self.body is not None else self.blocks(self.wte(ids))
        return F.cross_entropy(F.linear(h, self.wte.weight).reshape(-1, V), ids.reshape(-1))  # tied head


def fuse_optimizer(model):
    calls = {}
    for name, p in model.named_parameters():
        opt = torch.optim.Adam([p], lr=1e-2)

        def hook(p, name=name, opt=opt):
            calls[name] = calls.get(name, 0) + 1
            opt.step()
            opt.zero_grad()
        p.register_post_accumulate_grad_hook(hook)
    return calls


torch.manual_seed(0)
ref = LM()
model = copy.deepcopy(ref)
model.body = te.CheckpointedSequential([model.wte, *model.blocks], budget="40%", backend="cpu")
calls_ref, calls_w = fuse_optimizer(ref), fuse_optimizer(model)
ids = torch.randint(0, V, (16, 32), generator=torch.Generator().manual_seed(0))
model.body.prepare(ids)
bad = False
for step in range(3):
    calls_ref.clear()
    calls_w.clear()
    ref(ids).backward()
    model(ids).backward()
    diff = max((p - q).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
    print(f"step {step}: wte.weight hook calls {calls_w.get('wte.weight')} (plain {calls_ref.get('wte.weight')}); "
          f"max |param - plain param| {diff:.3e}; plan overhead {model.body.plan.overhead:.3f}")
    bad |= calls_w != calls_ref or diff > 1e-6
print("BUG: the tied weight's post-accumulate hook runs twice per backward" if bad else "ok")
sys.exit(1 if bad else 0)
