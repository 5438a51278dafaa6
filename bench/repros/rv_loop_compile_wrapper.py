"""torch.compile(auto_checkpoint(model, budget)) called before the wrapper's first eager call (wrap, compile,
train: the usual order), or nn.Module.compile() called on the model before wrapping it. The README says a checkpointed step runs eagerly under torch.compile, profiling and
solving outside it; AutoCheckpointed.forward is not compiler-disabled, so the capture itself runs inside
dynamo's trace. Warm (one eager step first) it works."""
import copy
import warnings

from _setup import M, nn, te, torch  # the tree under test: GS_ROOT


class Net(M):
    """M with LayerNorm, GELU and dropout in each block."""

    def __init__(self, D=64, L=6):
        super().__init__(D, L)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.LayerNorm(D), nn.GELU(), nn.Dropout(0.1))
                                    for _ in range(L))


torch.manual_seed(0)  # the same data every run
x = torch.randn(64, 64); y = torch.randint(0, 10, (64,))
for Model, order in ((M, "compile first"), (Net, "compile first"), (Net, "model.compile() before wrapping"),
                     (M, "one eager step first")):
    torch._dynamo.reset()  # each case from a fresh compiler cache
    torch.manual_seed(0)
    model = Model(D=64, L=6); ref = copy.deepcopy(model)
    if order == "model.compile() before wrapping":
        model.compile()
    try:
        wrapped = te.auto_checkpoint(model, "60%", backend="cpu")
    except ValueError as exc:
        print(f"{Model.__name__}, {order}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        continue
    if order == "one eager step first":
        torch.manual_seed(1); wrapped(x, y).backward(); torch.manual_seed(1); ref(x, y).backward()
    compiled = wrapped if order == "model.compile() before wrapping" else torch.compile(wrapped)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.manual_seed(2); loss = compiled(x, y); loss.backward()
            torch.manual_seed(2); want = ref(x, y); want.backward()
            diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
            print(f"{Model.__name__}, {order}: budget {wrapped.plan.budget_bytes} B, capture {wrapped.capture.method}, "
                  f"loss {loss.item():.6f} vs plain {want.item():.6f}, max abs grad diff {diff:.3g}")
        except Exception as exc:  # noqa: BLE001
            print(f"{Model.__name__}, {order}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    for c in caught:
        if "auto_checkpoint" in str(c.message):
            print(f"  warning: {str(c.message)[:260]}")
