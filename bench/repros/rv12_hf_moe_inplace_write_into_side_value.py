"""A stage that writes in place into a value the prologue made (``torch.zeros(n).scatter_add_(0, idx, src)`` with
``idx`` computed from the hidden state) accumulates into that value at every run of the stage within a step:
every profiling pass of the first call, and every recomputation under a checkpointing plan.

A. transformers' Qwen2MoeForCausalLM at a tiny random configuration (2 layers, width 32, 4 experts, top-2,
   ``output_router_logits=True``) trained on 2 x 16 tokens with an ``attention_mask`` (one row padded), as a tokenizer
   hands it over: ``auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")``. With a mask,
   ``load_balancing_loss_func`` (shared by Mixtral, Qwen2/3-MoE, OLMoE, GraniteMoE, Jamba, DBRX, PhiMoE, gpt-oss, ...)
   counts tokens per expert with ``torch.zeros(num_experts).scatter_add_(0, selected_experts, mask)``.
   Observed (CPU, torch 2.13, transformers 5.24): the first step returns aux_loss 38.006 where plain autograd gives
   2.000 (loss 4.6086 vs 4.5726) and its gradients are 4.8e-4 off; the second step too (the signature is captured
   again at the second call: see rv12_hf_output_hooks_capture_twice.py); from the third step on they are equal.
B. The same pattern inside the layers (each layer scales its output by tokens-per-expert counts made with
   ``torch.zeros(E).scatter_add_``), captured by export, planned at 60 % and at the least budget: the loss is equal
   but the parameter gradients are 0.07-0.14 off plain autograd's, silently (every recomputation adds the counts
   again into the held zeros; at plain autograd's peak, no recomputation, they are equal).

Cause: torch_exec/auto.py, the split of the captured graph into side and carrying nodes (``_Graph.__init__``, Note
[Cut points]): ``torch.zeros(...)`` reads nothing that carries gradient, so it is side data, made once per step in
the prologue and held; the ``scatter_add_`` that writes into it reads ``selected_experts`` (made from the hidden
state), so it is a carrying node inside a stage. ``_check_side_effects`` only checks side nodes that write into values
carrying nodes read, not carrying nodes that write into side values. Each run of that stage (profiling passes,
``fwd_nograd`` then the recomputation in the backward) adds into the same prologue tensor.

Expected: plain autograd's loss, aux_loss and gradients at every step and budget. E.g. a side value that a carrying
node writes into (``_written_args``) is moved into the chain with the side nodes it depends on (made again by
every run of the stage that writes it), or cloned at the entry of that stage; failing that, refused by name.
Exits 1 while any of these differ."""
import copy
import sys

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers

from _setup import nn, te, torch  # the tree under test: GS_ROOT
from torch_exec.executor import plain_peak_bytes

bad = False

# ---------------------------------------------------------------- A. Qwen2-MoE, attention mask, router aux loss
torch.manual_seed(0)
config = transformers.Qwen2MoeConfig(
    vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    shared_expert_intermediate_size=32, output_router_logits=True)
model = transformers.Qwen2MoeForCausalLM(config).train()
plain = copy.deepcopy(model)
g = torch.Generator().manual_seed(5)
ids = torch.randint(3, 97, (2, 16), generator=g)
mask = torch.ones_like(ids)
mask[0, -4:] = 0
labels = ids.masked_fill(mask == 0, -100)
batch = dict(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
wrapped = te.auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")
print("A. Qwen2MoeForCausalLM, attention_mask with padding, output_router_logits=True, budget 60%")
for step in range(3):
    model.zero_grad(set_to_none=True)
    plain.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    out = wrapped(**batch)
    aux_w, loss_w = out.aux_loss.item(), out.loss
    del out
    loss_w.backward()
    torch.manual_seed(1)
    ref = plain(**batch)
    aux_p, loss_p = ref.aux_loss.item(), ref.loss
    del ref
    loss_p.backward()
    diff = max((a.grad - b.grad).abs().max().item() for a, b in zip(model.parameters(), plain.parameters())
               if b.grad is not None)
    same = aux_w == aux_p and torch.equal(loss_w.detach(), loss_p.detach()) and diff <= 1e-6
    bad |= not same
    print(f"  step {step}: aux_loss {aux_w:.4f} (plain autograd {aux_p:.4f}), loss {loss_w.item():.4f} "
          f"({loss_p.item():.4f}), largest gradient difference {diff:.2e}{'' if same else '  WRONG'}")


# ---------------------------------------------------------------- B. the same pattern inside the layers
class Counted(nn.Module):
    """Each layer routes every row to an expert, counts rows per expert into a fresh torch.zeros with
    scatter_add_, and scales its output by the count of the row's expert."""

    def __init__(self, D=32, L=6, E=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(D, D) for _ in range(L))
        self.gates = nn.ModuleList(nn.Linear(D, E) for _ in range(L))
        self.E = E

    def forward(self, x):
        h = x
        for layer, gate in zip(self.layers, self.gates):
            sel = gate(h).argmax(-1)
            counts = torch.zeros(self.E).scatter_add_(0, sel, torch.ones(sel.shape[0]))
            h = torch.tanh(layer(h)) * (1 + counts[sel].unsqueeze(-1) / sel.shape[0])
        return h.pow(2).mean()


torch.manual_seed(0)
model = Counted()
plain = copy.deepcopy(model)
x = torch.randn(64, 32)
wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu")
wrapped.prepare(x)
ex = wrapped.executor
peak = plain_peak_bytes(ex._last)
print("B. tokens-per-expert counts made with torch.zeros(E).scatter_add_ in every layer")
for label, budget in (("plain autograd's peak", peak), ("60%", int(0.6 * peak)), ("least", ex.min_budget_bytes)):
    wrapped.replan(max(budget, ex.min_budget_bytes))
    model.zero_grad(set_to_none=True)
    plain.zero_grad(set_to_none=True)
    loss_w = wrapped(x)
    loss_w.backward()
    loss_p = plain(x)
    loss_p.backward()
    diff = max((a.grad - b.grad).abs().max().item() for a, b in zip(model.parameters(), plain.parameters())
               if b.grad is not None)
    recomputed = sum(op.kind.name == "FWD_NOGRAD" for op in wrapped.plan.schedule)
    same = torch.equal(loss_w.detach(), loss_p.detach()) and diff <= 1e-6
    bad |= not same
    print(f"  {label}: {recomputed} no-grad forwards, loss {loss_w.item():.6f} (plain autograd {loss_p.item():.6f}), "
          f"largest gradient difference {diff:.2e}{'' if same else '  WRONG'}")

print("BUG: a stage's in-place write into a prologue value is repeated by profiling and recomputation" if bad else "ok")
sys.exit(1 if bad else 0)
