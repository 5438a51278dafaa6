"""auto_checkpoint's torch.export capture fixes the model's Python-level behaviour at the first call of an input
signature: forward hooks (run once, while tracing, on fake tensors) and module attributes such as Dropout.p are
baked into the graph. Changing them later (a hook added or removed, a dropout schedule) is not part of the
signature (_key: inputs, training modes, requires_grad, autocast), so the old graph keeps running without a
word: wrong loss and gradients. A hook that logs activations never runs in a training step."""
import copy

from _setup import M, nn, te, torch  # the tree under test: GS_ROOT


class Net(M):
    def __init__(self, D=128, L=6, p=0.1):
        super().__init__(D, L)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Dropout(p)) for _ in range(L))


def max_grad_diff(a, b):
    return max((p.grad - q.grad).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def pair(p=0.1):
    torch.manual_seed(0)
    model = Net(p=p); ref = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu")
    wrapped.prepare(x, y)
    wrapped.replan(wrapped.executor.min_budget_bytes)
    return model, ref, wrapped


def step(model, ref, wrapped, seed=1):
    model.zero_grad(); ref.zero_grad()
    torch.manual_seed(seed); loss = wrapped(x, y); loss.backward()
    torch.manual_seed(seed); want = ref(x, y); want.backward()
    return f"loss {loss.item():.6f} vs plain {want.item():.6f}, max abs grad diff {max_grad_diff(model, ref):.3g}"


torch.manual_seed(0)  # the same data every run
x = torch.randn(64, 128); y = torch.randint(0, 10, (64,))

# 1. a forward hook that changes a block's output, registered after the first step (on both copies)
model, ref, wrapped = pair()
print(f"budget {wrapped.plan.budget_bytes} B, capture {wrapped.capture.method}, {len(wrapped.capture.stages)} stages")
print(f"1. first step: {step(model, ref, wrapped)}")
for net in (model, ref):
    net.layers[2].register_forward_hook(lambda mod, inp, out: out * 4.0)
print(f"   forward hook added after it: {step(model, ref, wrapped)}; captures {len(wrapped._captures)}")

# 2. a dropout schedule: p changed on the model's Dropout modules after the first step
model, ref, wrapped = pair()
step(model, ref, wrapped)
for net in (model, ref):
    for mod in net.modules():
        if isinstance(mod, nn.Dropout):
            mod.p = 0.5
print(f"2. Dropout.p 0.1 -> 0.5 after the first step: {step(model, ref, wrapped)}; captures {len(wrapped._captures)}")

# 3. an annealed float attribute the forward reads (a softmax temperature, a KL weight), lowered after step 1
class TempNet(Net):
    tau = 1.0

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
        return torch.nn.functional.cross_entropy(self.head(x) / self.tau, y)


torch.manual_seed(0)
model = TempNet(); ref = copy.deepcopy(model)
wrapped = te.auto_checkpoint(model, "100%", backend="cpu"); wrapped.prepare(x, y)
wrapped.replan(wrapped.executor.min_budget_bytes)
step(model, ref, wrapped)
model.tau = ref.tau = 0.25
print(f"3. temperature attribute 1.0 -> 0.25 after the first step: {step(model, ref, wrapped)}; "
      f"captures {len(wrapped._captures)}")

# 4. a hook that records activations (feature logging), registered before wrapping
model, ref, wrapped = pair(p=0.0)
seen = {"wrapped": [], "plain": []}
model.layers[2].register_forward_hook(lambda mod, inp, out: seen["wrapped"].append(out.detach()))
ref.layers[2].register_forward_hook(lambda mod, inp, out: seen["plain"].append(out.detach()))
model2, ref2, wrapped2 = model, ref, te.auto_checkpoint(model, "100%", backend="cpu")
seen["wrapped"].clear()
wrapped2.prepare(x, y); wrapped2.replan(wrapped2.executor.min_budget_bytes)
n_capture = len(seen["wrapped"]); kinds = sorted({type(t).__name__ for t in seen["wrapped"]})
seen["wrapped"].clear()
for _ in range(3):
    step(model2, ref2, wrapped2)
print(f"4. activation-logging hook: calls during capture/prepare {n_capture} ({kinds}); "
      f"calls in 3 training steps: wrapped {len(seen['wrapped'])}, plain {len(seen['plain'])}")
