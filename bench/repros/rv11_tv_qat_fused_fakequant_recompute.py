"""torchvision's quantization-aware training (QAT) ResNet-18
(``torchvision.models.quantization.resnet18(quantize=False)``, ``fuse_model(is_qat=True)``, ``prepare_qat`` with
``get_default_qat_qconfig("fbgemm")``, 10 classes, batch 2 at 64 x 64; one plain forward first so that the per-channel
observers have their shapes: rv11_tv_qat_observer_resize.py),
wrapped with ``auto_checkpoint(model, budget, backend="cpu")``: at the least budget the loss and every buffer equal
plain autograd's, but the parameter gradients do not.

Observed (CPU, torch 2.13, torchvision 0.28): at "100%" (plain autograd runs) the largest |gradient difference| is 0;
at the least budget (``w.min_budget_bytes``, 42780416 B, recomputation) it is 1.87 on conv1.weight (the largest
gradient is 2.49), 0.26 on layer1.0.conv1.weight, 0.25 on layer4.0.conv1.weight. The profile's ``buffer_writes`` is
False for all 34 profiled stages; forcing it True for every stage (a test, not a fix) makes the gradients equal (0).
A 4-block Conv-BN-ReLU toy QAT model shows the same (8.6e-3), and is exact with the observers disabled
(``disable_observer``) or the weights' fake quantisation disabled.
Cause: the default QAT fake-quantiser (``FusedMovingAvgObsFakeQuantize``) runs
``aten.fused_moving_avg_obs_fake_quant``, which updates its running min/max, scale and zero point in place and then
quantises with them, WITHOUT bumping the buffers' version counters (checked below). torch_exec/profiler.py (around
lines 597-613) decides a stage's ``buffer_writes`` by those counters only, so the stage counts as not writing a
buffer; Runtime.run_stage (torch_exec/executor.py, Note [Recomputing from the step's buffers]) then takes no copy of
its buffers before its first run, and the re-run in the backward starts from the buffers the forward already updated:
the moving average moves a second time, the scale differs, and the re-run's fake-quantised weights (hence the tape and
the gradients) are not the forward's. The buffers end right because the re-run writes into scratch clones. Through
the block fallback (``capture="blocks"``) the same model trains exactly, by chance: eager BatchNorm's
``num_batches_tracked.add_(1)`` moves a counter in every block; under export that ``add_`` runs in the prologue, and
``aten.batch_norm``'s own statistics updates move no counter either.
Fix: detect buffer writes by value as well (compare the buffers' contents before and after the profiled forward;
they are small), or, in auto_checkpoint's graphs, mark a stage as writing every buffer that a node's schema declares
mutable (``(a!)`` arguments: ``_written_args`` in torch_exec/auto.py already reads them).
Expected: gradients equal plain autograd's (within 1e-6). Exits 1 while they differ."""
import copy
import sys
import types

from _setup import F, te, torch  # the tree under test: GS_ROOT

try:
    import torchvision.models.quantization as tq
except Exception:  # noqa: BLE001 - PyPI's torchvision beside a CPU torch cannot register its C++ operators
    for name in [k for k in sys.modules if k.startswith("torchvision")]:
        del sys.modules[name]
    for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
        sys.modules[name] = types.ModuleType(name)  # the models need none of them
    import torchvision.models.quantization as tq

# the fused fake-quantiser writes its buffers without moving their version counters
fq = torch.ao.quantization.get_default_qat_qconfig("fbgemm").weight()
w0 = torch.randn(8, 3, 3, 3)
fq(w0)
scale, version = fq.scale.clone(), fq.scale._version
fq(w0 * 1.5)
print(f"{type(fq).__name__}: scale changed {not torch.equal(scale, fq.scale)}, its version counter "
      f"{version} -> {fq.scale._version}")

torch.manual_seed(0)
model = tq.resnet18(weights=None, quantize=False, num_classes=10).train()
model.fuse_model(is_qat=True)
model.qconfig = torch.ao.quantization.get_default_qat_qconfig("fbgemm")
torch.ao.quantization.prepare_qat(model, inplace=True)
x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
model(x)  # the observers take their shapes
plain = copy.deepcopy(model)
w = te.auto_checkpoint(model, "100%", backend="cpu")
w.prepare(x)
worst = {}
for budget in ["100%", "least"]:
    w.replan(w.min_budget_bytes if budget == "least" else budget)
    plain.load_state_dict(model.state_dict())
    model.zero_grad(set_to_none=True)
    plain.zero_grad(set_to_none=True)
    la = F.cross_entropy(w(x), y)
    la.backward()
    lb = F.cross_entropy(plain(x), y)
    lb.backward()
    diffs = {n: (p.grad - q.grad).abs().max().item()
             for (n, p), (_, q) in zip(model.named_parameters(), plain.named_parameters())}
    buffers = max((a.double() - b.double()).abs().max().item()
                  for a, b in zip(model.buffers(), plain.buffers()) if a.numel())
    worst[budget] = max(diffs.values())
    top = sorted(diffs.items(), key=lambda kv: -kv[1])[:3]
    print(f"{budget:6s} budget {w.plan.budget_bytes} B: loss {la.item():.6f} vs plain {lb.item():.6f}, "
          f"buffers differ by {buffers:.1e}, largest gradient difference {worst[budget]:.3e} (largest gradient "
          f"{max(q.grad.abs().max().item() for q in plain.parameters()):.3f}); worst: "
          + ", ".join(f"{n} {d:.2e}" for n, d in top))
bug = worst["least"] > 1e-6
print("BUG: QAT gradients under recomputation differ from plain autograd's" if bug else "ok")
sys.exit(1 if bug else 0)
