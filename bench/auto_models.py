"""auto_checkpoint on the models of ``examples/models.py`` (CPU): how each chain was found, and the
measured step peak (CPU allocator events) against the plan's prediction and its budget at several
budgets between the least feasible one and plain autograd's measured peak.

    python bench/auto_models.py [--out bench/results/auto_models_cpu]
    python bench/auto_models.py --models tv_densenet121,tv_resnet50,tv_vgg16,tv_gpt2 \
        --out bench/results/auto_models_cpu_torchvision   # torchvision's and transformers' own models
    python bench/auto_models.py --models hf --caller-keeps loss --out bench/results/auto_models_cpu_transformers
        # transformers' architectures (hf_llama, hf_bert, hf_t5, ...) at tiny random configurations,
        # the wrapper told that the loop keeps only the loss (Note [The caller holds a_N])
    python bench/auto_models.py --models hf --caller-keeps loss --capture blocks \
        --out bench/results/auto_models_cpu_hf_blocks   # the same through the block fallback
    python bench/auto_models.py --models hf_more --caller-keeps loss --out bench/results/auto_models_cpu_hf_more
        # twelve more (BART, BLOOM, Mixtral, XLNet, Reformer, ...: HF_MORE); add --capture blocks as above
    python bench/auto_models.py --models tv_mnasnet0_5,tv_mobilenet_v3_small,tv_shufflenet_v2_x0_5 \
        --capture blocks --out bench/results/auto_models_cpu_tv_blocks   # which list the block fallback takes

Each model's gradients are also checked against plain autograd's, on a copy of the model made before
wrapping, at the least feasible budget (the most recomputation): the loss must be equal and the
parameter gradients within ``GRAD_TOL`` (summation order may differ where a parameter is used by
several stages, such as tied embeddings).

The measured step is the wrapper's forward and backward plus the caller's loss where the model
returns logits (resnet, densenet): that loss is outside the model and the budget (a few hundred bytes).
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402

import models  # noqa: E402
import torch_exec as te  # noqa: E402
from bench._common import TORCHVISION_CPU_SIZES, cpu_description, torchvision_models  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402

DEFAULT_MODELS = "resnet,densenet,transformer,gated,gpt2"
FRACTIONS = (1.0, 0.5, 0.25, 0.0)  # of the way from the least feasible budget to plain autograd's peak
# torchvision's own networks (random weights) at sizes a CPU runs in minutes: (batch, image side)
TORCHVISION = {f"tv_{name}": shape for name, shape in TORCHVISION_CPU_SIZES.items()}
# small CNNs whose features are one list beside a classifier list (Note [Block fallback] in torch_exec/auto.py)
TORCHVISION.update({"tv_mnasnet0_5": (4, 64), "tv_mobilenet_v3_small": (4, 64), "tv_shufflenet_v2_x0_5": (4, 64)})
# transformers' architectures at tiny random configurations (4 layers, width 32, 2 x 16 tokens):
# name -> (config class, model class, config fields beside HF_SIZE's)
HF_SIZE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, vocab_size=97,
               max_position_embeddings=32)
HF = {"hf_llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2)),
      "hf_mistral": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2)),
      "hf_qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2)),
      "hf_gemma": ("GemmaConfig", "GemmaForCausalLM", dict(num_key_value_heads=2, head_dim=8)),
      "hf_phi": ("PhiConfig", "PhiForCausalLM", {}),
      "hf_gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {}),
      "hf_opt": ("OPTConfig", "OPTForCausalLM", dict(ffn_dim=64, word_embed_proj_dim=32)),
      "hf_bert": ("BertConfig", "BertForMaskedLM", {}),
      "hf_vit": ("ViTConfig", "ViTForImageClassification", dict(image_size=16, patch_size=4, num_labels=5)),
      "hf_t5": ("T5Config", "T5ForConditionalGeneration",
                dict(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8, decoder_start_token_id=0))}
# more of transformers' architectures (a review's zoo): name -> (config class, model class, the whole config,
# the inputs: "ids" (tokens and labels) or "image"); the nearest each config allows to HF_SIZE's model
_V, _KV = HF_SIZE["vocab_size"], dict(HF_SIZE, num_key_value_heads=2)
_ED = dict(vocab_size=_V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32)
_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
HF_MORE = {
    "hf_bart": ("BartConfig", "BartForConditionalGeneration", _ED, "ids"),
    "hf_roberta": ("RobertaConfig", "RobertaForMaskedLM", dict(HF_SIZE, pad_token_id=1), "ids"),
    "hf_deberta_v2": ("DebertaV2Config", "DebertaV2ForMaskedLM", HF_SIZE, "ids"),
    "hf_bloom": ("BloomConfig", "BloomForCausalLM", dict(vocab_size=_V, hidden_size=32, n_layer=4, n_head=4), "ids"),
    "hf_falcon": ("FalconConfig", "FalconForCausalLM", HF_SIZE, "ids"),
    "hf_mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(_KV, num_local_experts=4, num_experts_per_tok=2), "ids"),
    "hf_gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(_KV, head_dim=8), "ids"),
    "hf_mamba": ("MambaConfig", "MambaForCausalLM", dict(vocab_size=_V, hidden_size=32, num_hidden_layers=4,
                                                         state_size=8, **_TOKENS), "ids"),
    "hf_rwkv": ("RwkvConfig", "RwkvForCausalLM", dict(vocab_size=_V, hidden_size=32, num_hidden_layers=4,
                                                      attention_hidden_size=32, intermediate_size=64, context_length=32,
                                                      bos_token_id=1, eos_token_id=2), "ids"),
    "hf_xlnet": ("XLNetConfig", "XLNetLMHeadModel", dict(vocab_size=_V, d_model=32, n_layer=4, n_head=4, d_inner=64,
                                                         **_TOKENS), "ids"),
    "hf_reformer": ("ReformerConfig", "ReformerModelWithLMHead",
                    dict(vocab_size=_V, hidden_size=32, num_attention_heads=4, attention_head_size=8,
                         feed_forward_size=64, attn_layers=["local"] * 4, axial_pos_shape=[4, 4],
                         axial_pos_embds_dim=[16, 16], max_position_embeddings=16, local_attn_chunk_length=8,
                         is_decoder=True, pad_token_id=0, eos_token_id=2), "ids"),
    "hf_swin": ("SwinConfig", "SwinForImageClassification",
                dict(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=2,
                     num_labels=5), "image"),
}
GRAD_TOL = 1e-6  # largest |gradient - plain autograd's| accepted (float32, values of order 1)


def make_hf(name: str):
    """(model, args, kwargs, loss_of) of one of ``HF`` or ``HF_MORE``: random weights, the model's own loss."""
    import transformers
    if name in HF_MORE:
        config_cls, model_cls, config, inputs = HF_MORE[name]
        side = config.get("image_size", 16)
    else:
        config_cls, model_cls, fields = HF[name]
        config = {**{k: v for k, v in HF_SIZE.items() if name != "hf_t5" or k == "vocab_size"}, **fields}
        inputs, side = ("image" if name == "hf_vit" else "ids"), 16
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))
    if inputs == "image":
        inputs = {"pixel_values": torch.randn(2, 3, side, side), "labels": torch.randint(0, 5, (2,))}
    else:
        ids = torch.randint(0, HF_SIZE["vocab_size"], (2, 16))
        inputs = {"input_ids": ids, "labels": ids}
    return model, (), inputs, lambda out: out.loss


