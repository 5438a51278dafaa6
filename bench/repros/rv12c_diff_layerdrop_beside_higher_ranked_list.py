"""The block fallback still takes a list as the chain while LayerDrop layers run beside it, in the rest of the
model, whenever that list ranks ABOVE the LayerDrop list (its blocks make more bytes): the new refusal
("the blocks of ... would run beside it", README: "So is another list whose chain would leave the LayerDrop layers
beside it") only looks at LayerDrop lists refused before the list taken, in the ranking's order.

Here: rv12b_hf_layerdrop_rest_over_budget.py's Wav2Vec2ForCTC (layerdrop 0.5, 4 encoder layers, 3 conv layers of
width 32) on 2 x 16000 samples (1 s of audio, as wav2vec2 trains on) instead of 2 x 1600: the convolutional feature
encoder now makes the most bytes, ranks first and is taken with nothing refused; the LayerDrop-ped encoder layers
run in the rest of the model, measured once, and a step at the least budget goes over it (about 3x here), the
excess is blamed on the loss and the next call raises InfeasibleBudgetError at the least budget. At 2 x 1600
samples the same model is refused (CaptureError naming layerdrop=0), as the fix meant.
Cause: torch_exec/auto.py _find_blocks: ``skipping`` holds only the lists refused for LayerDrop before the one
accepted; a lower-ranked LayerDrop list is never run through _blocks_of, so it is never seen.
Expected: a CaptureError naming LayerDrop and layerdrop=0 (as at 2 x 1600 samples), or every step within the
least budget. Exits 1 while a step goes over the budget or the wrapper refuses its own least budget."""
import sys
import warnings

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers
from gpusolve.errors import InfeasibleBudgetError

from _setup import te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
config = transformers.Wav2Vec2Config(
    vocab_size=24, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
    conv_dim=(32, 32, 32), conv_stride=(5, 4, 4), conv_kernel=(10, 4, 4), num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4, mask_time_prob=0.0, ctc_loss_reduction="mean", pad_token_id=0, layerdrop=0.5)
model = transformers.Wav2Vec2ForCTC(config).train()
g = torch.Generator().manual_seed(7)
batch = dict(input_values=torch.randn(2, 16000, generator=g), labels=torch.randint(3, 20, (2, 6), generator=g))

wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu", caller_keeps="loss")
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped.prepare(**batch)
except te.CaptureError as err:
    print(f"refused at prepare: CaptureError: {str(err)[:400]}")
    print("ok (refused, naming the cause)" if "layerdrop" in str(err).lower() else "BUG: refused with another cause")
    sys.exit(0 if "layerdrop" in str(err).lower() else 1)
print("chain:", wrapped.capture.method, wrapped.capture.notes[0][:130])
least = wrapped.executor.min_budget_bytes
wrapped.replan(least)
print(f"least budget {least} B")
for p in wrapped.parameters():
    p.grad = torch.zeros_like(p)
bad = False
for step in range(6):
    wrapped.measure_memory(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = wrapped(**batch)
        except InfeasibleBudgetError as err:
            print(f"step {step}: InfeasibleBudgetError at the least budget: {str(err)[:260]}")
            bad = True
            break
        loss = out.loss
        del out
        loss.backward()
        del loss
    r = wrapped.memory_report()[-1]
    print(f"step {step}: measured {r.beyond_param_grads} B (budget {r.budget}, predicted {r.predicted_peak}) "
          f"held={r.within_budget}")
    for w in caught:
        if "the code between the model's forward" in str(w.message):
            print("   warning:", str(w.message)[:200])
    bad |= not r.within_budget
print("BUG: a step at the least budget goes over it (the LayerDrop-ped layers outside the chain, measured once) "
      "and the wrapper then refuses its own least budget" if bad else "ok")
sys.exit(1 if bad else 0)
