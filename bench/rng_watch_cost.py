"""Host cost of Note [Draws found at the first run] and Note [Python's and NumPy's generators] (torch_exec/_util.py):
the tree in ``GS_ROOT`` (default this repository) timed on a host-bound step, to be run once per tree, interleaved.

    GS_ROOT=<tree> python bench/rng_watch_cost.py --profile /tmp/p.json [--repeats 200] [--budget 50%]

DenseNet-121's layout with tiny widths on the CPU (``examples/models.py``'s ``TVDenseNet``, growth 4, batch 2 of
32x32, cut by ``torch_exec.split.split_model``, as bench/host_bound_overhead.py): every op is host time. Each tree
plans from the same profile (``--profile``: written by the first run that finds no file there, read by the others),
so that both run the same schedule. ``--bytes-marks``: the watch reads the generators as on a CUDA model (bytes of
``get_state()``) instead of the CPU model's allocation-free clones and fingerprints. Prints one line: the median and the minimum of ``--repeats`` steps (forward and
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
    parser.add_argument("--attribute", action="store_true",
                        help="time the watch's own calls inside the steps (this tree only): per step, and their share")
    parser.add_argument("--ab", action="store_true",
                        help="one process: steps with the watch on and off, interleaved (preserve_rng_state and the "
                             "Python/NumPy mark switched); in a tree without it, a control")
    parser.add_argument("--bytes-marks", action="store_true",
                        help="mark the generators as a model on a CUDA device does (bytes), not allocation-free")
    args = parser.parse_args(argv)
    if args.bytes_marks:  # the path a CUDA model's steps take (torch_exec._util.RngMark), timed on the CPU
        import torch_exec.executor as ex
        init = ex.Runtime.__init__

        def bytes_marks(self, *a, **k):
            init(self, *a, **k)
            self.free_marks = False
        ex.Runtime.__init__ = bytes_marks
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
    if args.attribute:  # the time spent inside the watch's own calls, per step, against the step's time
        import torch_exec._util as U
        spent = [0.0]

        def timed_call(fn):
            def call(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent[0] += time.perf_counter() - t0
            return call
        U.RngMark.capture = classmethod(timed_call(U.RngMark.capture.__func__))
        U.RngMark.advanced = timed_call(U.RngMark.advanced)
        U.host_rng_mark = timed_call(U.host_rng_mark)
        U.host_rng_moved_since = timed_call(U.host_rng_moved_since)
        for _ in range(10):
            wrapped(x).backward()
        steps, watch = [], []
        for _ in range(args.repeats):
            spent[0] = 0.0
            t0 = time.perf_counter()
            wrapped(x).backward()
            steps.append((time.perf_counter() - t0) * 1e3)
            watch.append(spent[0] * 1e3)
        print(json.dumps({"root": ROOT, "bytes_marks": args.bytes_marks, "recomputed": sum(entry.recomputed),
                          "step_median_ms": statistics.median(steps), "watch_median_ms": statistics.median(watch),
                          "watch_share_of_step": statistics.median(w / t for w, t in zip(watch, steps))}))
        return 0
    if args.ab:  # in one process, step by step: the watch on (A) and off (B)
        import torch_exec._util as U
        mark = getattr(U, "host_rng_mark", None)
        on, off = [], []
        for i in range(2 * args.repeats + 20):
            watch = i % 2 == 0
            wrapped.preserve_rng_state = watch  # no stage draws: only the watch of the first runs depends on it
            if mark is not None:
                U.host_rng_mark = mark if watch else (lambda: None)
            t0 = time.perf_counter()
            wrapped(x).backward()
            if i >= 20:
                (on if watch else off).append((time.perf_counter() - t0) * 1e3)
        if mark is not None:
            U.host_rng_mark = mark
        print(json.dumps({"root": ROOT, "bytes_marks": args.bytes_marks, "recomputed": sum(entry.recomputed),
                          "on_median_ms": statistics.median(on), "off_median_ms": statistics.median(off),
                          "on_mean_ms": statistics.mean(on), "off_mean_ms": statistics.mean(off),
                          "median_ratio": statistics.median(on) / statistics.median(off)}))
        return 0
    wrapper = timed(lambda: wrapped(x).backward())
    plain = timed(lambda: stages(x).backward())
    print(json.dumps({"root": ROOT, "bytes_marks": args.bytes_marks, "stages": entry.chain.n, "recomputed": sum(entry.recomputed),
                      "wrapper_median_ms": statistics.median(wrapper), "wrapper_min_ms": min(wrapper),
                      "plain_median_ms": statistics.median(plain)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
