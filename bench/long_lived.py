"""Models whose graph leaves auto_checkpoint few cuts with one value across a cut: a value made early and
read late crosses most points of the chain (Note [Values read late] in ``torch_exec/auto.py``). For each
of transformers' models below (tiny random configurations, CPU): the capture, the stages kept, the least
budget as a share of plain autograd's peak, whether the capture warned ("few places to cut") or cut with
more values across a cut (noted), and one measured step (the CPU allocator's peak above the bytes before
it) at the least budget and halfway to plain autograd's peak, against the budget.

    python bench/long_lived.py [--out bench/results/long_lived_cpu]
    python bench/long_lived.py --limit 1 --out bench/results/long_lived_cpu_narrow   # one value across a cut

``--limit``: ``torch_exec.auto.LONG_LIVED_CROSSING`` for the run (1: never more than one value, as before
Note [Values read late]). A mixture of experts trained with its load-balancing loss
(``output_router_logits=True``) keeps every layer's router logits for that loss; an encoder-decoder's
encoder output is read by every decoder layer's cross-attention. A decoder-only model of the same size is
the comparison.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import torch_exec as te  # noqa: E402
from bench._common import measured_steps, record_header, steps_cells, write_cpu_record  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402


def models():
    """(name, model, inputs) of each case; random weights, seed 0."""
    import transformers as T
    ids = torch.randint(3, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    for aux in (False, True):
        torch.manual_seed(0)
        cfg = T.MixtralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=8, num_attention_heads=4,
                              num_key_value_heads=2, vocab_size=97, max_position_embeddings=32, num_local_experts=4,
                              num_experts_per_tok=2, output_router_logits=aux)
        yield f"Mixtral, 8 layers, output_router_logits={aux}", T.MixtralForCausalLM(cfg), dict(input_ids=ids, labels=ids)
    for enc, dec in ((2, 2), (2, 8), (8, 8)):
        torch.manual_seed(0)
        cfg = T.BartConfig(d_model=32, encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=97,
                           max_position_embeddings=32, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                           decoder_start_token_id=2)
        yield f"BART, {enc}+{dec} layers", T.BartForConditionalGeneration(cfg), dict(input_ids=ids, labels=ids)
    for n in (2, 8):
        torch.manual_seed(0)
        cfg = T.T5Config(vocab_size=97, d_model=32, d_ff=64, num_layers=n, num_heads=4, d_kv=8,
                         decoder_start_token_id=0)
        yield f"T5, {n}+{n} layers", T.T5ForConditionalGeneration(cfg), dict(input_ids=ids, labels=ids)
    torch.manual_seed(0)
    cfg = T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=16, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=97, max_position_embeddings=32)
    yield "Llama, 16 layers (decoder only)", T.LlamaForCausalLM(cfg), dict(input_ids=ids, labels=ids)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "long_lived_cpu"))
    parser.add_argument("--limit", type=int, default=None,
                        help="torch_exec.auto.LONG_LIVED_CROSSING for this run (default: the module's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import torch_exec.auto as auto
    if args.limit is not None:
        auto.LONG_LIVED_CROSSING = args.limit
    rows = []
    for name, model, inputs in models():
        model.train()
        wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu", caller_keeps="loss")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wrapped.prepare(**inputs)
        few = [str(w.message) for w in caught if "few places to cut" in str(w.message)]
        ex = wrapped.executor
        lo, hi = ex.min_budget_bytes, plain_peak_bytes(ex._last)
        wide = any("values across a cut instead" in n for n in wrapped.capture.notes)
        steps = measured_steps(wrapped, lambda: wrapped(**inputs).loss.backward(), lo, hi)
        rows.append(dict(model=name, method=wrapped.capture.method, stages=ex.chain.n, least_bytes=lo,
                         plain_peak_bytes=hi, least_pct=100 * lo / hi, warned=bool(few), wide=wide,
                         warning=few[0] if few else None, notes=wrapped.capture.notes, steps=steps))
        print(f"{name:40s} {ex.chain.n:3d} stages, least {100 * lo / hi:5.1f} % of plain, warned {bool(few)}, "
              f"wide {wide}, held {all(s['within_budget'] for s in steps)}", flush=True)
    out = Path(args.out)
    record = write_cpu_record(out, "long_lived.py", argv, rows, long_lived_crossing=auto.LONG_LIVED_CROSSING)
    lines = record_header(record, "Few places to cut: values read late (CPU)",
                          "transformers' models at tiny random configurations (width 32, 2 x 16 tokens), "
                          "`caller_keeps='loss'`; the least budget as a share of plain autograd's measured peak; "
                          "warned: the capture said \"few places to cut\"; wide: it cut with up to "
                          f"{auto.LONG_LIVED_CROSSING} values across a cut (`LONG_LIVED_CROSSING`, Note [Values read "
                          "late] in `torch_exec/auto.py`); measured: one step's peak (CPU allocator) / the budget, "
                          "at the least budget (f = 0) and halfway to plain autograd's peak (f = 0.5).")
    lines += ["| model | capture | stages | least budget B | plain peak B | least % | warned | wide | "
              "f = 0: measured / budget | f = 0.5: measured / budget | held |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['method']} | {r['stages']} | {r['least_bytes']} | {r['plain_peak_bytes']} | "
                     f"{r['least_pct']:.1f} | {'yes' if r['warned'] else 'no'} | {'yes' if r['wide'] else 'no'} | "
                     f"{' | '.join(steps_cells(r['steps']))} |")
    warned = [r for r in rows if r["warned"]]
    if warned:
        lines += ["", "The warning, for the first model that got it:", "", f"> {warned[0]['warning']}"]
    noted = [n for r in rows for n in r["notes"] if "values across a cut instead" in n]
    if noted:
        lines += ["", "The note, for the first model that got it:", "", f"> {noted[0]}"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
