"""Research record: auto_checkpoint with more than one value allowed across a cut on every graph. One
crosses by default (``torch_exec.auto.MAX_CROSSING = 1``, Note [Cut points]), more only where a value read
late leaves few cuts (Note [Values read late], ``bench/long_lived.py``). This sets the module constant to
each k and measures, per model: stages, the least budget as a share of plain autograd's peak, the
measured step (CPU allocator) against the budget at f = 0 and 0.5 of the way from the least budget to
plain autograd's peak, and gradients at the least budget against plain autograd.

    python bench/max_crossing.py [--k 1,2,8] [--models bart,t5,mixtral_aux,gpt2,transformer,resnet,densenet]
        [--out bench/results/max_crossing_cpu]
    python bench/max_crossing.py --trace densenet,2   # the measured bytes op by op: where it goes over

Before Note [Segment inputs] (``torch_exec/executor.py``) the DenseNet example went 14 % over its least
budget at k >= 2 (``bench/results/max_crossing_cpu_before.md``); GPT-2's least budget rises with k (the
reason k stays 1 by default).
"""
from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402

import models as A  # noqa: E402
import torch_exec as te  # noqa: E402
import torch_exec.auto as auto  # noqa: E402
from bench._common import measured_steps, number_list, record_header, steps_cells, write_cpu_record  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402


def make(name: str):
    """(model, args, kwargs, loss_of): transformers' BART 2+8, T5 8+8, Mixtral 8 layers with its
    auxiliary loss (tiny random configurations), else examples/models.py's."""
    if name not in ("bart", "t5", "mixtral_aux"):
        return A.make(name)
    import transformers as T
    ids = torch.randint(3, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    if name == "bart":
        cfg = T.BartConfig(d_model=32, encoder_layers=2, decoder_layers=8, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=97,
                           max_position_embeddings=32, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                           decoder_start_token_id=2)
        model = T.BartForConditionalGeneration(cfg)
    elif name == "t5":
        model = T.T5ForConditionalGeneration(T.T5Config(vocab_size=97, d_model=32, d_ff=64, num_layers=8, num_heads=4,
                                                        d_kv=8, decoder_start_token_id=0))
    else:
        model = T.MixtralForCausalLM(T.MixtralConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=97, max_position_embeddings=32, num_local_experts=4, num_experts_per_tok=2,
            output_router_logits=True))
    return model, (), dict(input_ids=ids, labels=ids), lambda out: out.loss


def at_most(k: int) -> None:
    """k values across every cut, and no more where a value read late leaves few cuts."""
    auto.MAX_CROSSING = auto.LONG_LIVED_CROSSING = k


def run(name: str, k: int) -> dict:
    at_most(k)
    model, a, kw, loss_of = make(name)
    model.train()
    plain = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu")
    wrapped.prepare(*a, **kw)
    ex = wrapped.executor
    lo, hi = ex.min_budget_bytes, plain_peak_bytes(ex._last)
    row = dict(model=name, k=k, stages=ex.chain.n, least_bytes=lo, plain_peak_bytes=hi, least_pct=100 * lo / hi,
               steps=measured_steps(wrapped, lambda: loss_of(wrapped(*a, **kw)).backward(), lo, hi))
    wrapped.replan(lo)
    for m in (model, plain):
        for p in m.parameters():
            p.grad = None
    losses = []
    for m in (wrapped, plain):
        torch.manual_seed(5)
        loss = loss_of(m(*a, **kw))
        loss.backward()
        losses.append(loss.item())
    row["loss_equal"] = losses[0] == losses[1]
    row["grad_max_abs_diff"] = max(((p.grad - q.grad).abs().max().item() for p, q in
                                    zip(model.parameters(), plain.parameters())
                                    if p.grad is not None and q.grad is not None), default=0.0)
    return row


def trace(name: str, k: int) -> None:
    """Print the measured bytes after each op of the executor's program for one step at the least budget
    (the CPU allocator, per op: the level after it and the peak while it ran, above the step's start),
    beside the plan's budget and prediction: where a plan goes over."""
    import torch_exec.executor as E
    from torch_exec.meter import MemoryMeter
    at_most(k)
    model, a, kw, loss_of = make(name)
    model.train()
    wrapped = te.auto_checkpoint(model, "1TiB", backend="cpu")
    wrapped.prepare(*a, **kw)
    wrapped.replan(wrapped.executor.min_budget_bytes)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    loss_of(wrapped(*a, **kw)).backward()
    marks, interpret = [], E.interpret

    def one_op_at_a_time(program, runtime):
        for op in program:
            interpret([op], runtime)
            marks.append((op, meter.mark()))
    E.interpret = one_op_at_a_time
    try:
        with MemoryMeter("cpu") as meter:
            start = meter.mark()
            loss_of(wrapped(*a, **kw)).backward()
    finally:
        E.interpret = interpret
    plan = wrapped.plan
    print(f"{name} k={k}: budget {plan.budget_bytes} B, predicted {plan.predicted_peak_bytes} B")
    codes = {v: k for k, v in vars(E).items() if k in ("TAPE", "NOGRAD", "BWD", "FREE", "TURN")}
    before = start
    for i, (op, mark) in enumerate(marks):
        peak = meter.between(start, before).delta + meter.between(before, mark).peak
        flag = "  OVER" if peak > plan.budget_bytes else ""
        print(f"{i:4d} {codes.get(op[0], op[0]):>6} stage {op[1]:3d} arg {op[2]!s:>4}  after {meter.between(start, mark).delta:10d}"
              f"  peak {peak:10d}{flag}")
        before = mark


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=number_list(int), default="1,2,8")
    parser.add_argument("--models", default="bart,t5,mixtral_aux,gpt2,transformer,resnet,densenet")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "max_crossing_cpu"))
    parser.add_argument("--trace", metavar="MODEL,K",
                        help="print the measured bytes after each op of one model's step at its least budget")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    if args.trace:
        name, k = args.trace.split(",")
        return trace(name, int(k))
    rows = []
    default = auto.MAX_CROSSING, auto.LONG_LIVED_CROSSING
    try:
        for name in args.models.split(","):
            for k in args.k:
                rows.append(run(name, k))
                r = rows[-1]
                print(f"{name:12s} k={k} {r['stages']:3d} stages, least {r['least_pct']:5.1f} %, held "
                      f"{all(s['within_budget'] for s in r['steps'])}", flush=True)
    finally:
        auto.MAX_CROSSING, auto.LONG_LIVED_CROSSING = default
    out = Path(args.out)
    record = write_cpu_record(out, "max_crossing.py", argv, rows)
    lines = record_header(record, "More than one value across a cut (CPU, research record)",
                          "k: values allowed across every cut (`torch_exec.auto.MAX_CROSSING`, 1 by default; "
                          "`LONG_LIVED_CROSSING` set to k too: no more where a value read late leaves few cuts). Measured: the CPU "
                          "allocator's peak of one step above the bytes before it, parameter gradients allocated; f: of "
                          "the way from the least budget to plain autograd's peak.")
    lines += ["| model | k | stages | least % of plain | f = 0: measured / budget | f = 0.5: measured / budget | held | "
              "loss equal | largest gradient difference |",
              "| --- | ---: | ---: | ---: | --- | --- | --- | --- | ---: |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['k']} | {r['stages']} | {r['least_pct']:.1f} | {' | '.join(steps_cells(r['steps']))} | "
                     f"{r['loss_equal']} | {r['grad_max_abs_diff']:.1e} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