def make(name: str):
    """``examples/models.make``'s (model, args, kwargs, loss_of), plus torchvision's own networks
    (``tv_<name>``, cross-entropy on random labels) and GPT-2 small's width and depth (``tv_gpt2``:
    transformers' GPT2LMHeadModel, 4 sequences of 128 tokens)."""
    if name == "tv_gpt2":
        model = models.gpt2(layers=12, width=768, heads=12, vocab=50257, context=128)
        ids = torch.randint(0, 50257, (4, 128))
        return model, (), {"input_ids": ids, "labels": ids, "use_cache": False}, lambda out: out.loss
    if name in HF or name in HF_MORE:
        return make_hf(name)
    if name not in TORCHVISION:
        return models.make(name)
    try:
        tv = torchvision_models()
    except ImportError as err:
        raise SystemExit(f"{name} needs torchvision: {err}") from None
    torch.manual_seed(0)
    batch, size = TORCHVISION[name]
    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 1000, (batch,))
    return getattr(tv, name[3:])(weights=None), (x,), {}, lambda out: torch.nn.functional.cross_entropy(out, y)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "auto_models_cpu"))
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help=f"comma list of examples/models.py's names and {', '.join(TORCHVISION)}, tv_gpt2, "
                             f"{', '.join(HF)} ('hf': all of those)")
    parser.add_argument("--hold-outputs", action="store_true",
                        help="keep the model's outputs through the backward, as `outputs = model(...); "
                             "outputs.loss.backward()` does (default: only the loss is kept)")
    parser.add_argument("--caller-keeps", choices=("output", "loss"), default="output",
                        help="the wrapper's caller_keeps: 'loss' for models that return their loss (not with "
                             "--hold-outputs)")
    parser.add_argument("--capture", choices=("auto", "export", "blocks"), default="auto",
                        help="auto_checkpoint's capture: 'blocks' runs every model through the block fallback "
                             "(Note [Block fallback] in torch_exec/auto.py)")
    args = parser.parse_args(argv)
    if args.hold_outputs and args.caller_keeps == "loss":
        parser.error("--hold-outputs keeps the whole output: it needs --caller-keeps output")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    rows, grads, uncaptured = [], {}, {}
    groups = {"hf": HF, "hf_more": HF_MORE}
    names = [m for name in args.models.split(",") for m in groups.get(name, [name])]
    for name in names:
        model, a, kw, loss_of = make(name)
        model.train()
        plain = copy.deepcopy(model)
        wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu", caller_keeps=args.caller_keeps,
                                     capture=args.capture)
        try:
            wrapped.prepare(*a, **kw)
        except te.CaptureError as err:  # reported in the record, the other models go on
            uncaptured[name] = str(err).split(". Cut the model by hand")[0]
            print(f"{name:12s} no chain: {uncaptured[name]}", flush=True)
            continue
        if wrapped.capture.branches is not None:  # CheckpointedJoin: its own benchmark measures it
            uncaptured[name] = "captured as a join network: measured by bench/auto_join.py"
            print(f"{name:12s} {uncaptured[name]}", flush=True)
            continue
        ex = wrapped.executor
        lo, hi = ex.min_budget_bytes, plain_peak_bytes(ex._last)
        grads[name] = gradient_check(plain, model, wrapped, lo, a, kw, loss_of)
        print(f"{name:12s} gradients at the least budget: loss equal {grads[name]['loss_equal']}, "
              f"largest difference {grads[name]['grad_max_abs_diff']:.2e}", flush=True)
        for p in wrapped.parameters():
            p.grad = torch.zeros_like(p)

        def step(wrapped=wrapped, a=a, kw=kw, loss_of=loss_of):  # this iteration's model (ruff B023)
            out = wrapped(*a, **kw)
            loss = loss_of(out)
            if not args.hold_outputs:
                del out  # the caller drops the model's outputs before the backward
            loss.backward()
        for f in FRACTIONS:
            budget = int(lo + f * (hi - lo))
            wrapped.replan(budget)
            step()  # warm
            _, reading = measure_peak(step)
            plan = wrapped.plan
            blocks = getattr(wrapped.capture, "blocks", None)
            rows.append(dict(model=name, **grads[name], method=wrapped.capture.method, notes=wrapped.capture.notes[0],
                             blocks_list=blocks[0].name if blocks else None,
                             stages=ex.chain.n, profiled_stages=len(ex._last.profile["stages"]),
                             min_budget_bytes=lo, plain_peak_bytes=hi, fraction=f, budget_bytes=budget,
                             predicted_peak_bytes=plan.predicted_peak_bytes, measured_peak_bytes=reading.peak,
                             within_budget=reading.peak <= budget, overhead=plan.overhead))
            r = rows[-1]
            print(f"{name:12s} {f:4.2f} budget {budget:9d} predicted {r['predicted_peak_bytes']:9d} "
                  f"measured {reading.peak:9d} held {r['within_budget']}", flush=True)
    command = "python bench/auto_models.py " + " ".join(argv if argv is not None else sys.argv[1:])
    record = {"device": cpu_description(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": command.strip(), "torch": torch.__version__, "threads": 1, "grad_tol": GRAD_TOL,
              "rows": rows, "uncaptured": uncaptured}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    try:
        import transformers
        versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    except ImportError:
        versions = f"torch {torch.__version__}"
    lines = [f"# auto_checkpoint on {'the example models' if args.models == DEFAULT_MODELS else ', '.join(names)} (CPU)", "",
             f"Device: {record['device']}; {versions}, 1 thread; date {record['date']}.",
             f"Command: `{record['command']}`. Budgets at a fraction f of the way from the least feasible",
             "budget (f = 0) to plain autograd's measured peak (f = 1). Measured: the CPU allocator's peak of",
             "one step (forward, the caller's loss where the model returns logits, backward) above the bytes",
             "before it, the model's outputs " + ("held through the backward" if args.hold_outputs else
                                                  "dropped before the backward (only the loss kept)") + ",",
             f"`caller_keeps={args.caller_keeps!r}`,",
             "parameter gradients allocated.",
             *([("Every model runs through the block fallback (`--capture blocks`)" if args.capture == "blocks" else
                 "`gated` cannot be captured (data-dependent control flow)")
                + ": its chain is the model's blocks; the rest of the model (embeddings, head, loss) runs as plain",
                "autograd beside them, its memory measured once and counted in every plan (Note [The rest of the",
                "model] in torch_exec/auto.py)."] if any(r["method"] == "blocks" for r in rows) else []),
             held_sentence(rows),
             f"Gradients: one step at the least budget against plain autograd on a copy of the model (loss equal, "
             f"parameter gradients within {GRAD_TOL:g}): "
             + ("every model passes." if all(g["grad_ok"] for g in grads.values()) else
                "FAILED for " + ", ".join(n for n, g in grads.items() if not g["grad_ok"]) + "."), "",
             *[f"No chain found for {n}: {why}." if not why.startswith("captured as") else f"{n} was {why}."
               for n, why in uncaptured.items()],
             *([""] if uncaptured else []),
             "| model | chain found | stages (profiled) | f | budget B | predicted B | measured B | measured/predicted | held | overhead |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in rows:
        found = f"blocks of '{r['blocks_list']}'" if r.get("blocks_list") else r["method"]
        lines.append(f"| {r['model']} | {found} | {r['stages']} ({r['profiled_stages']}) | {r['fraction']:.2f} | "
                     f"{r['budget_bytes']} | {r['predicted_peak_bytes']} | {r['measured_peak_bytes']} | "
                     f"{r['measured_peak_bytes'] / r['predicted_peak_bytes']:.3f} | {'yes' if r['within_budget'] else 'NO'} | "
                     f"{100 * r['overhead']:+.1f} % |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def held_sentence(rows: list[dict]) -> str:
    """Whether every model held its budget at every fraction."""
    over = sorted({r["model"] for r in rows if not r["within_budget"]})
    if not over:
        return "Every model holds its budget at every fraction."
    return "Models over their budget at some fraction: " + ", ".join(over) + "."


def gradient_check(plain, model, wrapped, budget: int, a, kw, loss_of) -> dict:
    """One step of ``wrapped`` (``model`` wrapped) at ``budget`` against one of ``plain`` (a copy of
    ``model`` made before wrapping), the same random numbers drawn: loss equality and the largest
    parameter-gradient difference."""
    wrapped.replan(budget)
    losses = []
    for run, params in ((wrapped, model), (plain, plain)):
        params.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        losses.append(loss_of(run(*a, **kw)))
        losses[-1].backward()
    pairs = [(p.grad, q.grad) for p, q in zip(model.parameters(), plain.parameters(), strict=True)]
    if any((g is None) != (h is None) for g, h in pairs):
        diff = float("inf")  # a parameter got a gradient in one model only
    else:
        diff = max([(g - h).abs().max().item() for g, h in pairs if g is not None], default=0.0)
    equal = bool(torch.equal(losses[0].detach(), losses[1].detach()))
    return {"loss_equal": equal, "grad_max_abs_diff": diff, "grad_ok": equal and diff <= GRAD_TOL}


if __name__ == "__main__":
    main()
