"""Host cost of Note [Draws found at the first run] and Note [Python's and NumPy's generators] (torch_exec/_util.py):
the tree in ``GS_ROOT`` (default this repository) timed on a host-bound step, to be run once per tree, interleaved.

    GS_ROOT=<tree> python bench/rng_watch_cost.py --profile /tmp/p.json [--repeats 200] [--budget 50%]

DenseNet-121's layout with tiny widths on the CPU (``examples/models.py``'s ``TVDenseNet``, growth 4, batch 2 of
32x32, cut by ``torch_exec.split.split_model``, as bench/host_bound_overhead.py): every op is host time. Each tree
plans from the same profile (``--profile``: written by the first run that finds no file there, read by the others),
so that both run the same schedule. Prints one line: the median and the minimum of ``--repeats`` steps (forward and
backward) in ms, the number of recomputed stages, and plain autograd's median step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = os.environ.get("GS_ROOT", str(HERE.parent))
sys.path.insert(0, ROOT)
sys.path.insert(0, str(Path(ROOT) / "examples"))

import torch  # noqa: E402

import torch_exec as te  # noqa: E402
from models import TVDenseNet  # noqa: E402
from torch_exec.split import split_model  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--budget", default="50%")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TVDenseNet(growth=4, blocks=(6, 12, 24, 16), init=8, bn_size=2, classes=10).train()
    x = torch.randn(2, 3, 32, 32)
    stages = split_model(model, targets=torch.randint(0, 10, (2,)))
    for p in stages.parameters():
        p.grad = torch.zeros_like(p)
    wrapped = te.CheckpointedSequential(stages, budget=args.budget, backend="cpu", measure_steps=0)
    path = Path(args.profile)
    if path.exists():
        wrapped.prepare(x, profile=json.loads(path.read_text()))
    else:
        wrapped.prepare(x)
        path.write_text(json.dumps(wrapped.last_profile))
    entry = wrapped._last

    def timed(fn) -> list[float]:
        for _ in range(10):
            fn()
        out = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    wrapper = timed(lambda: wrapped(x).backward())
    plain = timed(lambda: stages(x).backward())
    print(json.dumps({"root": ROOT, "stages": entry.chain.n, "recomputed": sum(entry.recomputed),
                      "wrapper_median_ms": statistics.median(wrapper), "wrapper_min_ms": min(wrapper),
                      "plain_median_ms": statistics.median(plain)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
