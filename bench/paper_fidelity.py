"""The offloading paper's plans executed against its model: measured peak of a step vs the plan's
predicted peak and the budget, and the gradients against plain autograd's, on the CPU (or a GPU).

    python bench/paper_fidelity.py                            # CPU, bench/fidelity.py's default models
    python bench/paper_fidelity.py --models resnet50_style --fractions 0.8,0.6 --device cuda

The paper ([O], hal-02316266) only simulated its algorithms. Here each plan
(:func:`gpusolve.offload.compare.paper_plan`: the fastest of GREEDY, DYNPROG and VDNN in its model at
the budget, over ``--link``) runs through :class:`torch_exec.paper_offload.PaperOffloadRunner`: plain
autograd over the profiled stages with the chosen tapes moved to host memory and back. Budgets:
fractions of the profiled store-all peak, and the least budget the paper's model runs the chain in.
Memory: ``torch_exec.meter.MemoryMeter`` (the CPU allocator's events, or CUDA's counters), one step after
a warm one (host buffers are pooled by then), parameter gradients allocated before it, as
bench/fidelity.py measures. Gradients: one step from the same seed and zeroed gradients each,
compared bit for bit on the CPU (allclose on a GPU). On the CPU the "host" is a second CPU tensor and
copies are memcpy: step times there say nothing of a GPU's link, so none are recorded.

Writes ``<out>/paper_fidelity_<cpu|gpu>.json`` and ``.md`` with the device, date and command.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve import format_bytes  # noqa: E402
from gpusolve.offload.compare import paper_least_bytes, paper_rate  # noqa: E402
from gpusolve.offload.link import Link  # noqa: E402
from gpusolve.simulate import store_all_peak_bytes  # noqa: E402
from torch_exec.paper_offload import PaperOffloadRunner, planning_instance  # noqa: E402

from _common import command_line, cpu_description, number_list  # noqa: E402  (same folder)
from fidelity import (EXTRA, MODELS, add_models_option, chosen_models, peak_of, run_models,  # noqa: E402
                      to_device)

FRACTIONS = (0.9, 0.7, 0.5)


class _Run(nn.Module):
    """A step of the runner over ``stages``' parameters (what :func:`peak_of` steps)."""

    def __init__(self, stages, runner):
        super().__init__()
        self.stages, self.runner = stages, runner

    def forward(self, x):
        return self.runner(x)


def gradients_agree(make, x, groups, stages, plan, device) -> bool:
    """One step of plain autograd and one of ``plan`` on fresh copies of the model (``make``), from the same
    seed: equal gradients (bit for bit on the CPU). The plan is the one measured: it runs over the fresh
    copy's stages standing where ``groups``' callables stand in ``stages``."""
    where = {id(module): i for i, module in enumerate(stages)}
    results = []
    for paper in (False, True):
        torch.manual_seed(0)
        fresh, xx = to_device(*make(), device)
        run = PaperOffloadRunner([[fresh[where[id(fn)]] for fn in g] for g in groups], plan, device) if paper \
            else fresh
        torch.manual_seed(1)
        run(xx).backward()
        results.append([p.grad for p in fresh.parameters()])
    same = torch.equal if device.type == "cpu" else (lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-5))
    return all(a is None and b is None or a is not None and b is not None and same(a, b)
               for a, b in zip(*results, strict=True))


def run_model(name, args, device, link) -> list[dict]:
    make = (MODELS | EXTRA)[name]
    torch.manual_seed(0)
    stages, x = to_device(*make(), device)
    wrapped = te.CheckpointedSequential(stages, budget=None, backend="cpu", profile_passes=args.passes,
                                        network=name, measure_steps=0)
    wrapped.prepare(x)
    chain = wrapped._last.plain_chain
    planned = planning_instance(wrapped, x)  # what PaperOffloadRunner.of plans on (its shared gradients too)
    top, least = store_all_peak_bytes(chain), paper_least_bytes(planned, link, True)
    plain_peak = peak_of(stages, x, device)
    budgets = [(f"{100 * f:g} %", int(f * top)) for f in args.fractions] + [("least", least)]
    rows = []
    for label, budget in budgets:
        if budget < least:
            print(f"{name}: {label} of the store-all peak is below the paper's least ({format_bytes(least)}): skipped")
            continue
        runner = PaperOffloadRunner.of(wrapped, x, budget, link)
        plan = runner.plan
        peak = peak_of(_Run(stages, runner), x, device)
        same = gradients_agree(make, x, runner.groups, stages, plan, device)
        row = {"model": name, "chain_stages": chain.n, "budget_label": label, "budget_bytes": budget,
               "store_all_predicted_bytes": top, "plain_measured_bytes": plain_peak, "least_bytes": least,
               "algorithm": plan.method, "considered": plan.considered, "moved_tapes": len(plan.decisions),
               "moved_bytes": plan.offloaded_bytes, "shared_grads": [list(g) for g in plan.shared_grads],
               "predicted_peak_bytes": plan.predicted_peak_bytes,
               "measured_peak_bytes": peak, "measured_over_predicted": peak / plan.predicted_peak_bytes,
               "within_budget": peak <= budget, "gradients_equal": same,
               "predicted_step_ms": plan.issued_time_ms, "paper_makespan_ms": plan.predicted_time_ms}
        rows.append(row)
        print(f"{name:15s} {label:7s} budget {format_bytes(budget):>11s} {plan.method:7s} moves {len(plan.decisions):3d} "
              f"tapes; predicted {format_bytes(plan.predicted_peak_bytes):>11s} measured {format_bytes(peak):>11s} "
              f"({row['measured_over_predicted']:.3f}) {'fits' if row['within_budget'] else 'OVER'}; gradients "
              f"{'equal' if same else 'DIFFER'}", flush=True)
    return rows


