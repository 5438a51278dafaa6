"""auto_checkpoint under ``torch.autocast`` (bfloat16, CPU): every plan's measured peak against its
budget and its prediction, for chains and join networks, with parameter gradients absent before the
step (``zero_grad(set_to_none=True)``, PyTorch's default) and allocated (gradient accumulation, the
profiler's own convention).

    python bench/autocast_fidelity.py [--models resnet,two_tower,...] [--repeats 16] [--out NAME]

Models: ``examples/models.py``'s test models (batch 4) and torchvision's ResNet-50 (batch 8, 96 x 96)
when torchvision loads; every loss inside the model (``WithCrossEntropy`` for the classifiers: a
caller's own criterion is outside every budget, Note [The caller holds a_N]). Each is captured once under autocast (forward inside
``torch.autocast("cpu", dtype=torch.bfloat16)``, backward outside) and re-planned at its least budget,
a quarter and half of the way to plain autograd's measured peak; one measured step per plan and
gradient regime (``measure_memory(1)``). The join captures are then repeated (``--repeats``, each a
fresh CPU-timed profile, so plans differ) at their least budget with gradients allocated.

``AutoCheckpointed._join_setting`` is replaced so that a join is run as one even by code that kept
autocast models a chain (commit 8d80853 and before): the same script then measures the code before a
change (``--out autocast_fidelity_cpu_before``). Writes bench/results/<NAME>.json and .md
(default ``autocast_fidelity_cpu``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import models  # noqa: E402
import torch_exec as te  # noqa: E402
from _common import TORCHVISION_CPU_SIZES, command_line, cpu_description, torchvision_models  # noqa: E402
from torch_exec.auto import AutoCheckpointed  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402

DEFAULT_MODELS = "resnet_loss,tvdensenet_loss,transformer,two_tower,siamese,triplet,tv_resnet50"
FRACTIONS = {"least": 0.0, "quarter": 0.25, "half": 0.5}


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def make(name):
    if name == "tv_resnet50":
        batch, side = TORCHVISION_CPU_SIZES["resnet50"]
        torch.manual_seed(0)
        model = models.WithCrossEntropy(torchvision_models().resnet50(num_classes=10))
        x = torch.randn(batch, 3, side, side)
        y = torch.randint(0, 10, (batch,))
        return model, (x, y), {}, lambda out: out
    return models.make(name)


def capture(name):
    model, args, kwargs, loss_of = make(name)
    wrapped = te.auto_checkpoint(model, "100%", backend="cpu")
    with autocast():
        wrapped.prepare(*args, **kwargs)
    ex = wrapped.executor
    join = isinstance(ex, te.CheckpointedJoin)
    plain = ex.plain_peak_bytes_for(ex._last) if join else plain_peak_bytes(ex._last)
    return model, args, kwargs, loss_of, wrapped, join, plain


def step(model, wrapped, args, kwargs, loss_of, allocated: bool):
    for p in model.parameters():
        p.grad = torch.zeros_like(p) if allocated else None
    wrapped.measure_memory(1)
    torch.manual_seed(3)
    with autocast():
        out = wrapped(*args, **kwargs)
    loss_of(out).backward()
    return wrapped.memory_report()[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated (default {DEFAULT_MODELS})")
    parser.add_argument("--repeats", type=int, default=16, help="captures of each join at its least budget")
    parser.add_argument("--out", default="autocast_fidelity_cpu", help="results file name under bench/results")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    setting = AutoCheckpointed._join_setting
    AutoCheckpointed._join_setting = lambda self: True if self.join else setting(self)  # see the docstring
    rows, repeats = [], []
    for name in args.models.split(","):
        try:
            model, inputs, kwargs, loss_of, wrapped, join, plain = capture(name)
        except ImportError as err:
            print(f"{name}: skipped ({err})", flush=True)
            continue
        least = wrapped.executor.min_budget_bytes
        for label, fraction in FRACTIONS.items():
            budget = int(least + fraction * (plain - least))
            wrapped.replan(budget)
            for allocated in (False, True):
                record = step(model, wrapped, inputs, kwargs, loss_of, allocated)
                rows.append({"model": name, "capture": "join" if join else "chain", "budget": label,
                             "grads": "allocated" if allocated else "none", "budget_bytes": budget,
                             "plain_peak_bytes": int(plain), "predicted_peak": int(wrapped.plan.predicted_peak_bytes),
                             "measured_beyond_grads": int(record.beyond_param_grads),
                             "within_budget": bool(record.within_budget)})
                print(rows[-1], flush=True)
        if join:
            over = []
            for _ in range(args.repeats):
                model, inputs, kwargs, loss_of, wrapped, _, _ = capture(name)
                budget = wrapped.executor.min_budget_bytes
                wrapped.replan(budget)
                record = step(model, wrapped, inputs, kwargs, loss_of, True)
                over.append(int(record.beyond_param_grads) - int(budget))
            repeats.append({"model": name, "captures": args.repeats, "over_budget": sum(o > 0 for o in over),
                            "most_over_bytes": max(over)})
            print(repeats[-1], flush=True)
    meta = {"device": f"CPU: {cpu_description()}", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": command_line("autocast_fidelity.py", argv), "torch": torch.__version__}
    out = ROOT / "bench" / "results" / args.out
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows, "join_repeats": repeats}, indent=1) + "\n")
    lines = ["# auto_checkpoint under torch.autocast (bfloat16, CPU): measured peak against budget and prediction", "",
             f"- device: {meta['device']}", f"- date: {meta['date']}", f"- command: `{meta['command']}`",
             f"- torch {meta['torch']}; `examples/models.py` models at batch 4, torchvision ResNet-50 at batch 8, "
             "96 x 96", "- measured: the allocator's peak over one step, parameter gradients the step allocated "
             "taken out; `grads`: none before the step, or allocated as zeros", "",
             "| model | capture | budget | grads | budget B | predicted B | measured B | measured / predicted | within |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['model']} | {r['capture']} | {r['budget']} | {r['grads']} | {r['budget_bytes']} | "
              f"{r['predicted_peak']} | {r['measured_beyond_grads']} | "
              f"{r['measured_beyond_grads'] / r['predicted_peak']:.3f} | {'yes' if r['within_budget'] else 'NO'} |"
              for r in rows]
    if repeats:
        lines += ["", "Join captures repeated at their least budget, gradients allocated (each capture a fresh "
                      "CPU-timed profile):", "", "| model | captures | over budget | most over B |",
                  "| --- | ---: | ---: | ---: |"]
        lines += [f"| {r['model']} | {r['captures']} | {r['over_budget']} | {max(0, r['most_over_bytes'])} |"
                  for r in repeats]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
