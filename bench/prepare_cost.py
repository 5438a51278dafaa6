"""What ``auto_checkpoint``'s one-time setup costs on the CPU, against a plain training step: the
capture (torch.export and the checks around it), the profiling passes, the solve, and the progress
lines profiling prints on stderr while it runs (``gpusolve.progress.work_progress``).

    python bench/prepare_cost.py [--models gpt2_small,bert_base] [--out bench/results/prepare_cost_cpu]

The models are transformers' at their published sizes with random weights, a batch of 2 x 256 tokens,
the wrapper told that the loop keeps only the loss, budget 50 % of plain autograd's peak. Phases are
timed by wrapping the executor's ``profile_dict`` and ``solve``; "capture and the rest" is the whole
``prepare`` less those two. The plain step (forward, loss, backward) is the median of three after one
unmeasured step.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import torch_exec as te  # noqa: E402
import torch_exec.executor as E  # noqa: E402
from bench._common import record_header, write_cpu_record  # noqa: E402

MODELS = {"gpt2_small": ("GPT2Config", "GPT2LMHeadModel", {}),
          "bert_base": ("BertConfig", "BertForMaskedLM", {})}
BATCH, TOKENS = 2, 256


def _model(name: str):
    import transformers
    config_cls, model_cls, fields = MODELS[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**fields))
    ids = torch.randint(0, model.config.vocab_size, (BATCH, TOKENS))
    return model, {"input_ids": ids, "labels": ids}


def _plain_step_s(model, batch) -> float:
    times = []
    for i in range(4):
        start = time.perf_counter()
        model(**batch).loss.backward()
        if i:
            times.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    return statistics.median(times)


@contextlib.contextmanager
def _timed(module, name: str, spent: dict):
    inner = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
    setattr(module, name, timed)
    try:
        yield
    finally:
        setattr(module, name, inner)


def measure(name: str) -> dict:
    model, batch = _model(name)
    batch = dict(batch, use_cache=False) if "use_cache" in model.config.to_dict() else batch
    plain = _plain_step_s(model, batch)
    spent: dict = {}
    err = io.StringIO()
    with _timed(E, "profile_dict", spent), _timed(E, "solve", spent), contextlib.redirect_stderr(err), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        wrapped = te.auto_checkpoint(model, "50%", sample=batch, caller_keeps="loss")
        total = time.perf_counter() - start
    lines = [line for line in err.getvalue().splitlines() if line.startswith("gpusolve: ")]
    return {"model": name, "stages": wrapped.plan.chain.n if wrapped.plan.chain is not None else None,
            "capture": wrapped.capture.method, "plain_step_s": plain, "prepare_s": total,
            "profile_s": spent.get("profile_dict", 0.0), "solve_s": spent.get("solve", 0.0),
            "rest_s": total - spent.get("profile_dict", 0.0) - spent.get("solve", 0.0),
            "prepare_in_steps": total / plain, "progress_lines": lines}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "prepare_cost_cpu"))
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    torch.set_num_threads(1)
    rows = []
    for name in names:
        row = measure(name)
        rows.append(row)
        print(f"{name}: prepare {row['prepare_s']:.1f} s = {row['prepare_in_steps']:.1f} plain steps "
              f"({row['plain_step_s']:.2f} s)", flush=True)
    import transformers
    record = write_cpu_record(args.out, "prepare_cost.py", argv, rows, transformers=transformers.__version__,
                              batch=[BATCH, TOKENS])
    md = record_header(record, "auto_checkpoint's one-time setup against a plain step (CPU)",
                       f"transformers {transformers.__version__}; batch {BATCH} x {TOKENS} tokens, random weights, "
                       f"budget 50 %, `caller_keeps='loss'`.")
    md += ["| model | chain | stages | plain step s | prepare s | in plain steps | capture and the rest s | "
           "profiling s | solve s |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        md.append(f"| {r['model']} | {r['capture']} | {r['stages']} | {r['plain_step_s']:.2f} | {r['prepare_s']:.1f} | "
                  f"{r['prepare_in_steps']:.1f} | {r['rest_s']:.1f} | {r['profile_s']:.1f} | {r['solve_s']:.2f} |")
    for r in rows:
        md += ["", f"Progress lines on stderr while {r['model']} was prepared:", "", "```"] + r["progress_lines"] + ["```"]
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print(f"wrote {Path(args.out).with_suffix('.md')}")


if __name__ == "__main__":
    main()
