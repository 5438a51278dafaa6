"""transformers 5 models asked for hidden states, attentions or router logits (``output_hidden_states=True``,
``output_router_logits=True``) at a tiny random configuration: Qwen3ForCausalLM (2 layers, width 32, 2 x 16
tokens) with ``output_hidden_states=True``, wrapped with ``auto_checkpoint(model, "60%", backend="cpu",
caller_keeps="loss")``, prepared with ``prepare(**batch)`` (or ``sample=``), then trained.

Observed (CPU, torch 2.13, transformers 5.24): the same input signature is captured, profiled and solved twice: the
first training call after ``prepare`` captures again (without ``prepare``: the first call and the second call both
capture), and ``prepare``'s work is thrown away. Two captures are kept for one signature (``len(w._captures) == 2``),
each step up to then pays a whole capture and profile (about 16 plain steps each, README), a warning says the
forward hooks of 'model.layers.0' ... "run while the graph is captured and not at each step", though the user
registered none, and, with a MoE model's router aux loss and an attention mask, the second step is computed wrong
too (rv12_hf_moe_inplace_write_into_side_value.py).

Cause: transformers installs its output recorders lazily (``transformers/utils/output_capturing.py``,
``maybe_install_capturing_hooks``): at the model's first forward that asks for an output it adds forward hooks on the
layers and sets ``model._output_capturing_hooks_installed = True``. The wrapper computes the input signature's key
(torch_exec/auto.py ``_key``, with ``captured_state_key``: every module's scalar attributes and forward hooks) before
its probe run (Note [Probing the model]), which is that first forward; the next call's key differs, so it is a new
signature. ``prepare``'s ``ModelSnapshot.restore`` puts parameters and buffers back, not the hooks.

Expected: one capture per input signature: e.g. take the key after the probe (or key the capture under the key the
model has after its probe as well), and leave transformers' own output recorders out of the hook warning.
Exits 1 while a second capture is made."""
import sys
import warnings

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers

from _setup import te, torch  # the tree under test: GS_ROOT

g = torch.Generator().manual_seed(5)
ids = torch.randint(3, 97, (2, 16), generator=g)
batch = dict(input_ids=ids, labels=ids, use_cache=False, output_hidden_states=True)


def make():
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64)).train()


bad = False
for prepared in (True, False):
    model = make()
    wrapped = te.auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if prepared:
            wrapped.prepare(**batch)
        counts = [len(wrapped._captures)]
        for _ in range(3):
            loss = wrapped(**batch).loss
            loss.backward()
            counts.append(len(wrapped._captures))
    hooks = [str(w.message) for w in caught if "forward hooks" in str(w.message)]
    print(f"{'prepare(), then' if prepared else 'no prepare,'} 3 steps: captures held after each "
          f"{'(prepare first) ' if prepared else ''}{counts}; "
          f"transformers' output recorders installed on "
          f"{[n or type(model).__name__ for n, m in model.named_modules() if getattr(m, '_output_capturing_hooks_installed', 0)]}")
    if hooks:
        print(f"  warning: {hooks[0][:160]}")
    bad |= counts[-1] > 1
print("BUG: one input signature is captured, profiled and solved twice" if bad else "ok")
sys.exit(1 if bad else 0)
