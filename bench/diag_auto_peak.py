"""Why a torchvision model under ``auto_checkpoint`` measured above its budget on a GPU.

The H200's first ``pytest -m gpu`` (2026-11-28, bench/results/gpu_runs/2026-11-28_nvidia_h200/pytest_gpu.txt):
``test_auto_checkpoint_torchvision_models[densenet121]`` measured 1 049 170 432 B over a step whose budget was
1 046 950 912 B (192 000 B of the caller's loss allowed), the plan predicting 1 045 200 128 B, and the wrapper's
own meter did not warn. This runs the test's step several times and records, per step, the allocator's peak
(``max_memory_allocated``), the bytes asked for before its rounding (``requested_bytes``), the wrapper's own
record of the step, and the allocator's counters that tell unsplit cached blocks apart from an under-counting
model. Run it in a fresh process per allocator setting (``PYTORCH_ALLOC_CONF=expandable_segments:True``)::

    python bench/diag_auto_peak.py --model densenet121 --out DIR
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch_exec as te  # noqa: E402


def stats() -> dict:
    s = torch.cuda.memory_stats()
    keys = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "requested_bytes.all.current",
            "requested_bytes.all.peak", "inactive_split_bytes.all.current", "num_alloc_retries",
            "reserved_bytes.all.current", "oversize_allocations.current")
    return {k: int(s.get(k, 0)) for k in keys}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="densenet121")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--budget", default="50%")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("out"))
    args = ap.parse_args()
    import torchvision.models as models
    torch.manual_seed(0)
    model = getattr(models, args.model)(weights=None).cuda().train()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")
    wrapped = te.auto_checkpoint(model, args.budget, sample=(x,))
    plan = wrapped.plan
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    rows = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        requested_before = torch.cuda.memory_stats().get("requested_bytes.all.current", 0)
        torch.cuda.reset_peak_memory_stats()
        out = wrapped(x)
        torch.cuda.synchronize()
        fwd_peak = torch.cuda.max_memory_allocated() - before
        fwd_requested = torch.cuda.memory_stats().get("requested_bytes.all.peak", 0) - requested_before
        nn.functional.cross_entropy(out, y).backward()
        del out
        torch.cuda.synchronize()
        st = stats()
        rows.append(dict(step=step, measured=st["allocated_bytes.all.peak"] - before,
                         requested=st["requested_bytes.all.peak"] - requested_before,
                         forward_measured=fwd_peak, forward_requested=fwd_requested, stats=st))
        r = rows[-1]
        print(f"step {step}: measured {r['measured']} requested {r['requested']} (forward {fwd_peak} / {fwd_requested}) "
              f"budget {plan.budget_bytes} predicted {plan.predicted_peak_bytes} over {r['measured'] - plan.budget_bytes}",
              flush=True)
    report = [r.to_dict() for r in wrapped.memory_report()]
    for r in report:
        print("meter:", {k: r[k] for k in ("step", "budget", "predicted_peak", "measured_peak", "beyond_param_grads",
                                         "within_budget", "held_before", "before_peak", "peak_beyond_set_grads")})
    # the plan's schedule at its peak: which stages are live (a chain's stage sizes, to compare with the excess)
    chain = getattr(wrapped.executor, "chain", None)
    result = dict(device=torch.cuda.get_device_name(0), date=dt.date.today().isoformat(), torch=torch.__version__,
                  command="python " + " ".join(sys.argv), alloc_conf=os.environ.get("PYTORCH_ALLOC_CONF", ""),
                  budget=plan.budget_bytes, predicted=plan.predicted_peak_bytes, notes=list(getattr(plan, "notes", [])),
                  steps=rows, meter=report, capture=wrapped.capture.method,
                  stages=None if chain is None else len(chain.tape_bytes))
    args.out.mkdir(parents=True, exist_ok=True)
    tag = "expandable" if "expandable_segments:True" in result["alloc_conf"] else "default"
    (args.out / f"diag_auto_peak_{args.model}_{tag}.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
