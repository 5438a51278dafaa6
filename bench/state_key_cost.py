"""What the input signature's model-state part costs on every call of a wrapper (CPU): the state
``CheckpointedSequential`` and ``CheckpointedJoin`` key on (``module_state_key``: training modes, dropout probabilities,
parameters' requires_grad, dtypes and devices) and what ``auto_checkpoint`` keys on beside it
(``captured_state_key``: every module's scalar attributes and forward hooks, Note [What a captured
graph fixes] in torch_exec/auto.py), against a plain training step of the same model.

    python bench/state_key_cost.py [--out bench/results/state_key_cost_cpu]

The model is transformers' GPT-2 small with random weights, batch 2 x 256 tokens; each key is the
median of 5 runs of 50 calls; the step is the median of three after one unmeasured step.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import torch_exec._util as U  # noqa: E402
from bench._common import record_header, write_cpu_record  # noqa: E402


def _per_call_ms(fn, model, calls: int = 50, repeats: int = 5) -> float:
    fn(model)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(model)
        times.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "state_key_cost_cpu"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).train()
    ids = torch.randint(0, model.config.vocab_size, (2, 256))
    step_ms = []
    for i in range(4):
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        if i:
            step_ms.append((time.perf_counter() - start) * 1e3)
    step = statistics.median(step_ms)
    rows = []
    for fn in (U.module_state_key, U.captured_state_key):
        ms = _per_call_ms(fn, model)
        rows.append({"key": fn.__name__, "ms_per_call": round(ms, 4), "share_of_step": round(ms / step, 6)})
    modules = sum(1 for _ in model.modules())
    record = write_cpu_record(args.out, "state_key_cost.py", argv, rows, transformers=transformers.__version__,
                              model="GPT-2 small (random weights)", modules=modules, plain_step_ms=round(step, 1))
    md = record_header(record, "The model-state part of the input signature, per call (CPU)",
                       f"GPT-2 small ({modules} modules), batch 2 x 256 tokens; plain step (forward, loss, backward) "
                       f"{step:.1f} ms, median of 3.")
    md += ["| key | ms per call | share of a plain step |", "|---|---:|---:|"]
    md += [f"| `{r['key']}` | {r['ms_per_call']:.3f} | {100 * r['share_of_step']:.3f} % |" for r in rows]
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
