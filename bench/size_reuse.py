"""A training loop whose batches vary in length (dynamic padding), with and without Note [Sizes that vary between
calls] (torch_exec/executor.py), side by side in one process on the CPU.

    python bench/size_reuse.py [--steps 40] [--out bench/results/size_reuse_cpu]

A 4-layer GPT-2 from transformers (width 64, 4 heads, vocabulary 101; ``examples/models.py``'s ``gpt2``), batch 8,
each step's length drawn uniformly from 24..64 tokens (the same draws for every setting), loss the logits' squared
mean, ``auto_checkpoint(model, "50%", backend="cpu")`` with ``capture`` export and blocks, and
``CheckpointedSequential`` over the blocks' hidden states (``examples/models.py``'s ``gpt2`` cut by hand: embedding
outside, the 4 blocks as stages), each with ``reuse_within`` 2 (the default) and None (every signature profiled).
Per setting: wall time of the whole loop, the median step once every length is known (steps from the second half),
profiles taken, and the measured peak of every step against its budget (``measure_memory``: all within it?).
The settings run interleaved, one step of each in turn, so that the machine's load falls on all alike.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
import torch_exec.executor as ex  # noqa: E402
from _common import record_header, write_cpu_record  # noqa: E402
from models import gpt2  # noqa: E402

PROFILES = {"n": 0}
_REAL = ex.profile_dict


def _counted(*args, **kwargs):
    PROFILES["n"] += 1
    return _REAL(*args, **kwargs)


class Manual(nn.Module):
    """Embedding, CheckpointedSequential over the blocks, final norm and head."""

    def __init__(self, model, reuse):
        super().__init__()
        t = model.transformer
        self.wte, self.wpe, self.ln_f, self.head = t.wte, t.wpe, t.ln_f, model.lm_head
        self.blocks = te.CheckpointedSequential([_Block(b) for b in t.h], budget="50%", backend="cpu",
                                                reuse_within=reuse)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.head(self.ln_f(self.blocks(self.wte(tokens) + self.wpe(pos))))


class _Block(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, h):
        out = self.block(h)
        return out[0] if isinstance(out, tuple) else out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default=str(HERE / "results" / "size_reuse_cpu"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    ex.profile_dict = _counted
    gen = torch.Generator().manual_seed(0)
    lengths = [int(n) for n in torch.randint(24, 65, (args.steps,), generator=gen)]
    batches = [torch.randint(0, 101, (8, n), generator=gen) for n in lengths]
    settings = []
    for reuse in (2.0, None):
        for kind in ("auto export", "auto blocks", "CheckpointedSequential"):
            torch.manual_seed(0)
            model = gpt2(layers=4, width=64, heads=4, vocab=101, context=64)
            if kind == "CheckpointedSequential":
                wrapped = Manual(model, reuse)
                meter_of = wrapped.blocks
            else:
                wrapped = te.auto_checkpoint(model, "50%", backend="cpu", capture=kind.split()[1], reuse_within=reuse)
                meter_of = wrapped
            settings.append({"kind": kind, "reuse_within": reuse, "model": wrapped, "meter": meter_of, "times": [],
                             "profiles": 0, "records": []})
    for i, tokens in enumerate(batches):
        for s in settings:
            s["meter"].measure_memory(1)
            before = PROFILES["n"]
            t0 = time.perf_counter()
            out = s["model"](tokens)
            logits = out.logits if hasattr(out, "logits") else out
            logits.float().pow(2).mean().backward()
            s["times"].append(time.perf_counter() - t0)
            s["profiles"] += PROFILES["n"] - before
            s["model"].zero_grad(set_to_none=True)
            s["records"] += [r for r in s["meter"].memory_report() if r not in s["records"]]
        print(f"step {i} ({lengths[i]} tokens): " + ", ".join(
            f"{s['kind']}/{s['reuse_within']} {s['times'][-1]:.3f} s" for s in settings), flush=True)
    rows = []
    for s in settings:
        late = s["times"][len(s["times"]) // 2:]
        rows.append({"kind": s["kind"], "reuse_within": s["reuse_within"], "loop_s": round(sum(s["times"]), 3),
                     "median_late_step_s": round(statistics.median(late), 4), "profiles": s["profiles"],
                     "measured_steps": len(s["records"]),
                     "all_within_budget": all(r.within_budget for r in s["records"])})
    record = write_cpu_record(args.out, "size_reuse.py", argv, rows, lengths=lengths)
    lines = record_header(record, "A loop over batches of varying length: profiles reused across sizes or not",
                          f"{args.steps} steps of batch 8 at lengths drawn from 24..64 tokens ({len(set(lengths))} "
                          f"distinct), a 4-layer GPT-2 (width 64) at \"50%\"; the settings interleaved step by step.")
    lines += ["| wrapper | reuse_within | loop (s) | median step, 2nd half (s) | profiles | measured steps | all within "
              "budget |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['kind']} | {r['reuse_within']} | {r['loop_s']} | {r['median_late_step_s']} | {r['profiles']} | "
              f"{r['measured_steps']} | {r['all_within_budget']} |" for r in rows]
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
