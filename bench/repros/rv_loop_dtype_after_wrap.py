"""model.double() after the first call, on a model fed integer token ids (no buffers): the input signature
is unchanged, the parameters are the same objects (Module._apply swaps .data), so the float32 capture,
profile and plan are reused for a float64 model and the step runs at twice the memory its plan counts."""
import copy
import warnings

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT


class Tok(nn.Module):
    def __init__(self, V=100, D=128, L=6):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.GELU()) for _ in range(L))
        self.head = nn.Linear(D, V)

    def forward(self, ids, labels=None):
        h = self.emb(ids)
        for b in self.blocks:
            h = b(h)
        logits = self.head(h)
        return logits if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def max_grad_diff(a, b):
    return max((p.grad - q.grad).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


torch.manual_seed(0)  # the same data every run
ids = torch.randint(0, 100, (16, 32)); labels = torch.randint(0, 100, (16, 32))
for kind in ("auto_checkpoint", "CheckpointedSequential"):
    torch.manual_seed(0)
    net = Tok()
    if kind == "auto_checkpoint":
        model, ref = net, copy.deepcopy(net)
        w = te.auto_checkpoint(model, "100%", backend="cpu")
        w.prepare(ids, labels)
        step = lambda: w(ids, labels)  # noqa: E731
    else:
        model = nn.Sequential(net.emb, *net.blocks, net.head); ref = copy.deepcopy(model)
        w = te.CheckpointedSequential(model, budget="100%", backend="cpu")
        w.prepare(ids)
        step = lambda: F.cross_entropy(w(ids).flatten(0, 1), labels.flatten())  # noqa: E731
    w.replan(w.executor.min_budget_bytes if kind == "auto_checkpoint" else w.min_budget_bytes)
    for dtype in (torch.float32, torch.float64):
        w.to(dtype); ref.to(dtype); model.zero_grad(set_to_none=True); ref.zero_grad(set_to_none=True)
        w.measure_memory(1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                step().backward()
            except Exception as exc:  # noqa: BLE001 - a byte budget the new dtype does not fit
                print(f"{kind} {str(dtype)[6:]}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            r = w.memory_report()[-1]  # records the step (and warns when it went over)
        want = ref(ids, labels) if kind == "auto_checkpoint" else F.cross_entropy(ref(ids).flatten(0, 1), labels.flatten())
        want.backward()
        over = r.beyond_param_grads - r.budget
        print(f"{kind} {str(dtype)[6:]}: budget {r.budget} B, predicted {r.predicted_peak} B, measured beyond grads "
              f"{r.beyond_param_grads} B ({'over by ' + str(over) + ' B, ' + format(over / r.budget, '.0%') if over > 0 else 'held'}), "
              f"warnings {[type(c.message).__name__ for c in caught if 'Budget' in type(c.message).__name__]}, "
              f"max abs grad diff {max_grad_diff(model, ref):.3g}")

# transformers' GPT-2 (no buffers either): after model.to(torch.bfloat16) the float32 graph runs on bfloat16
# parameters and raises from inside a stage
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
torch.manual_seed(0)
gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=200, n_positions=64))
ref = copy.deepcopy(gpt2)
w = te.auto_checkpoint(gpt2, "60%", caller_keeps="loss")
ids = torch.randint(0, 200, (4, 32))
w(input_ids=ids, labels=ids).loss.backward()
w.to(torch.bfloat16); ref.to(torch.bfloat16)
torch.manual_seed(1)  # GPT-2 built from a config trains with dropout: both draw the same masks
want = ref(input_ids=ids, labels=ids).loss
try:
    torch.manual_seed(1)
    got = w(input_ids=ids, labels=ids).loss
    print(f"GPT-2 bfloat16 after a float32 step: loss {got.item():.6f} vs plain {want.item():.6f}")
except Exception as exc:  # noqa: BLE001
    print(f"GPT-2 bfloat16 after a float32 step: {type(exc).__name__}: {str(exc).splitlines()[0]} "
          f"(plain autograd: loss {want.item():.4f}); captures {len(w._captures)}")
