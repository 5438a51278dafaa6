"""Profiling one stage at a time against the whole step (Note [Profiling stage by stage] in
torch_exec/profiler.py): what profiling itself allocates, how long it takes, and whether the chain it
gives differs (least budget, largest backward peak difference).

    python bench/profile_isolated.py [--out NAME]

Models: ``tests/fidelity_models.py``'s six (the fidelity tests' small CNNs, transformer and tuple-state
chains) and a 48-stage MLP (24 x (Linear(256, 256), Tanh), batch 128). For each, ``profile_dict`` with
``isolated=False`` and ``isolated=True`` (one memory pass, one timed pass, no warm-up). Memory: the
memory pass's own meter (``reference["memory_pass_peak_bytes"]``); on the CPU the host copies of the
stages' inputs (``host_copies_bytes``) are the same memory and are taken out, leaving what a device
would hold. Writes bench/results/<NAME>.json and .md (default ``profile_isolated_cpu``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from _common import command_line, cpu_description  # noqa: E402
from fidelity_models import MODELS  # noqa: E402
from gpusolve import Chain  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402
from torch_exec.profiler import profile_dict  # noqa: E402


def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(24):
        layers += [nn.Linear(256, 256), nn.Tanh()]
    return nn.Sequential(*layers), torch.randn(128, 256)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="profile_isolated_cpu", help="results file name under bench/results")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rows = []
    for name, make in sorted(MODELS.items()) + [("mlp48", mlp)]:
        model, x = make()
        fns = list(te.CheckpointedSequential(model, budget=None)._fns)
        row = {"model": name, "stages": len(fns)}
        data = {}
        for isolated in (False, True):
            start = time.perf_counter()
            data[isolated] = profile_dict(fns, x, passes=1, warmup=0, isolated=isolated)
            row[f"{'isolated' if isolated else 'whole'}_s"] = time.perf_counter() - start
        whole, iso = data[False]["reference"], data[True]["reference"]
        row.update(whole_pass_peak=whole["memory_pass_peak_bytes"], plain_step_peak=whole["store_all_peak_bytes"],
                   isolated_pass_peak=iso["memory_pass_peak_bytes"], host_copies=iso["host_copies_bytes"],
                   isolated_device_peak=iso["memory_pass_peak_bytes"] - iso["host_copies_bytes"],
                   least_whole=min_feasible_bytes(Chain.from_profile(data[False])),
                   least_isolated=min_feasible_bytes(Chain.from_profile(data[True])),
                   largest_bwd_peak_excess=max(b["bwd_peak"] - a["bwd_peak"] for a, b in
                                               zip(data[False]["stages"], data[True]["stages"])))
        row["device_fraction"] = row["isolated_device_peak"] / row["whole_pass_peak"]
        rows.append(row)
        print(row, flush=True)
    meta = {"device": f"CPU: {cpu_description()}", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": command_line("profile_isolated.py", argv), "torch": torch.__version__}
    out = ROOT / "bench" / "results" / args.out
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    lines = ["# Profiling one stage at a time against the whole step (CPU)", "",
             f"- device: {meta['device']}", f"- date: {meta['date']}", f"- command: `{meta['command']}`",
             f"- torch {meta['torch']}; one memory pass and one timed pass each; *device peak* = the memory "
             "pass's peak minus the host copies of the stages' inputs (the same memory on the CPU)", "",
             "| model | stages | whole pass peak B | plain step peak B | one at a time: device peak B | fraction | "
             "least budget whole B | least budget one at a time B | largest bwd_peak excess B | whole s | one at a time s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['model']} | {r['stages']} | {r['whole_pass_peak']} | {r['plain_step_peak']} | "
              f"{r['isolated_device_peak']} | {r['device_fraction']:.3f} | {r['least_whole']} | {r['least_isolated']} | "
              f"{r['largest_bwd_peak_excess']} | {r['whole_s']:.2f} | {r['isolated_s']:.2f} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