def write(rows, args, device, link, command) -> Path:
    args.out.mkdir(parents=True, exist_ok=True)
    tag = "cpu" if device.type == "cpu" else "gpu"
    desc = cpu_description() if device.type == "cpu" else torch.cuda.get_device_name(device)
    meta = {"device": desc, "date": _dt.date.today().isoformat(), "torch": torch.__version__, "command": command,
            "link": link.to_dict()}
    path = args.out / f"{args.name or 'paper_fidelity_' + tag}.json"
    path.write_text(json.dumps({"meta": meta, "records": rows}, indent=1))
    lines = [f"# The offloading paper's plans executed ({tag.upper()})", "",
             f"Device: {meta['device']}, torch {meta['torch']}, {meta['date']}. Command: `{command}`.", "",
             "Each plan is the fastest of GREEDY, DYNPROG and VDNN in the paper's model at the budget "
             f"(link {paper_rate(link) * 1e3 / 1e9:g} GB/s, the input on the device), run by "
             "`torch_exec.paper_offload.PaperOffloadRunner`. Peaks: the "
             + ("CPU allocator's events" if tag == "cpu" else "CUDA allocator's counters")
             + ", one step after a warm one, parameter gradients allocated before it. `least`: the paper's "
             "least budget (its largest op footprint, everything else on the host). No times: "
             + ("on the CPU the copies are memcpy." if tag == "cpu" else "see bench/offload_executor.py.")
             + " The plans are made on the profiled chain with what the step holds beside the stages reserved "
             "(the loss the caller holds and the gradient its backward seeds: `torch_exec.paper_offload."
             "planning_instance`), and with the gradients plain autograd sums across stages (`shared gradients`: "
             "first stage, last stage, bytes) charged to the backwards between (Note [Gradients summed across "
             "stages] in gpusolve/offload/compare.py).", "",
             "| model | budget | budget bytes | algorithm | tapes moved | shared gradients | predicted peak | "
             "measured peak | measured - predicted | fits | gradients equal |",
             "| --- | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | :---: | :---: |"]
    for r in rows:
        shared = ", ".join(f"({a}, {b}, {c})" for a, b, c in r["shared_grads"]) or "-"
        lines.append(f"| {r['model']} | {r['budget_label']} | {r['budget_bytes']} | {r['algorithm']} | "
                     f"{r['moved_tapes']} | {shared} | {r['predicted_peak_bytes']} | {r['measured_peak_bytes']} | "
                     f"{r['measured_peak_bytes'] - r['predicted_peak_bytes']:+d} | "
                     f"{'yes' if r['within_budget'] else 'NO'} | {'yes' if r['gradients_equal'] else 'NO'} |")
    if rows:
        worst = max(rows, key=lambda r: r["measured_peak_bytes"] - r["predicted_peak_bytes"])
        lines += ["", f"Budgets held: {sum(r['within_budget'] for r in rows)} of {len(rows)}; gradients equal: "
                      f"{sum(r['gradients_equal'] for r in rows)} of {len(rows)}; largest measured - predicted: "
                      f"{worst['measured_peak_bytes'] - worst['predicted_peak_bytes']:+d} B ({worst['model']}, "
                      f"{worst['budget_label']}; measured / predicted {worst['measured_over_predicted']:.4f})."]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_models_option(parser)
    parser.add_argument("--fractions", type=number_list(float), default=",".join(map(str, FRACTIONS)),
                        help="budgets as fractions of the profiled store-all peak (the paper's least is added)")
    parser.add_argument("--link", default="50GB/s", help="the link the paper's model plans for (default 50GB/s)")
    parser.add_argument("--passes", type=int, default=3, help="profiling passes")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads on the CPU")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--name", help="file name of the results without suffix (default paper_fidelity_<cpu|gpu>)")
    args = parser.parse_args(argv)
    try:
        link = Link.parse(args.link)
    except ValueError as err:
        parser.error(f"--link {args.link!r}: {err}")
    if paper_rate(link) is None:
        parser.error(f"--link {args.link!r}: the paper's model needs a finite, nonzero rate")
    names = chosen_models(parser, args.models)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", te.CPUTimingWarning)
    rows, failures = run_models(names, lambda name: run_model(name, args, device, link))
    print(f"wrote {write(rows, args, device, link, command_line('paper_fidelity.py', argv))}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
