"""Stages that read a shared weight several times (Note [A leaf read twice in one stage] in gpusolve/chain.py): the
least budget and the measured step peak against the plan's prediction at several budgets, on the CPU.

    python bench/leaf_parts.py [--out bench/results/leaf_parts_cpu]

Models: tiny ALBERT (8 blocks sharing one layer, the MLM head tied to the embedding) under ``auto_checkpoint`` with
``max_stages`` 3 and 5, so each stage reads the shared weights 2-4 times while a later stage reads them too; a
shared recurrent cell (``tanh(cell(h) + x)`` four times per stage, six stages, one Linear read by all) and
``examples/models.py``'s tied language model (the head reads the input embedding's weight, as GPT-2's does) as
``CheckpointedSequential``s. Budgets at a fraction f of the way from the least feasible budget (f = 0) to plain
autograd's measured peak (f = 1); measured: the CPU allocator's peak of one step above the bytes before it, parameter
gradients allocated, after one step at that budget. Run it on two trees (``PYTHONPATH=<tree>``) to compare them.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from bench._common import measured_steps, number_list, record_header, steps_cells, write_cpu_record  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402

WIDTH, BATCH, STEPS_PER_STAGE, STAGES = 64, 16, 4, 6


def albert():
    from transformers import AlbertConfig, AlbertForMaskedLM
    torch.manual_seed(0)
    cfg = AlbertConfig(vocab_size=4000, embedding_size=64, hidden_size=64, num_hidden_layers=8,
                       num_attention_heads=2, intermediate_size=256, max_position_embeddings=32,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return AlbertForMaskedLM(cfg)


class _Steps(nn.Module):
    """``STEPS_PER_STAGE`` steps of a recurrent cell shared by every stage: h <- tanh(cell(h) + x)."""

    def __init__(self, cell: nn.Linear, x: torch.Tensor):
        super().__init__()
        self.cell, self.x = cell, x

    def forward(self, h):
        for _ in range(STEPS_PER_STAGE):
            h = torch.tanh(self.cell(h) + self.x)
        return h


class _Loss(nn.Module):
    def forward(self, h):
        return h.square().mean()


def shared_cell():
    torch.manual_seed(0)
    cell = nn.Linear(WIDTH, WIDTH)
    x = torch.randn(BATCH, WIDTH)
    return nn.Sequential(*[_Steps(cell, x) for _ in range(STAGES)], _Loss())


def run_albert(max_stages: int, fractions) -> dict:
    ids = torch.randint(0, 4000, (1, 32), generator=torch.Generator().manual_seed(0))
    sample = {"input_ids": ids, "labels": ids}
    wrapped = te.auto_checkpoint(albert(), "1TiB", backend="cpu", sample=sample, capture="export",
                                 caller_keeps="loss", max_stages=max_stages)
    ex = wrapped.capture.executor
    least, plain = ex.min_budget_bytes, plain_peak_bytes(ex._last)
    steps = measured_steps(wrapped, lambda: wrapped(**sample).loss.backward(), least, plain, fractions)
    return dict(model=f"ALBERT, 8 blocks, max_stages={max_stages}", stages=ex.chain.n, least_bytes=least,
                plain_peak_bytes=plain, steps=steps)


def run_cell(fractions) -> dict:
    h0 = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1))
    wrapped = te.CheckpointedSequential(shared_cell(), budget="1TiB", backend="cpu")
    wrapped.prepare(h0)
    least, plain = wrapped.min_budget_bytes, plain_peak_bytes(wrapped._last)
    steps = measured_steps(wrapped, lambda: wrapped(h0).backward(), least, plain, fractions)
    return dict(model=f"shared cell, {STAGES} stages x {STEPS_PER_STAGE} steps", stages=wrapped._last.chain.n,
                least_bytes=least, plain_peak_bytes=plain, steps=steps)


def run_tied_lm(fractions) -> dict:
    from models import tied_lm
    ids = torch.randint(0, 2000, (32,), generator=torch.Generator().manual_seed(0))
    wrapped = te.CheckpointedSequential(tied_lm(), budget="1TiB", backend="cpu")
    wrapped.prepare(ids)
    least, plain = wrapped.min_budget_bytes, plain_peak_bytes(wrapped._last)
    steps = measured_steps(wrapped, lambda: wrapped(ids).backward(), least, plain, fractions)
    return dict(model="tied LM (examples/models.py tied_lm)", stages=wrapped._last.chain.n, least_bytes=least,
                plain_peak_bytes=plain, steps=steps)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", type=number_list(float), default=[0.0, 0.25, 0.5, 1.0],
                        help="budgets as fractions of the way from the least budget to plain autograd's peak")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "leaf_parts_cpu"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    rows = [run_albert(3, args.fractions), run_albert(5, args.fractions), run_cell(args.fractions),
            run_tied_lm(args.fractions)]
    for row in rows:
        ratios = [s["measured_peak_bytes"] / s["predicted_peak_bytes"] for s in row["steps"]]
        print(f"{row['model']}: least {row['least_bytes']} B, plain {row['plain_peak_bytes']} B, measured / "
              f"predicted {min(ratios):.3f}-{max(ratios):.3f}, held {all(s['within_budget'] for s in row['steps'])}",
              flush=True)
    out = Path(args.out)
    record = write_cpu_record(out, "leaf_parts.py", argv, rows, tree=str(Path(te.__file__).resolve().parent.parent))
    lines = record_header(record, "Stages reading a shared weight several times (CPU)", __doc__.split("\n\n")[2]
                          .replace("\n", " "))
    lines += ["| model | stages | least budget B | plain peak B | "
              + " | ".join(f"f = {f}: measured / budget (predicted)" for f in args.fractions) + " | held |",
              "| --- | ---: | ---: | ---: | " + " | ".join("---" for _ in args.fractions) + " | --- |"]
    for row in rows:
        cells = steps_cells(row["steps"])
        cells = [f"{c} ({s['predicted_peak_bytes']})" for c, s in zip(cells, row["steps"])] + cells[-1:]
        lines.append(f"| {row['model']} | {row['stages']} | {row['least_bytes']} | {row['plain_peak_bytes']} | "
                     + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0 if all(s["within_budget"] for row in rows for s in row["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
