"""rv22c: an encoder-decoder exported by auto_checkpoint is profiled at every smaller batch whose call signature is
covered: its exported stages are cut at other places when the encoder's and the decoder's lengths change in another
ratio, so no sibling's profile ever serves (Note [Sizes that vary between calls] asks for the same stage names).

Setup: transformers' BartForConditionalGeneration (3 + 3 layers, width 32, 4 heads, vocabulary 101, random weights)
and T5ForConditionalGeneration (3 + 3 layers, d_model 32), ``auto_checkpoint(model, "50%", backend="cpu",
capture="export")``; ``out = w(input_ids=, attention_mask=, decoder_input_ids=, decoder_attention_mask=, labels=)``,
``out.loss.backward()``: first encoder 32 x decoder 24 tokens (batch 4), then 28 x 20 (every tensor of the call smaller:
the call signature is covered, 1.17 x its elements), rows padded in both masks; profiles counted
(``torch_exec.executor.profile_dict``).

Observed (CPU, torch 2.13, transformers 5.24): s22_hf (a1eca63): BART: the 28 x 20 call profiled (2 profiles for 2
calls), its 64 stages' names differing from the 32 x 24 capture's at 55 positions (e.g. '1:model/encoder/embed_tokens
//model/encoder/embed_positions' against '1:model/encoder/embed_tokens'); T5 the same (2 profiles, 42 of 63 names differ). GPT-2, BERT, Llama
and Mistral, whose calls have one length, are covered (plan notes "planned on the profile ...").

Cause: torch_exec/auto.py ``_chain_of`` keeps at most ``max_stages - 1`` of the graph's cut positions (both
captures here have 64 stages, the CPU's max_stages), chosen by ``_choose`` evenly over the cumulative bytes the
carrying nodes allocate; in an encoder-decoder the encoder's share of those bytes grows with the encoder's length and
the decoder's with the decoder's, so another ratio of the two lengths moves the cuts and the stage names; then
``_PlannedModule._size_cover`` (torch_exec/executor.py) skips the sibling, whose profile's stage names are not this
chain's. With the same ratio the cover works (BART 24 x 18 after 32 x 24: planned on its profile, 0 profiles; 32 x 20
and 28 x 24 after it: profiled); a 12-layer GPT-2 (33 stages) is covered at every length.

Expected: a covered call of an encoder-decoder is planned on the larger one's profile (cuts chosen independently of the
sizes, or the smaller capture cut where the covering one was), or docs/pytorch.md "Batches whose sizes vary" says that
an exported encoder-decoder whose two lengths vary is profiled at each signature. Exits 1 while the covered BART call
is profiled.

Run: GS_ROOT=<tree> python bench/repros/rv22c_hf_encdec_export_never_covered.py   (~25 s)
"""
import sys
import warnings

from _hf import te, torch, transformers  # the tree under test: GS_ROOT

import torch_exec.executor as ex  # noqa: E402  (the tree's: after _setup)

warnings.simplefilter("ignore")
transformers.utils.logging.set_verbosity_error()
torch.set_num_threads(1)
PROFILES = {"n": 0}
_REAL = ex.profile_dict


def _counted(*args, **kwargs):
    PROFILES["n"] += 1
    return _REAL(*args, **kwargs)


ex.profile_dict = _counted


def batch(enc, dec, seed):
    g = torch.Generator().manual_seed(seed)
    ids, labels = torch.randint(3, 101, (4, enc), generator=g), torch.randint(3, 101, (4, dec), generator=g)
    mask, dmask = torch.ones(4, enc, dtype=torch.long), torch.ones(4, dec, dtype=torch.long)
    mask[1, enc - 5:] = mask[3, enc - 9:] = dmask[2, dec - 4:] = 0  # rows padded to the batch's longest
    return dict(input_ids=ids, attention_mask=mask, decoder_input_ids=labels, decoder_attention_mask=dmask,
                labels=labels)


def bart():
    return transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=101, d_model=32, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2))


def t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=101, d_model=32, d_kv=8, d_ff=64, num_layers=3, num_decoder_layers=3, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0))


def run(name, make):
    torch.manual_seed(0)
    model = make().train()
    w = te.auto_checkpoint(model, "50%", backend="cpu", capture="export")
    start = PROFILES["n"]
    for i, (enc, dec) in enumerate(((32, 24), (28, 20))):
        w(**batch(enc, dec, i)).loss.backward()
        model.zero_grad(set_to_none=True)
    first, second = (cap.executor for cap in w._captures.values())
    covered = any("planned on the profile" in note for note in second.plan.notes)
    differ = [(a, b) for a, b in zip(first.names, second.names) if a != b]
    print(f"{name}: 32x24 then 28x20 tokens: {PROFILES['n'] - start} profiles for 2 calls; the 28x20 call "
          f"{'planned on the 32x24 profile' if covered else 'profiled'}; stage names differ at {len(differ)} of "
          f"{len(second.names)} positions" + (f" (first: {differ[0][0]!r} against {differ[0][1]!r})" if differ else ""))
    return covered


bart_covered = run("BART", bart)
run("T5", t5)
sys.exit(0 if bart_covered else 1)
