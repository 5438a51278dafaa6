"""transformers' Wav2Vec2ForCTC (block fallback) and BeitForImageClassification (torch.export) at tiny random
configurations, wrapped with ``auto_checkpoint(model, "1%", caller_keeps="loss", backend="cpu")``: a budget below the
least, to learn the least from the error, as docs/pytorch.md's table says ("InfeasibleBudgetError ... the message names
the least budget in bytes, and for a percentage the least percentage"). Then a fresh wrapper at the bytes it named.

Observed (CPU, torch 2.13, transformers 5.24):
  Wav2Vec2ForCTC: "budget 22849 B is below the 334008 B the step reaches outside the stages ... raise the budget to at
    least 334008 B (budget 1% of plain autograd's peak 2284968 B; this input needs at least 14.7%)", ``min_bytes``
    334008; a fresh wrapper at 334008 B raises again: "below the minimum feasible budget 1374888 B for this chain"
    (60.2 %, four times the least the first error named).
  BeitForImageClassification: ``min_bytes`` 10785 ("this input needs at least 6.5%"); at 10785 B it raises again,
    naming 89453 B.
ProphetNet (block fallback) behaves the same (500564 B named, 551848 B the least).

Cause: torch_exec/executor.py ``_solve_above_floor`` raises ``below_floor_message(budget, entry.floor_bytes)`` with
``min_bytes = entry.floor_bytes`` as soon as the budget is below the floor (what the code outside the stages reaches),
before the chain's own least budget is asked for; the percentage hint is then computed from that floor. The floor is
a lower bound of the least budget, not the least.

Expected: the error names the least budget, max(floor, the chain's least) (the profile is there: the second error
computes it), in its text, its percentage and ``min_bytes``, so that a budget raised to what it names trains. Exits 1
while a fresh wrapper at the named ``min_bytes`` raises InfeasibleBudgetError.

Run: GS_ROOT=<tree> python bench/repros/rv19d_hf_floor_error_names_wrong_least.py   (~15 s)"""
import sys
import warnings

from _hf import te, torch, transformers  # the tree under test: GS_ROOT

import gpusolve  # noqa: E402  (the tree's: after _setup)

g = torch.Generator().manual_seed(3)
AUDIO = dict(input_values=torch.randn(2, 800, generator=g), labels=torch.randint(3, 64, (2, 6), generator=g))
IMAGE = dict(pixel_values=torch.randn(2, 3, 16, 16, generator=g), labels=torch.randint(0, 5, (2,), generator=g))


def wav2vec2():
    return transformers.Wav2Vec2ForCTC(transformers.Wav2Vec2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, pad_token_id=0, mask_time_prob=0.0, ctc_zero_infinity=True, layerdrop=0.0))


def beit():
    return transformers.BeitForImageClassification(transformers.BeitConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16, patch_size=4,
        num_labels=5, use_relative_position_bias=True))


def first_step(make, kw, budget):
    """(wrapper, None) when a step trains at ``budget``, else (wrapper, the InfeasibleBudgetError)."""
    torch.manual_seed(0)
    model = make().train()
    wrapped = te.auto_checkpoint(model, budget, caller_keeps="loss", backend="cpu")
    try:
        wrapped(**kw).loss.backward()
    except gpusolve.InfeasibleBudgetError as err:
        return wrapped, err
    return wrapped, None


bad = False
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for name, make, kw in (("Wav2Vec2ForCTC", wav2vec2, AUDIO), ("BeitForImageClassification", beit, IMAGE)):
        wrapped, err = first_step(make, kw, "1%")
        print(f"{name} ({wrapped.capture.method}) at 1%: min_bytes {err.min_bytes}: {str(err)[:120]} ... "
              f"{str(err)[str(err).rfind('(budget'):]}")
        _, again = first_step(make, kw, err.min_bytes)
        if again is None:
            print(f"  a fresh wrapper at the named {err.min_bytes} B trains")
        else:
            bad = True
            print(f"  a fresh wrapper at the named {err.min_bytes} B raises again: min_bytes {again.min_bytes} "
                  f"({again.min_bytes / err.min_bytes:.2f} x): {str(again)[:140]}")

print("BUG: the error below the floor names the floor as the least budget; the least is higher" if bad else "ok")
sys.exit(1 if bad else 0)
