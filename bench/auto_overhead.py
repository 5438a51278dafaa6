"""auto_checkpoint's host overhead per call (CPU): the wrapper at a 100 % budget (its plan runs as plain
autograd) against the model itself, on a model small enough that a step is mostly Python, so the
difference is the wrapper's own work per call (input signature, capture lookup, side values, executor).
On a GPU that work delays the step's first kernel; on a step of 70-180 ms (ResNet-50, GPT-2 on an H100)
every millisecond is 0.5-1.4 % of the step.

    python bench/auto_overhead.py [--root TREE] [--label TEXT] [--out bench/results/auto_overhead_cpu]

``--root``: the tree whose ``torch_exec`` is measured (default: this repository), to compare with an
earlier commit checked out as a worktree. transformers' GPT-2 (12 layers, width 64, 164 modules), batch
2 x 32 tokens, 1 thread; forward only, and forward plus backward; medians of 60 calls interleaved with
the plain model's, after 3 unmeasured ones.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bench._common import record_header, write_cpu_record  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(HERE.parent))
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--out", default=str(HERE / "results" / "auto_overhead_cpu"))
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args(argv)
    sys.path.insert(0, args.root)  # the measured tree's torch_exec first
    for name in [m for m in sys.modules if m.split(".")[0] in ("torch_exec", "gpusolve")]:
        del sys.modules[name]
    import torch
    import transformers

    import torch_exec as te
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=12, n_embd=64, n_head=4, vocab_size=1000, n_positions=64, use_cache=False)
    plain = transformers.GPT2LMHeadModel(config).train()
    wrapped = te.auto_checkpoint(copy.deepcopy(plain), "100%", backend="cpu")
    ids = torch.randint(0, config.vocab_size, (2, 32))
    times: dict = {}
    for i in range(args.calls + 3):
        for name, model in (("plain", plain), ("wrapper", wrapped)):
            start = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            forward = time.perf_counter()
            loss.backward()
            end = time.perf_counter()
            if i >= 3:
                times.setdefault((name, "forward"), []).append((forward - start) * 1e3)
                times.setdefault((name, "step"), []).append((end - start) * 1e3)
    rows = []
    for part in ("forward", "step"):
        p, w = (statistics.median(times[(name, part)]) for name in ("plain", "wrapper"))
        rows.append({"part": part, "plain_ms": round(p, 3), "wrapper_ms": round(w, 3), "overhead_ms": round(w - p, 3)})
    modules = sum(1 for _ in plain.modules())
    record = write_cpu_record(args.out, "auto_overhead.py", argv, rows, tree=args.label, torch_exec=te.__file__,
                              modules=modules,
                              transformers=transformers.__version__, calls=args.calls,
                              plan=wrapped.plan.notes[0] if wrapped.plan.notes else "")
    md = record_header(record, f"auto_checkpoint's host overhead per call, {args.label} (CPU)",
                       f"transformers' GPT-2, 12 layers of width 64 ({modules} modules), 2 x 32 tokens, budget "
                       f"100 % (the plan runs as plain autograd); medians of {args.calls} calls interleaved with "
                       f"the model's own.")
    md += ["| part | model (ms) | wrapper (ms) | wrapper's overhead (ms) |", "|---|---:|---:|---:|"]
    md += [f"| {r['part']} | {r['plain_ms']:.3f} | {r['wrapper_ms']:.3f} | {r['overhead_ms']:+.3f} |" for r in rows]
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
