"""Note [Sizes that vary between calls] (torch_exec/executor.py) on its motivating use: transformers models trained on
batches padded to their longest sequence (dynamic padding), ``auto_checkpoint(model, "50%", backend="cpu")``, as a user
calls them (``out = w(input_ids=, attention_mask=, labels=); out.loss.backward()``; with ``caller_keeps="loss"``:
``loss = w(**batch).loss; loss.backward()``), rows padded in the masks. Review rv22c, CPU.

    python bench/size_reuse_hf.py [--steps 20] [--out bench/results/size_reuse_hf_cpu]

Part 1, per model and capture: a few steps whose lengths shrink, repeat, grow; every step ``measure_memory(1)``; the
gradients against plain autograd on a deepcopy (same seed before each step: dropout); profiles counted
(``torch_exec.executor.profile_dict`` wrapped), captures (``len(w._captures)``); each step marked P (profiled), C
(planned on a larger signature's profile: plan note "planned on the profile ... reuse_within"), = (a signature seen).
Models (random weights, no downloads): GPT-2, BERT (token_type_ids), Llama and Mistral (grouped-query attention, 4
heads / 2 key-value heads), BART (encoder and decoder lengths varying apart; the block fallback is infeasible at 50 %
for it), GPT-2 with 40 learned positions (a longer input than seen must be profiled).

Part 2: wall time of a loop of ``--steps`` steps over lengths drawn from 24..64 (batch 8, 4-layer GPT-2 width 64, as
bench/size_reuse.py), ``reuse_within`` 2 against None, export and blocks, interleaved step by step in one process.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "repros"))

import _hf  # noqa: E402,F401  (transformers without a mismatched torchvision; the tree under test: GS_ROOT)
from _hf import te, torch, transformers  # noqa: E402

import torch_exec.executor as ex  # noqa: E402
from _common import record_header, write_cpu_record  # noqa: E402

PROFILES = {"n": 0}
_REAL = ex.profile_dict


def _counted(*args, **kwargs):
    PROFILES["n"] += 1
    return _REAL(*args, **kwargs)


def make(name: str):
    T = transformers
    torch.manual_seed(0)
    if name.startswith("gpt2"):
        return T.GPT2LMHeadModel(T.GPT2Config(n_layer=4, n_embd=32, n_head=4, vocab_size=101, bos_token_id=0,
                                              eos_token_id=0, n_positions=40 if name == "gpt2-pos40" else 64))
    if name == "bert":
        return T.BertForMaskedLM(T.BertConfig(vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                              num_attention_heads=4, max_position_embeddings=64))
    if name in ("llama", "mistral"):
        cfg = dict(vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=64)
        if name == "llama":
            return T.LlamaForCausalLM(T.LlamaConfig(**cfg))
        return T.MistralForCausalLM(T.MistralConfig(**cfg, sliding_window=16))
    if name == "bart":
        return T.BartForConditionalGeneration(T.BartConfig(
            vocab_size=101, d_model=32, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2))
    raise ValueError(name)


def batch(name: str, shape: tuple, seed: int) -> dict:
    """A padded batch: rows after the first shorter in the mask (token_type_ids for BERT; for BART ``shape`` is
    (batch, encoder length, decoder length))."""
    g = torch.Generator().manual_seed(seed)
    b, n = shape[0], shape[1]
    ids = torch.randint(3, 101, (b, n), generator=g)
    mask = torch.ones(b, n, dtype=torch.long)
    for r in range(1, b):
        mask[r, n - 2 * r - 1:] = 0
    kw = dict(input_ids=ids, attention_mask=mask, labels=ids)
    if name == "bert":
        kw["token_type_ids"] = (torch.arange(n) >= n // 2).long().expand(b, n).contiguous()
    if name == "bart":
        dec = torch.randint(3, 101, (b, shape[2]), generator=g)
        dmask = torch.ones(b, shape[2], dtype=torch.long)
        dmask[b - 1, shape[2] - 3:] = 0
        kw.update(decoder_input_ids=dec, decoder_attention_mask=dmask, labels=dec)
    return kw


def check(name: str, capture: str, shapes: list, caller_keeps: str | None = None) -> dict:
    model = make(name).train()
    ref = copy.deepcopy(model)
    opts = dict(backend="cpu", capture=capture)
    if caller_keeps:
        opts["caller_keeps"] = caller_keeps
    w = te.auto_checkpoint(model, "50%", **opts)
    marks, seen, worst_grad, losses_equal = [], set(), 0.0, True
    covered = covered_measured = 0
    records, covered_records = [], []
    start = PROFILES["n"]
    for i, shape in enumerate(shapes):
        kw = batch(name, shape, i)
        w.measure_memory(1)
        before, known = PROFILES["n"], len(w._captures)
        n_rep = len(w.memory_report() or [])
        torch.manual_seed(100 + i)
        if caller_keeps:
            loss = w(**kw).loss
            loss.backward()
        else:
            out = w(**kw)
            out.loss.backward()
            loss = out.loss
        torch.manual_seed(100 + i)
        ref_loss = ref(**kw).loss
        ref_loss.backward()
        losses_equal &= bool(loss.detach() == ref_loss.detach())
        for p, q in zip(model.parameters(), ref.parameters()):
            if (p.grad is None) != (q.grad is None):
                worst_grad = float("inf")
            elif p.grad is not None:
                worst_grad = max(worst_grad, (p.grad - q.grad).abs().max().item())
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        is_covered = any("planned on the profile" in note and "reuse_within" in note for note in w.plan.notes)
        report = w.memory_report() or []
        new = report[n_rep:] if len(report) > n_rep else []
        mark = "P" if PROFILES["n"] > before else "C" if is_covered else "=" if len(w._captures) == known else "?"
        label = "x".join(map(str, shape[1:])) + ("" if shape[0] == shapes[0][0] else f"(b{shape[0]})")
        marks.append(f"{label}:{mark}{'' if new else '(unmeasured)'}")
        records += new
        if mark == "C":
            covered += 1
            covered_measured += bool(new)
            covered_records += new
    worst = max(covered_records, key=lambda r: r.beyond_param_grads / r.budget, default=None)
    return {"model": name, "capture": capture, "caller_keeps": caller_keeps or "-", "steps": " ".join(marks),
            "profiles": PROFILES["n"] - start, "captures": len(w._captures), "covered": covered,
            "covered_measured": covered_measured,
            "measured_within": f"{sum(r.within_budget for r in records)}/{len(records)}",
            "covered_worst": (f"{worst.beyond_param_grads} / {worst.budget} B (predicted {worst.predicted_peak})"
                              if worst else "-"),
            "grad_max_abs_diff": worst_grad, "losses_equal": losses_equal}


CHECKS = [
    ("gpt2", "export", [(4, 32), (4, 28), (4, 20), (4, 32), (4, 40), (4, 24), (3, 30)], None),
    ("gpt2", "blocks", [(4, 32), (4, 28), (4, 20), (4, 32), (4, 40), (4, 24), (3, 30)], None),
    ("gpt2", "export", [(4, 32), (4, 24), (4, 40), (4, 36)], "loss"),
    ("bert", "export", [(4, 32), (4, 28), (4, 20), (4, 40), (4, 24)], None),
    ("bert", "blocks", [(4, 32), (4, 28), (4, 20), (4, 40), (4, 24)], None),
    ("llama", "export", [(4, 32), (4, 28), (4, 20), (4, 40), (4, 24)], "loss"),
    ("llama", "blocks", [(4, 32), (4, 28), (4, 20), (4, 40), (4, 24)], "loss"),
    ("mistral", "export", [(4, 32), (4, 28), (4, 14), (4, 40)], None),
    ("mistral", "blocks", [(4, 32), (4, 28), (4, 14), (4, 40)], None),
    # encoder x decoder lengths: 24x18 keeps 32x24's ratio; 40x16 (encoder grew, decoder shrank): not covered
    ("bart", "export", [(4, 32, 24), (4, 24, 18), (4, 28, 20), (4, 40, 16), (4, 36, 14)], None),
    ("gpt2-pos40", "export", [(4, 32), (4, 24), (4, 40), (4, 36)], None),
    ("gpt2-pos40", "blocks", [(4, 32), (4, 24), (4, 40), (4, 36)], None),
]


def timing(steps: int) -> tuple[list, list]:
    sys.path.insert(0, str(HERE.parent / "examples"))
    from models import gpt2
    gen = torch.Generator().manual_seed(0)
    lengths = [int(n) for n in torch.randint(24, 65, (steps,), generator=gen)]
    batches = []
    for n in lengths:
        ids = torch.randint(0, 101, (8, n), generator=gen)
        mask = torch.ones(8, n, dtype=torch.long)
        for r in range(1, 8):
            mask[r, n - int(torch.randint(0, n // 2, (1,), generator=gen)):] = 0
        batches.append(dict(input_ids=ids, attention_mask=mask, labels=ids))
    settings = []
    for capture in ("export", "blocks"):
        for reuse in (2.0, None):
            torch.manual_seed(0)
            model = gpt2(layers=4, width=64, heads=4, vocab=101, context=64).train()
            settings.append({"capture": capture, "reuse_within": reuse, "times": [], "profiles": 0, "model": model,
                             "w": te.auto_checkpoint(model, "50%", backend="cpu", capture=capture,
                                                     reuse_within=reuse)})
    for kw in batches:
        for s in settings:
            before = PROFILES["n"]
            t0 = time.perf_counter()
            out = s["w"](**kw)
            out.loss.backward()
            s["times"].append(time.perf_counter() - t0)
            s["profiles"] += PROFILES["n"] - before
            s["model"].zero_grad(set_to_none=True)
    rows = [{"capture": s["capture"], "reuse_within": s["reuse_within"], "loop_s": round(sum(s["times"]), 2),
             "profiles": s["profiles"], "captures": len(s["w"]._captures)} for s in settings]
    return rows, lengths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=str(HERE / "results" / "size_reuse_hf_cpu"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(1)
    ex.profile_dict = _counted
    rows = []
    for name, capture, shapes, keeps in CHECKS:
        rows.append(check(name, capture, shapes, keeps))
        print(rows[-1], flush=True)
    times, lengths = timing(args.steps)
    for r in times:
        print(r, flush=True)
    record = write_cpu_record(args.out, "size_reuse_hf.py", argv, rows, timing=times, lengths=lengths,
                              transformers=transformers.__version__)
    lines = record_header(record, "transformers models on batches of varying length: size reuse checked (review rv22c)",
                          f"transformers {transformers.__version__}; auto_checkpoint(model, \"50%\", backend=\"cpu\"), "
                          "4-layer models of width 32 (BART 3 + 3), random weights, rows padded in the masks.")
    lines += ["Steps: length (BART: encoder x decoder; b3: batch 3) and P profiled, C planned on a larger signature's "
              "profile, = a signature seen; (unmeasured): measure_memory(1) was asked for and no record came.", "",
              "| model | capture | caller_keeps | steps | profiles | captures | covered | covered measured | measured "
              "within budget | worst covered step (beyond grads / budget) | grads max abs diff | losses equal |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['capture']} | {r['caller_keeps']} | {r['steps']} | {r['profiles']} | "
              f"{r['captures']} | {r['covered']} | {r['covered_measured']} | {r['measured_within']} | "
              f"{r['covered_worst']} | {r['grad_max_abs_diff']:.3g} | {r['losses_equal']} |" for r in rows]
    lines += ["", f"Timing: {args.steps} steps of a 4-layer GPT-2 (width 64), batch 8 at lengths {lengths} "
              f"({len(set(lengths))} distinct), rows padded, `out.loss.backward()`; settings interleaved step by step.", "",
              "| capture | reuse_within | loop (s) | profiles | captures |", "|---|---|---|---|---|"]
    lines += [f"| {r['capture']} | {r['reuse_within']} | {r['loop_s']} | {r['profiles']} | {r['captures']} |"
              for r in times]
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
