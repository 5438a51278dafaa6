"""Under bfloat16 autocast, gradients of a graph torch.export captured differ from eager autograd's (a
review, 2026-11-27), with no torch_exec in the way: a two-layer Llama with grouped-query attention, export's
own module against eager, then auto_checkpoint with the graph (export) and with the block fallback (the
model's own code). The largest parameter-gradient difference, relative to the largest gradient."""
import copy

from _setup import te, torch  # the tree under test: GS_ROOT

import transformers as T  # noqa: E402


def model():
    torch.manual_seed(0)
    return T.LlamaForCausalLM(T.LlamaConfig(vocab_size=4000, hidden_size=256, intermediate_size=688,
                                            num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
                                            max_position_embeddings=256)).train()


class Loss(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids, labels=ids, use_cache=False).loss


torch.manual_seed(1)
ids = torch.randint(3, 4000, (2, 64))


def worst(grads: dict, reference: torch.nn.Module) -> tuple:
    rows = [(float((grads[n] - p.grad).abs().max() / p.grad.abs().max()), n) for n, p in reference.named_parameters()
            if n in grads and grads[n] is not None]
    return max(rows)


for name in ("torch.export alone", "auto_checkpoint, export", "auto_checkpoint, blocks"):
    eager, other = Loss(model()), Loss(model())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        if name == "torch.export alone":
            run = torch.export.export(other, (ids,), strict=False).module()
        else:
            run = te.auto_checkpoint(other, "95%", capture=name.split(", ")[1])
        loss = run(ids)
        loss.backward()
        ref = eager(ids)
        ref.backward()
    grads = {n.removeprefix("m."): p.grad for n, p in
             (run.named_parameters() if name == "torch.export alone" else other.named_parameters())}
    rel, where = worst(grads, eager.m)
    print(f"{name}: loss {'equal' if torch.equal(loss, ref) else 'differs'}; largest gradient difference "
          f"{rel:.2e} of the largest gradient ({where})"
          + ("" if name == "torch.export alone" else f"; {run.plan.notes[-1][:60]}"))
