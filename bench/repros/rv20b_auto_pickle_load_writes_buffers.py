"""auto_checkpoint(model, "50%") on an MLP with a BatchNorm1d and a buffer the forward updates in place (a running
average of the inputs: ``self.ema.mul_(0.9).add_(0.1 * x.detach().mean(0))``), one training step, then the wrapper
saved and loaded the usual ways: ``torch.save(wrapper)`` / ``torch.load(..., weights_only=False)`` and
``pickle.loads(pickle.dumps(wrapper))``. Compared with the same model (same seed, deepcopy before wrapping) trained by
plain autograd, saved and loaded the same way.

Observed (CPU, torch 2.13), both ways alike: right after loading, the loaded wrapper's ``num_batches_tracked`` is 2
where the saved wrapper's and the loaded plain model's are 1, and its ``ema`` buffer is 0.0949 (max abs) off the
saved one (about a tenth of it: the ``mul_(0.9)`` ran on it). The next step (same batch, same seed) gives plain autograd's loss and gradients (max diff 0), but the
buffers stay off: ``ema`` 0.08541 from plain autograd's, ``num_batches_tracked`` 3 against 2. ``copy.deepcopy(wrapper)``
is not affected (buffers equal plain autograd's after a step).

Cause: torch_exec/auto.py keeps each input signature's captured stages as ``torch.fx.GraphModule``s whose code reads
the model's buffers as attributes and writes some in place (``torch.ops.aten.add_.Tensor(body_1_num_batches_tracked,
1)``, the ema's ``mul_``). torch.fx unpickles a GraphModule by tracing its code
again (``torch.fx.graph_module.reduce_graph_module`` -> ``_deserialize_graph_module`` -> ``Tracer.trace``), and its
tracer hands buffers to the code as the real tensors (only parameters become proxies), so every in-place write of a buffer
by a constant runs on the loaded model's buffer at load time.

Expected: loading a saved wrapper leaves every buffer as saved, as loading the plain model does (e.g. the wrapper
pickles without its captures, ``__getstate__``, and captures again at the first call, or its stage graphs are
pickled with their graph rather than their code). Exits 1 while the loaded wrapper's buffers differ from the saved
ones, or its next step's buffers from plain autograd's.

Run: python bench/repros/rv20b_auto_pickle_load_writes_buffers.py   (~5 s)"""
import copy
import io
import pickle
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT


class Net(nn.Module):
    def __init__(self, D=64, L=6):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(D, D), nn.BatchNorm1d(D, momentum=0.1), nn.Tanh(),
                                  *[m for _ in range(L) for m in (nn.Linear(D, D), nn.Tanh())], nn.Linear(D, 10))
        self.register_buffer("ema", torch.ones(D))  # a running average of the inputs, updated in place

    def forward(self, x, y):
        self.ema.mul_(0.9).add_(0.1 * x.detach().mean(0))
        return F.cross_entropy(self.body(x), y)


torch.manual_seed(0)
net = Net()
ref = copy.deepcopy(net)
wrapped = te.auto_checkpoint(net, "50%", backend="cpu")
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
wrapped(x, y).backward()
ref(x, y).backward()
assert wrapped.plan is not None and not getattr(wrapped.plan, "plain", False), "not a checkpointing plan"


def save_load_torch(m):
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def save_load_pickle(m):
    return pickle.loads(pickle.dumps(m))


bad = False
for how, load in (("torch.save/torch.load", save_load_torch), ("pickle", save_load_pickle)):
    saved_nbt = wrapped.state_dict()["body.1.num_batches_tracked"].item()
    loaded, plain = load(wrapped), load(ref)
    nbt = loaded.state_dict()["body.1.num_batches_tracked"].item()
    plain_nbt = plain.state_dict()["body.1.num_batches_tracked"].item()
    ema_loaded = (loaded.state_dict()["ema"] - wrapped.state_dict()["ema"]).abs().max().item()  # right after loading
    loaded.zero_grad(set_to_none=True)
    plain.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    loss = loaded(x, y)
    loss.backward()
    torch.manual_seed(1)
    want = plain(x, y)
    want.backward()
    grad = max((p.grad - q.grad).abs().max().item() for p, q in zip(loaded.parameters(), plain.parameters()))
    mean = (loaded.state_dict()["ema"] - plain.state_dict()["ema"]).abs().max().item()
    after = (loaded.state_dict()["body.1.num_batches_tracked"].item(), plain.state_dict()["body.1.num_batches_tracked"].item())
    print(f"{how}: num_batches_tracked saved {saved_nbt}, loaded wrapper {nbt}, loaded plain model {plain_nbt}; ema buffer "
          f"loaded vs saved max diff {ema_loaded:.4g}; "
          f"next step: loss {loss.item():.6f} vs {want.item():.6f}, max grad diff {grad:.3g}, "
          f"ema vs plain max diff {mean:.4g}, num_batches_tracked {after[0]} vs {after[1]}")
    bad |= nbt != saved_nbt or ema_loaded > 0 or mean > 1e-6 or after[0] != after[1]
print("DEFECT: loading a saved wrapper wrote its buffers" if bad else "ok: loading leaves the buffers as saved")
sys.exit(1 if bad else 0)
