"""transformers' Wav2Vec2ForCTC at a tiny random configuration (2 encoder layers, width 32, conv feature encoder of
3 layers) with LayerDrop on, as its config has it by default (``Wav2Vec2Config().layerdrop == 0.1``; facebook's
checkpoints ship 0.05-0.1), trained on 2 x 1600 samples of audio with CTC labels:
``auto_checkpoint(model, "1TiB", backend="cpu", caller_keeps="loss")``, ``prepare(**batch)``, ``replan`` to its
least budget, then ``out = wrapped(**batch); loss = out.loss; del out; loss.backward()`` each step, measured with
``measure_memory(1)`` / ``memory_report()``. (Wav2Vec2 and its family are never captured by torch.export here, so
the block fallback runs; SpeechT5ForSpeechToText with its default LayerDrop behaves the same: 48 % over.)

Observed (CPU, torch 2.13, transformers 5.24): the fallback refuses 'wav2vec2.encoder.layers' for its LayerDrop
(README: "that list is refused naming LayerDrop and the remedy") but then takes the convolutional feature encoder
'wav2vec2.feature_extractor.conv_layers' as the chain, which leaves the LayerDrop-ped encoder layers in "the rest of
the model", measured once (at prepare) on whichever layers that one draw ran. At the least budget a step where more
encoder layers run than in that measurement goes over the budget (here 25 % at step 2, layerdrop 0.5 over 4 layers
so that it shows within six steps; any LayerDrop > 0 works the same way), the warning blames "the code between the model's forward
and its backward (the loss)" (the caller computes nothing: ``out.loss``), and every later call raises
InfeasibleBudgetError "the budget was feasible for the plan made before the first backward, but the backwards since
showed more to count": training stops at a budget the wrapper reported as its least feasible one. The gradients
are plain autograd's (the rest runs as plain autograd); it is the memory and the error that are wrong.

Cause: torch_exec/auto.py, the block fallback's choice of a list (Note [Draws between the blocks]): LayerDrop is a
reason to refuse a list as the chain, but not to refuse the model when the LayerDrop-ped list ends up in the code
around the chain, whose memory (Note [The rest of the model]) is then a random variable measured once. The step
meter then reads the extra bytes as the caller's turn (torch_exec/executor.py, Note [The caller's turn]).

Expected: a step at the least budget held, or a CaptureError / clear warning at prepare naming LayerDrop and
``config.layerdrop=0``, as the list itself gets; never an over-budget step blamed on the loss, nor an
InfeasibleBudgetError at the least feasible budget. Exits 1 while a step goes over budget or a call is refused."""
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
batch = dict(input_values=torch.randn(2, 1600, generator=g), labels=torch.randint(3, 20, (2, 6), generator=g))

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
