"""A gradient hook the model registers on an activation inside its forward (x.register_hook(fn): gradient
reversal, gradient scaling, Grad-CAM's saved gradients) is dropped by the torch.export capture: the captured
graph has no hook, nothing refuses or warns, and every parameter before it gets the unscaled gradient. Under
the block fallback the hook lands on the last block's output (the later block calls return the chain's
result), so the layers after it get the scaled gradient instead."""
import copy
import warnings

from _setup import M, F, te, torch  # the tree under test: GS_ROOT


class HookNet(M):
    """M whose forward scales the gradient flowing back through the output of layer 2."""

    def __init__(self, D=128, L=6):
        super().__init__(D, L)
        self.calls = 0

    def forward(self, x, y):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == 2 and x.requires_grad:
                x.register_hook(self.scale)
        return F.cross_entropy(self.head(x), y)

    def scale(self, grad):
        self.calls += 1
        return grad * 3.0


torch.manual_seed(0)  # the same data every run
x = torch.randn(64, 128); y = torch.randint(0, 10, (64,))
for capture in ("auto", "blocks"):
    torch.manual_seed(0)
    model = HookNet(); ref = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu", capture=capture)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            wrapped.prepare(x, y)
        except te.CaptureError as exc:
            print(f"capture={capture}: CaptureError: {str(exc)[:400]}")
            continue
        wrapped.replan(wrapped.executor.min_budget_bytes)
        model.calls = ref.calls = 0
        loss = wrapped(x, y); loss.backward()
    want = ref(x, y); want.backward()
    worst = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    ratio = [model.layers[i][0].weight.grad.norm().item() / ref.layers[i][0].weight.grad.norm().item() for i in (0, 5)]
    print(f"capture={capture}: budget {wrapped.plan.budget_bytes} B, chain by {wrapped.capture.method}, loss diff "
          f"{(loss - want).abs().item():.3g}, max abs grad diff {worst:.3g}, |grad| / plain's: layer 0 {ratio[0]:.3f}, layer 5 {ratio[1]:.3f}, "
          f"hook calls {model.calls} vs plain {ref.calls}, warnings {len([c for c in caught if 'hook' in str(c.message)])}")
