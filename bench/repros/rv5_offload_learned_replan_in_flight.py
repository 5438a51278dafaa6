"""A step still waiting for its backward when the wrapper re-plans its input signature by itself (a review,
2026-11-27). CheckpointedSequential learns from the first backward that only the loss of a (loss, logits)
output gets a gradient (Note [Outputs without a gradient]: entry.replan_due) and re-plans the entry IN
PLACE at the next forward. A step whose forward ran before that (two forwards, then backwards
interleaved with a forward: f1, f2, b1, f3, b2) runs the new plan's backward program over the old plan's
forward state: silently, most parameters get no gradient at all (None), or the step crashes. Shown with
offload= (a plan that swaps checkpoints to the CPU "host") and without. Plain autograd: every step's
gradients are those of its own forward. Exits nonzero while the bug shows."""
from _setup import nn, te, torch
from gpusolve import store_all_peak_bytes


class Out(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.h = nn.Linear(64, classes)

    def forward(self, h):
        logits = self.h(h)
        return logits.square().mean(), logits      # the caller back-propagates the loss only


def net(classes):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(8)], Out(classes))


torch.manual_seed(1)
xs = [torch.randn(64, 64) for _ in range(3)]
bad = 0
for classes, offload, fraction in ((512, None, 0.0), (512, "1e6GB/s", 0.0), (128, "1e6GB/s", 0.0),
                                  (128, "1e6GB/s", 0.4)):
    ref, mod = net(classes), net(classes)
    w = te.CheckpointedSequential(mod, budget="1GiB", backend="cpu", offload=offload, profile_passes=1,
                                  profile_warmup=0)
    w.prepare(xs[0])
    lo, hi = w.min_budget_bytes, store_all_peak_bytes(w._last.exec_chain)
    w.replan(budget=int(lo + fraction * (hi - lo)))
    before = list(w._last.program)
    swaps = getattr(w.plan, "swaps", 0)
    o1 = w(xs[0])
    o2 = w(xs[1])
    o1[0].backward()                       # learns: only output 0 gets a gradient -> replan_due
    mod.zero_grad(set_to_none=True)
    o3 = w(xs[2])                          # re-plans the entry in place
    changed = w._last.program != before
    ref(xs[1])[0].backward()
    try:
        o2[0].backward()                   # step 2's backward, under the new program
        missing = [n for n, p in mod.named_parameters() if p.grad is None]
        diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(mod.parameters(), ref.parameters())
                   if p.grad is not None)
        print(f"classes={classes} offload={offload} budget={w.plan.budget_bytes} B swaps={swaps}: program changed under the pending "
              f"step: {changed}; its backward left {len(missing)} of {len(list(mod.parameters()))} parameters "
              f"without a gradient ({', '.join(missing[:4])}, ...); max abs difference of the others {diff}")
        bad += bool(missing) or diff != 0
    except Exception as exc:  # noqa: BLE001
        print(f"classes={classes} offload={offload} budget={w.plan.budget_bytes} B swaps={swaps}: program changed: {changed}; "
              f"backward raised {type(exc).__name__}: {str(exc)[:160]}")
        bad += 1
    del o3
print("BUG" if bad else "ok")
raise SystemExit(1 if bad else 0)
