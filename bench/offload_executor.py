"""Offloading executor benchmark: measured step time and peak memory of combined (offload + recompute)
plans vs recompute-only plans vs offload-only, on a CUDA device.

    python bench/offload_executor.py                          # DenseNet-121 and ResNet-50
    python bench/offload_executor.py --networks resnet50 --steps 5

Runs only on a GPU (on the CPU it exits with a one-line message). First measures the host link
(:func:`torch_exec.offload.measure_link`: pinned buffers, a side stream), then per network (torchvision,
float32, training mode, 224x224: DenseNet-121 batch 64, ResNet-50 batch 128; stages and loss as in
``bench/executor.py``, whose helpers are reused) measures plain autograd's step (the store-all peak) and at
budgets of 50 %, 35 % and 25 % of that measured peak runs:

- ``combined``: :class:`torch_exec.CheckpointedSequential` with ``offload=<measured link>``: the combined
  recompute + offload DP (:func:`gpusolve.offload.solver.solve_offload`), its plan executed with pinned host
  buffers and a copy stream (:mod:`torch_exec.offload`);
- ``recompute``: the same wrapper without ``offload`` (the chain DP, :func:`gpusolve.solve`);
- ``offload_only_paper``: the offloading paper's own plan at the same budget (the best of GREEDY, DYNPROG
  and VDNN in its model over the measured link, :func:`gpusolve.offload.compare.paper_plan`), run by
  :class:`torch_exec.paper_offload.PaperOffloadRunner`: plain autograd over the same fused stages, the
  chosen tapes moved to pinned host memory and back (no recomputation; ``--no-paper`` skips it);
- ``offload_only`` (once per network, no budget): plain autograd under
  ``torch.autograd.graph.save_on_cpu(pin_memory=True)``, PyTorch's own offloading, which is what users
  have: every tensor saved for the backward goes to pinned host memory, with no schedule and no overlap
  control.

Predicted figures are the plan's (the two-timeline simulator over the measured link for ``combined``, the
chain simulator for ``recompute``, both on the executor's chain; for ``offload_only_paper`` the paper's model on
the profiled chain: the time of the program issued before ops, ``paper_makespan_ms`` the paper's own). Memory is ``torch.cuda.max_memory_allocated``
above what is allocated just before the step (parameters, their gradients allocated beforehand, the input):
what the budget counts; pinned host memory is not device memory. Times: median of ``--steps`` steps (CUDA
events) after ``--warmup`` steps (the first step of a plan pins its host buffers).

With ``--op-times`` each plan runs one more step under :class:`torch_exec.opclock.OpClock` (an event after
every op on the compute stream) and its row gets ``op_times``: measured against simulated time per op kind
and the ops furthest over their prediction (:func:`op_time_table`), to tell copies the compute stream waits
for from slower kernels or an idle stream.

Writes ``<out>/offload_executor_<gpu>.json`` (link, records) and ``<out>/offload_executor_<gpu>.md``, with the
device, the date and the command.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from _common import SavedRows, command_line, slug  # noqa: E402  (same folder)
from gpusolve.errors import InfeasibleBudgetError  # noqa: E402

NETWORKS = ("densenet121", "resnet50")
KIND_COLUMNS = ("fwd_nograd", "fwd_tape", "bwd", "offload", "release", "prefetch", "acquire", "free")
FRACTIONS = (0.5, 0.35, 0.25)


def op_time_table(schedule, measured, predicted_ms, worst: int = 8) -> dict:
    """Per-op times of one step (``measured``: :meth:`torch_exec.opclock.OpClock.ops`, in schedule order)
    against the simulator's (``predicted_ms``: ``simulate(..., trace=True).op_ms``): sums per op kind, the
    ``worst`` ops furthest over their prediction and every op's ``[op, measured, predicted, host]``
    (``host``: the host's time to queue it; more than the device's where the stream starves). A backward
    that a tape segment's first BWD ran for it (``annotate``'s arg 0) is measured there, so its prediction
    is counted there too. For chain schedules (a join's TURN is two interpreter entries)."""
    from torch_exec.executor import _CODES, BWD, annotate
    if len(measured) != len(schedule) or len(predicted_ms) != len(schedule):
        raise ValueError(f"{len(measured)} measured and {len(predicted_ms)} predicted op times for "
                         f"{len(schedule)} ops")
    for op, (code, stage, branch, *_) in zip(schedule, measured, strict=True):
        if code != _CODES[op.kind] or stage != op.stage or branch != op.branch:
            raise ValueError(f"the measured ops are not the schedule's ({op} against code {code} stage {stage})")
    predicted = list(map(float, predicted_ms))
    segment_at = {}  # branch -> index of the BWD that runs its current segment
    for index, (code, _, arg, branch) in enumerate(annotate(schedule)):
        if code == BWD:
            if arg:
                segment_at[branch] = index
            else:
                predicted[segment_at[branch]] += predicted[index]
                predicted[index] = 0.0
    kinds: dict = {}
    for op, m, p in zip(schedule, measured, predicted, strict=True):
        row = kinds.setdefault(op.kind.value, {"count": 0, "measured_ms": 0.0, "predicted_ms": 0.0, "host_ms": 0.0})
        row["count"] += 1
        row["measured_ms"] += m[3]
        row["predicted_ms"] += p
        row["host_ms"] += m[4]
    over = sorted(range(len(schedule)), key=lambda k: predicted[k] - measured[k][3])[:worst]
    return {"measured_ms": sum(m[3] for m in measured), "predicted_ms": sum(predicted),
            "host_ms": sum(m[4] for m in measured), "by_kind": kinds,
            "worst": [{"index": k, "op": str(schedule[k]), "measured_ms": measured[k][3], "predicted_ms": predicted[k]}
                      for k in over],
            "ops": [[str(op), m[3], p, m[4]] for op, m, p in zip(schedule, measured, predicted, strict=True)]}


def time_ops(row: dict, wrapped, step, link, device, errors: list, where: str) -> None:
    """``--op-times`` for one plan: one more ``step()`` under :class:`torch_exec.opclock.OpClock` on
    ``device``, its :func:`op_time_table` against the simulator over ``link`` (None: recompute only) into
    ``row["op_times"]``. A diagnosis: if it fails, ``row`` keeps the figures measured before and gets
    ``op_times_error`` (also appended to ``errors``, named by ``where``)."""
    from gpusolve.simulate import simulate
    from torch_exec.opclock import OpClock
    try:
        schedule = wrapped.plan.schedule
        with OpClock(device) as clock:
            step()
        sim = simulate(wrapped.chain, schedule, link=link, trace=True)
        row["op_times"] = table = op_time_table(schedule, clock.ops(), sim.op_ms)
        print(f"   op times (measured/predicted ms): all {table['measured_ms']:.1f}/{table['predicted_ms']:.1f} "
              f"(host {table['host_ms']:.1f}), " + ", ".join(f"{k} {v['measured_ms']:.1f}/{v['predicted_ms']:.1f}"
                                                             for k, v in table["by_kind"].items()), flush=True)
    except Exception as err:
        row["op_times_error"] = _error(err)
        errors.append(f"{where}: --op-times raised {row['op_times_error']}")
        print(f"   op times: {row['op_times_error']}", flush=True)


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("bench/offload_executor.py needs a CUDA device (none here): it measures host-device copies "
                         "and GPU memory; nothing to run on the CPU")


def bench_network(name, args, link, meter, records, errors):
    import executor as chain_bench  # bench/executor.py: networks, step meter, helpers

    import torch_exec as te
    from gpusolve.schedule import OpKind, count_recomputations
    stages, x, desc = chain_bench.build(name, args.device, quick=False)
    params = list(stages.parameters())
    print(f"== {name}: {desc}, {len(stages)} measured stages", flush=True)
    common = dict(network=name, description=desc, device=args.device_name, date=args.date)

    def plain():
        stages(x).backward()
    peak_all, ms_all, each_all = meter.step(plain, params, args.steps, args.warmup)
    print(f"   store_all: peak {peak_all} B, {ms_all:.2f} ms", flush=True)
    records.append(dict(common, method="store_all", budget_label=None, budget_bytes=None, measured_peak_bytes=peak_all,
                        step_ms=ms_all, step_ms_each=each_all, predicted_peak_bytes=None, predicted_step_ms=None,
                        **meter.diagnostics))

    def offload_only():
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            loss = stages(x)
        loss.backward()
    row = dict(common, method="offload_only", budget_label=None, budget_bytes=None, predicted_peak_bytes=None,
               predicted_step_ms=None, note="torch.autograd.graph.save_on_cpu(pin_memory=True), plain autograd")
    try:
        peak, ms, each = meter.step(offload_only, params, args.steps, args.warmup)
        row.update(measured_peak_bytes=peak, step_ms=ms, step_ms_each=each, **meter.diagnostics)
        print(f"   offload_only (save_on_cpu): peak {peak} B, {ms:.2f} ms", flush=True)
    except Exception as err:
        row.update(measured_peak_bytes=None, step_ms=None, error=_error(err))
        errors.append(f"{name}: offload_only raised {row['error']}")
    records.append(row)
    chain_bench._free()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = te.profile_dict(stages, x, passes=args.passes, network=name)
    # One wrapper, one profile: every plan below is solved on its executor chain (what it holds beyond the
    # stages reserved) and run by it.
    wrapped = te.CheckpointedSequential(stages, budget=None, network=name, schedule_fn=chain_bench.store_all_schedule,
                                        offload=link)
    wrapped.prepare(x, profile=data)
    print(f"   chain: {wrapped.chain.n} fused stages", flush=True)

    def step():
        wrapped(x).backward()

    for fraction in args.fractions:
        budget = int(fraction * peak_all)
        label = f"{round(100 * fraction)}%"
        for method, offload in (("combined", link), ("recompute", None)):
            row = dict(common, method=method, budget_label=label, budget_bytes=budget)
            try:
                wrapped.replan(budget=budget, schedule_fn=None, offload=offload)
                plan = wrapped.plan
                schedule = plan.schedule
                row.update(predicted_peak_bytes=int(plan.predicted_peak_bytes),
                           predicted_step_ms=float(plan.predicted_time_ms), solve_seconds=plan.solve_seconds,
                           swaps=sum(op.kind is OpKind.OFFLOAD for op in schedule),
                           recomputations=count_recomputations(schedule), ops=len(schedule))
                copies = wrapped._last.copies
                peak, ms, each = meter.step(step, params, args.steps, args.warmup)
                row.update(measured_peak_bytes=peak, step_ms=ms, within_budget=peak is not None and peak <= budget,
                           host_bytes=None if copies is None else copies.host_bytes(), step_ms_each=each,
                           requested_peak_bytes=meter.requested_peak, **meter.diagnostics)
                print(f"   {method} {label} ({budget} B): peak {peak} B (pred {plan.predicted_peak_bytes}), "
                      f"{ms:.2f} ms (pred {plan.predicted_time_ms:.2f}), {row['swaps']} swaps, "
                      f"{row['recomputations']} recomputed", flush=True)
                if args.op_times:
                    time_ops(row, wrapped, step, offload, x.device, errors, f"{name} {method} {label}")
            except Exception as err:  # infeasible at this budget, OOM, ...
                _failed(row, err, f"{method} {label}")
                if args.verbose and not chain_bench._is_oom(err):
                    traceback.print_exc()
            records.append(row)
            chain_bench._free()
        if args.paper:
            records.append(paper_row(common, wrapped, stages, x, budget, label, link, meter, args, errors))
            chain_bench._free()
    # the network and its wrapper go with this frame; main() frees the cache after it


def paper_row(common, wrapped, stages, x, budget, label, link, meter, args, errors) -> dict:
    """The paper's best offload-only plan at ``budget`` ([O]: GREEDY, DYNPROG, VDNN over the measured link,
    :func:`gpusolve.offload.compare.paper_plan`), run by :class:`torch_exec.paper_offload.PaperOffloadRunner`:
    plain autograd over the executor's fused stages with their tapes moved (no recomputation)."""
    from torch_exec.paper_offload import PaperOffloadRunner
    row = dict(common, method="offload_only_paper", budget_label=label, budget_bytes=budget)
    try:
        runner = PaperOffloadRunner.of(wrapped, x, budget, link)
        plan = runner.plan
        row.update(algorithm=plan.method, considered=plan.considered, moved_tapes=len(plan.decisions),
                   offloaded_bytes=plan.offloaded_bytes, predicted_peak_bytes=plan.predicted_peak_bytes,
                   predicted_step_ms=plan.issued_time_ms, paper_makespan_ms=plan.predicted_time_ms)

        def step():
            runner(x).backward()
        peak, ms, each = meter.step(step, list(stages.parameters()), args.steps, args.warmup)
        runner.close()
        row.update(measured_peak_bytes=peak, step_ms=ms, step_ms_each=each, late_prefetches=runner.late_prefetches,
                   within_budget=peak is not None and peak <= budget, host_bytes=runner.host_bytes(),
                   requested_peak_bytes=meter.requested_peak, **meter.diagnostics)
        print(f"   paper ({plan.method}) {label}: peak {peak} B (pred {plan.predicted_peak_bytes}), {ms:.2f} ms (pred "
              f"{plan.issued_time_ms:.2f}; the paper's {plan.predicted_time_ms:.2f}), {len(plan.decisions)} tapes moved",
              flush=True)
    except Exception as err:  # a budget below the paper's least (a row, not an error of the run), OOM, ...
        _failed(row, err, f"paper {label}")
        if not isinstance(err, InfeasibleBudgetError):
            errors.append(f"{common['network']} paper {label}: {row['error']}")
    return row


def _failed(row: dict, err, where: str) -> None:
    """A row whose plan did not run: no measured figures, the error named (and printed)."""
    row.update(measured_peak_bytes=None, step_ms=None, error=_error(err))
    row.setdefault("predicted_peak_bytes", None)
    row.setdefault("predicted_step_ms", None)
    print(f"   {where}: {row['error']}", flush=True)


def _error(err) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def write_report(link_data, records, errors, args, command, quiet: bool = False):
    stem = f"offload_executor_{args.gpu_tag}"
    path_json, path_md = args.out / f"{stem}.json", args.out / f"{stem}.md"
    payload = dict(device=args.device_name, date=args.date, command=command, torch=torch.__version__,
                   link=link_data, records=records, errors=errors)
    path_json.write_text(json.dumps(payload, indent=1))
    mib = lambda b: "-" if b is None else f"{b / 2**20:.0f}"  # noqa: E731
    ms = lambda t: "-" if t is None else f"{t:.1f}"  # noqa: E731
    gbs = lambda r: f"{r * 1e3 / 1e9:.1f} GB/s"  # noqa: E731  (bytes/ms -> GB/s)
    lines = [f"# Offloading executor on {args.device_name}", "", f"Command: `{command}`", "",
             f"torch {torch.__version__}, {args.date}. Measured link (pinned buffers, side stream): device-to-host "
             f"{gbs(link_data['d2h_bytes_per_ms'])}, host-to-device {gbs(link_data['h2d_bytes_per_ms'])}, latency "
             f"{link_data['latency_ms'] * 1e3:.1f} us.", "",
             "Peaks in MiB above the pre-step allocation (the budget counts the same); times in ms, median of "
             f"{args.steps} steps. `combined`: offload + recompute plan (solve_offload over the measured link); "
             "`recompute`: the chain DP's plan; `offload_only_paper`: the offloading paper's best plan at the budget "
             "(its algorithm in brackets), tapes moved, no recomputation; `offload_only`: plain autograd under "
             "`torch.autograd.graph.save_on_cpu(pin_memory=True)` (PyTorch's own offloading, no budget); "
             "`store_all`: plain autograd.", "",
             "| network | budget | method | swaps | recomputed | measured peak | predicted peak | within | step | "
             "predicted step |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in records:
        budget = f"{r['budget_label']} {mib(r['budget_bytes'])}" if r.get("budget_bytes") else "-"
        note = f" ({r['error'][:70]})" if r.get("error") else (f" ({r['algorithm']})" if r.get("algorithm") else "")
        within = {True: "yes", False: "NO"}.get(r.get("within_budget"), "-")
        lines.append(f"| {r['network']} | {budget} | {r['method']}{note} | {r.get('swaps', '-')} | "
                     f"{r.get('recomputations', '-')} | {mib(r.get('measured_peak_bytes'))} | "
                     f"{mib(r.get('predicted_peak_bytes'))} | {within} | {ms(r.get('step_ms'))} | "
                     f"{ms(r.get('predicted_step_ms'))} |")
    timed = [r for r in records if r.get("op_times")]
    if timed:
        lines += ["", "## Op times (--op-times)", "",
                  "One more step per plan with an event after every op on the compute stream; measured / "
                  "predicted ms per op kind (a tape segment's backward counted at the BWD that runs it); host: "
                  "the host's time to queue the ops (above measured: the stream starves).", "",
                  "| network | budget | method | total | host | " + " | ".join(KIND_COLUMNS) + " |",
                  "| --- | --- | --- | --- | --- |" + " --- |" * len(KIND_COLUMNS)]
        for r in timed:
            t = r["op_times"]
            cells = [f"{t['by_kind'][k]['measured_ms']:.1f} / {t['by_kind'][k]['predicted_ms']:.1f}"
                     if k in t["by_kind"] else "-" for k in KIND_COLUMNS]
            lines.append(f"| {r['network']} | {r['budget_label']} | {r['method']} | {t['measured_ms']:.1f} / "
                         f"{t['predicted_ms']:.1f} | {t['host_ms']:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "## Errors", ""] + ([f"- {e}" for e in errors] or ["- none"])
    path_md.write_text("\n".join(lines) + "\n")
    if not quiet:
        print(f"wrote {path_json} and {path_md}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=NETWORKS)
    parser.add_argument("--fractions", nargs="+", type=float, default=list(FRACTIONS),
                        help="budgets as fractions of the measured store-all peak")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--passes", type=int, default=3, help="profiling passes")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--no-paper", dest="paper", action="store_false",
                        help="skip the paper's offload-only plans run at each budget (module docstring)")
    parser.add_argument("--op-times", action="store_true",
                        help="one more step per plan with per-op times against the simulator's (module docstring)")
    args = parser.parse_args(argv)
    _require_cuda()
    import executor as chain_bench

    from torch_exec.offload import measure_link
    from gpusolve.offload.link import Link
    args.device = "cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    args.device_name = torch.cuda.get_device_name(0)
    args.gpu_tag = slug(args.device_name)
    args.date = _dt.datetime.now().isoformat(timespec="seconds")
    torch.backends.cudnn.benchmark = False
    link_data = measure_link()
    link = Link.from_dict(link_data)
    print(f"link: d2h {link.d2h_bytes_per_ms * 1e3 / 1e9:.2f} GB/s, h2d {link.h2d_bytes_per_ms * 1e3 / 1e9:.2f} GB/s, "
          f"latency {link.latency_ms * 1e3:.1f} us", flush=True)
    meter = chain_bench.Meter(args.device)
    command = command_line("offload_executor.py", argv)
    errors, failed = [], []
    # written after every row too: a step killed at its time limit keeps what it measured
    records = SavedRows(lambda: write_report(link_data, records, errors, args, command, quiet=True))
    for name in args.networks:
        try:
            bench_network(name, args, link, meter, records, errors)
        except SystemExit:
            raise
        except Exception as err:
            errors.append(f"{name}: {_error(err)}")
            print(f"== {name} failed: {_error(err)}", flush=True)
            traceback.print_exc()
            failed.append(name)
        chain_bench._free()
        # after every network: a run killed at its time limit keeps what it measured
        write_report(link_data, records, errors, args, command)
    # nonzero where a network failed as a whole (a row's own error is in the report): bench/gpu_session.py counts a
    # step done by its exit status (a review: bench/repros/rv12_gpu_offload_executor_failed_network_exit_zero.py)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
