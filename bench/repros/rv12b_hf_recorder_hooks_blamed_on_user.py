"""transformers' PhimoeForCausalLM at a tiny random configuration (2 layers, width 32, 4 experts, top-2) with
``output_router_logits=True`` (its router auxiliary loss in the loss, as a MoE fine-tune trains it), and YOLOS
(object detection, a list of target dicts as labels) called with ``output_hidden_states=True``:
``auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")``, ``prepare(**batch)``.

Observed (CPU, torch 2.13, transformers 5.24): export refuses both (PhiMoE: its sparsemixer ``PhimoeMultiplier``
is a custom autograd Function; YOLOS: a data-dependent guard, GuardOnDataDependentSymNode), the block fallback takes the
decoder layers, and the call is refused with "CaptureError: auto_checkpoint: forward hooks on the blocks
model.layers.0, model.layers.1 cannot run as in plain autograd under the block fallback ... Return what the hook
takes from the model's forward instead, hook a module inside the block ..., or cut the model by hand". The user
registered no hook: these are transformers' own output recorders (transformers/utils/output_capturing.py),
installed by the wrapper's own probe run because a ``output_*`` flag is set. The remedy named is not one the user
can apply; the one that works (PhiMoE with ``output_router_logits`` off trains through the blocks with plain
autograd's gradients; YOLOS without ``output_hidden_states`` too) is not named. ``_users_hooks`` already tells
these recorders apart for the export path's hook warning (commit 8d78b68), but the block fallback's refusal does
not use it.

Cause: torch_exec/auto.py ``_refuse_block_hooks`` counts every forward hook on a block, transformers' output
recorders included.

Expected: a CaptureError that says the hooks are transformers' output recorders for ``output_router_logits`` /
``output_hidden_states`` / ``output_attentions`` and names turning that flag off (or the manual route) as the
remedy; or, better, the recorders handled (what they collect is a model output the fallback can hand back).
Exits 1 while the refusal tells the user to move hooks they never registered."""
import sys

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import warnings

import transformers

from _setup import te, torch  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")


def phimoe():
    torch.manual_seed(0)
    config = transformers.PhimoeConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2,
        output_router_logits=True)
    ids = torch.randint(3, 97, (2, 16), generator=torch.Generator().manual_seed(5))
    return transformers.PhimoeForCausalLM(config).train(), dict(input_ids=ids, labels=ids, use_cache=False)


def yolos():
    torch.manual_seed(0)
    config = transformers.YolosConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=[32, 32],
        patch_size=8, num_detection_tokens=5, num_labels=3, use_mid_position_embeddings=False)
    g = torch.Generator().manual_seed(9)
    labels = [dict(class_labels=torch.randint(0, 3, (n,), generator=g),
                   boxes=torch.rand(n, 4, generator=g) * 0.5 + 0.25) for n in (2, 3)]
    return (transformers.YolosForObjectDetection(config).train(),
            dict(pixel_values=torch.randn(2, 3, 32, 32, generator=g), labels=labels, output_hidden_states=True))


bad = False
for name, make in (("PhimoeForCausalLM, output_router_logits=True", phimoe),
                   ("YolosForObjectDetection, output_hidden_states=True", yolos)):
    model, batch = make()
    wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu", caller_keeps="loss")
    try:
        wrapped.prepare(**batch)
        wrapped.replan("60%")
        out = wrapped(**batch)
        out.loss.backward()
        print(f"{name}: trains ({wrapped.capture.method})")
    except te.CaptureError as err:
        text = str(err)
        blames_user = "forward hooks on the blocks" in text and "Return what the hook takes" in text
        names_flag = any(f in text for f in ("output_router_logits", "output_hidden_states", "output_attentions"))
        print(f"{name}: CaptureError: {text[:300]} ...")
        print(f"   tells the user to move hooks they never registered: {blames_user}; names the output flag: "
              f"{names_flag}")
        bad |= blames_user or not names_flag
    except Exception as err:  # noqa: BLE001
        print(f"{name}: {type(err).__name__}: {str(err)[:300]}")
        bad = True
print("BUG: transformers' own output recorders are refused as the user's block hooks, with a remedy that does not "
      "apply" if bad else "ok")
sys.exit(1 if bad else 0)
