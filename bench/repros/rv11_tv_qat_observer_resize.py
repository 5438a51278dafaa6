"""torchvision's quantization-aware training (QAT) ResNet-18, prepared as torchvision's QAT recipe does
(``torchvision.models.quantization.resnet18(quantize=False)``, ``fuse_model(is_qat=True)``, ``prepare_qat`` with
``get_default_qat_qconfig("fbgemm")``; 10 classes, batch 2 at 64 x 64) and wrapped right away with
``auto_checkpoint(model, "100%", backend="cpu")``: the first call (or ``prepare``) raises a bare RuntimeError from
inside the wrapper, where plain autograd trains the same model.

Observed (CPU, torch 2.13, torchvision 0.28):
    RuntimeError: The size of tensor a (64) must match the size of tensor b (0) at non-singleton dimension 0
raised from torch_exec/_util.py, ModelSnapshot.restore (``b.data.copy_(data)``, line 1416), called from
AutoCheckpointed._capture_for / prepare (torch_exec/auto.py). Running one plain forward before wrapping avoids it
(and the step then trains, but see rv11_tv_qat_fused_fakequant_recompute.py for its gradients under recomputation).
Cause: a freshly prepared per-channel observer (the weights' ``MovingAveragePerChannelMinMaxObserver`` inside
``FusedMovingAvgObsFakeQuantize``) holds ``min_val``/``max_val`` buffers of shape [0], which its first forward
resizes in place to [channels]. ModelSnapshot clones the buffers before the probe and capture runs and restores
them with ``copy_`` into the same tensors, now of another shape. With a restore that puts a buffer of another
shape back whole (``b.data = data`` where ``b.shape != data.shape``; tried here by patching, not in the repo) the
capture succeeds and the first step's loss and gradients equal plain autograd's.
Fix: in ModelSnapshot.restore (and wherever buffers are restored by copy), restore a buffer whose shape changed by
replacing its data (``b.data = data``) instead of ``copy_``.
Expected: the first call works as plain autograd's does. Exits 1 while it raises."""
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

torch.manual_seed(0)
model = tq.resnet18(weights=None, quantize=False, num_classes=10).train()
model.fuse_model(is_qat=True)
model.qconfig = torch.ao.quantization.get_default_qat_qconfig("fbgemm")
torch.ao.quantization.prepare_qat(model, inplace=True)
obs = model.conv1.weight_fake_quant.activation_post_process
print(f"conv1's weight observer before the first forward: min_val {tuple(obs.min_val.shape)}")
x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
plain = copy.deepcopy(model)
lp = F.cross_entropy(plain(x), y)
lp.backward()
print(f"plain autograd: loss {lp.item():.6f}; the observer's min_val now "
      f"{tuple(plain.conv1.weight_fake_quant.activation_post_process.min_val.shape)}")
w = te.auto_checkpoint(model, "100%", backend="cpu")
try:
    loss = F.cross_entropy(w(x), y)
    loss.backward()
except RuntimeError as err:
    print(f"auto_checkpoint's first call: {type(err).__name__}: {err}")
    print("BUG: a freshly prepared QAT model cannot be wrapped (a buffer resized by the forward breaks the restore)")
    sys.exit(1)
diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), plain.parameters()))
print(f"auto_checkpoint: loss {loss.item():.6f}, largest gradient difference {diff:.2e}: ok")
sys.exit(0)
