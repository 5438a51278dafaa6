"""Executor benchmark: measured peak memory and step time of gpusolve plans vs the usual baselines.

    python bench/executor.py                       # all networks, on the GPU
    python bench/executor.py --networks resnet50 --steps 5
    python bench/executor.py --quick --device cpu --out /tmp/bench   # tiny smoke run of every code path
    python bench/executor.py --networks densenet121 --device cpu --batch 2 --size 64 --out /tmp/bench

Networks (float32, training mode): torchvision DenseNet-121 (batch 64), ResNet-50 (batch 128),
VGG-16 (batch 64), all 224x224, and transformers' GPT-2 small (``GPT2LMHeadModel``, batch 8, 1024
tokens, cut by ``torch_exec.split.gpt2_hf_stages``); ``--networks gpt2-like`` runs the same stack
written in plain torch instead. Budgets: 100 %, 70 %, 50 %, 35 % of the measured store-all activation peak, and 1.1x the
minimum feasible budget of the profiled chain. Methods:
- ``gpusolve``: :class:`torch_exec.CheckpointedSequential` with the solved plan;
- ``checkpoint_sequential``: ``torch.utils.checkpoint.checkpoint_sequential`` for several segment
  counts (each recorded once, with ``budget_bytes`` null; those that raised are listed);
- ``store_all``: plain autograd.
Four-way cost-model experiment: plans solved from (i) profiled compute + memory, (ii) profiled
compute + uniform memory, (iii) uniform compute + profiled memory, (iv) uniform both; each executed
and timed at the same budgets (field ``cost_model``). ``--host-max`` adds (v) ``host_max``: each stage's time
the larger of its CUDA-event time and the host's time to queue it (Note [Host time of a stage] in
torch_exec/profiler.py; CUDA profiles only), and every row with a schedule gets ``predicted_step_ms_host_max``,
its time under that model, beside ``predicted_step_ms`` (the event times'): which predicts the measured steps?

Memory is ``torch.cuda.max_memory_allocated`` above what is allocated just before the step
(parameters, their gradients allocated beforehand, the input): what the budget counts.
Writes ``<out>/executor_<gpu>.json`` (a list of records) and ``<out>/executor_<gpu>.md``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve import Chain, solve  # noqa: E402
from gpusolve.chain import ALL_BYTE_FIELDS, TIME_FIELDS  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402
from gpusolve.schedule import segments_policy  # noqa: E402
from gpusolve.simulate import simulate, store_all_peak_bytes  # noqa: E402
from gpusolve.solve import release_device_memory  # noqa: E402
from torch_exec.split import gpt2_hf_stages, gpt2_stages, split_model  # noqa: E402
from _common import SavedRows, command_line, slug, torchvision_models  # noqa: E402  (same folder)

NETWORKS = ("densenet121", "resnet50", "vgg16", "gpt2", "gpt2-like")
DEFAULT_NETWORKS = NETWORKS[:4]
FRACTIONS = (1.0, 0.7, 0.5, 0.35)
COST_MODELS = ("profiled", "uniform_memory", "uniform_compute", "uniform")


# ---------------------------------------------------------------------------- networks
def _torchvision():
    try:
        return torchvision_models()
    except ImportError as err:
        raise SystemExit(f"bench/executor.py needs torchvision for the CNNs: {err}, or run --networks gpt2") from None


def build(name: str, device, quick: bool, batch: int | None = None, size: int | None = None):
    """(stages, input, description) of a network; quick: tiny stand-ins for a smoke run; ``batch`` and
    ``size`` (image side, or tokens for the GPT-2s) override the defaults."""
    g = torch.Generator().manual_seed(0)
    if name == "gpt2":
        batch, tokens = batch or (2 if quick else 8), size or (64 if quick else 1024)
        model = _gpt2_small(quick)
        x = torch.randint(0, model.config.vocab_size, (batch, tokens), generator=g).to(device)
        stages = gpt2_hf_stages(model.to(device), labels=x)
        c = model.config
        return stages, x, f"transformers GPT2LMHeadModel {c.n_layer}x{c.n_embd}, batch {batch}, {tokens} tokens"
    if name == "gpt2-like":
        vocab = 512 if quick else 50257
        batch, tokens = batch or (2 if quick else 8), size or (64 if quick else 1024)
        layers, width, heads = (2, 64, 4) if quick else (12, 768, 12)
        x = torch.randint(0, vocab, (batch, tokens), generator=g).to(device)
        y = torch.randint(0, vocab, (batch, tokens), generator=g).to(device)
        stages = gpt2_stages(layers, width, heads, vocab, context=tokens, targets=y).to(device)
        return stages, x, f"GPT-2-like {layers}x{width}, batch {batch}, {tokens} tokens"
    batch = batch or (2 if quick else {"densenet121": 64, "resnet50": 128, "vgg16": 64}[name])
    size = size or (64 if quick else 224)
    if quick:
        model = _quick_cnn(name)
    else:
        model = getattr(_torchvision(), name)(weights=None)
    x = torch.randn(batch, 3, size, size, generator=g).to(device)
    y = torch.randint(0, 1000 if not quick else 10, (batch,), generator=g).to(device)
    stages = split_model(model, targets=y).to(device)
    return stages, x, f"{name}, batch {batch}, {size}x{size}"


def _gpt2_small(quick: bool):
    """transformers' GPT2LMHeadModel with GPT-2 small's configuration (124 M parameters, context 1024,
    dropout 0.1, sdpa attention), random weights; quick: a tiny one."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.utils import logging
    except Exception as err:
        raise SystemExit(f"bench/executor.py needs transformers for gpt2 ({type(err).__name__}: {err}); install it, "
                         f"or run --networks gpt2-like (the same stack in plain torch)") from None
    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=64) if quick else GPT2Config()
    return GPT2LMHeadModel(config)


def _quick_cnn(name):
    """Stand-ins with the same stage structure for a smoke run without torchvision."""
    from torch_exec.split import DenseStage, Head
    if name == "vgg16":
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                             nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(2),
                             nn.Flatten(), nn.Linear(32, 10))
    dense = [DenseStage(nn.Sequential(nn.BatchNorm2d(8 + 4 * i), nn.ReLU(), nn.Conv2d(8 + 4 * i, 4, 3, padding=1)))
             for i in range(3)] if name == "densenet121" else []
    blocks = dense or [nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
                       for _ in range(3)]
    width = 8 + 12 if dense else 8
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), *blocks,
                         Head(nn.Linear(width, 10), relu=True))


# ---------------------------------------------------------------------------- measuring
class Meter:
    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.requested_peak = None
        self.diagnostics = {}

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def step(self, run, params, steps: int, warmup: int):
        """(peak bytes above the pre-step allocation, median step ms, every step's ms) of ``run()``
        (forward+backward)."""
        for p in params:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
        for _ in range(warmup):
            run()
        times, peak = [], None
        self.requested_peak = None  # the step's peak of requested bytes (CUDA), read by the caller
        # Why a step's time moves (DenseNet-121's plain step read 81.1 and 55.7 ms on one H100, 2026-11-26):
        # the host's time to queue the step (about the step's time where launching sets the pace, or where
        # the step waits on the host), and the caching allocator's cudaMalloc calls and its retries (a
        # retry frees the whole cache and synchronises) during the measured steps. Read by the caller.
        enqueue, clocks = [], []
        stats_before = torch.cuda.memory_stats(self.device) if self.cuda else {}
        for _ in range(steps):
            gc.collect()
            self.sync()
            if self.cuda:
                base = torch.cuda.memory_allocated(self.device)
                requested_base = torch.cuda.memory_stats(self.device).get("requested_bytes.all.current")
                torch.cuda.reset_peak_memory_stats(self.device)
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                t0 = time.perf_counter()
                run()
                enqueue.append((time.perf_counter() - t0) * 1e3)
                stop.record()
                clocks.append(_sm_clock_mhz(self.device))  # while the step runs (a clock still ramping up?)
                self.sync()
                times.append(start.elapsed_time(stop))
                step_peak = torch.cuda.max_memory_allocated(self.device) - base
                # before the caching allocator's rounding to its blocks (a request of over 1 MiB can hold up
                # to 1 MiB more: Note [Allocator blocks] in torch_exec/_util.py)
                requested_top = torch.cuda.memory_stats(self.device).get("requested_bytes.all.peak")
                if requested_base is not None and requested_top is not None:  # counters of torch >= 2.1
                    requested = requested_top - requested_base
                    self.requested_peak = requested if self.requested_peak is None else max(self.requested_peak,
                                                                                             requested)
            else:
                t0 = time.perf_counter()
                run()
                times.append((time.perf_counter() - t0) * 1e3)
                step_peak = None
            peak = step_peak if peak is None or step_peak is None else max(peak, step_peak)
        for p in params:
            p.grad = None
        self.diagnostics = {}
        if self.cuda:
            stats = torch.cuda.memory_stats(self.device)
            self.diagnostics = {"enqueue_ms_each": enqueue, "sm_clock_mhz_each": clocks, **{
                name: stats[key] - stats_before[key] for name, key in
                (("alloc_retries", "num_alloc_retries"), ("device_mallocs", "num_device_alloc"))
                if key in stats and key in stats_before}}
        return peak, statistics.median(times), times


def _sm_clock_mhz(device):
    """The SM clock now (torch.cuda.clock_rate, through NVML), or None where NVML is not there."""
    try:
        return int(torch.cuda.clock_rate(device))
    except Exception:  # no pynvml on the machine, or a torch without it
        return None


def _free():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _is_oom(err) -> bool:
    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()


# ---------------------------------------------------------------------------- cost models
def with_cost_model(chain: Chain, kind: str) -> Chain:
    """The chain with uniform compute and/or memory (each field replaced by its mean over stages)."""
    data = chain.to_dict()
    if kind in ("uniform_compute", "uniform"):
        for key in TIME_FIELDS:
            data[key] = [float(np.mean(data[key]))] * chain.n
    if kind in ("uniform_memory", "uniform"):
        for key in ALL_BYTE_FIELDS:  # bwd_tape <= tape per stage, so their means (rounded alike) keep it
            data[key] = [int(round(np.mean(data[key])))] * chain.n
    return Chain.from_dict(data)


HOST_FIELDS = {"t_fwd": "host_fwd_ms", "t_fwd_nograd": "host_fwd_nograd_ms", "t_bwd": "host_bwd_ms"}


def host_max_profile(data: dict) -> dict:
    """A copy of the profile ``data`` whose stage times are the larger of the CUDA-event time and the host's
    time to queue the stage (Note [Host time of a stage] in torch_exec/profiler.py). Memory fields, and so the
    stages fused into the chain, are unchanged."""
    missing = [s + 1 for s, stage in enumerate(data["stages"]) if any(h not in stage for h in HOST_FIELDS.values())]
    if missing:
        raise ValueError(f"host_max: stages {missing[:5]} of the profile have no host times "
                         f"({', '.join(HOST_FIELDS.values())}); only a CUDA profile records them: run on a GPU, "
                         f"without --host-max on the CPU")
    stages = [dict(stage, **{t: max(float(stage[t]), float(stage[h])) for t, h in HOST_FIELDS.items()
                             if stage[t] is not None})  # a t_bwd of None: the chain estimates it from t_fwd
              for stage in data["stages"]]
    return dict(data, stages=stages)


def checkpoint_sequential_boundaries(n_measured: int, segments: int) -> list[int]:
    """Measured-stage indices after which torch's checkpoint_sequential keeps a segment input."""
    size = n_measured // segments
    return [start + size for start in range(0, size * (segments - 1), size)]


def to_chain_boundaries(chain: Chain, measured: list[int]) -> list[int] | None:
    """Map measured-stage boundaries to fused chain stages; None if one falls inside a fused stage."""
    ends, total = {}, 0
    for idx, members in enumerate(chain.provenance["members"], start=1):
        total += len(members)
        ends[total] = idx
    if any(b not in ends for b in measured):
        return None
    return [ends[b] for b in measured]


# ---------------------------------------------------------------------------- one network
def bench_network(name, args, meter, records, errors):
    device = args.device
    stages, x, desc = build(name, device, args.quick, args.batch, args.size)
    params = [p for p in stages.parameters()]
    print(f"== {name}: {desc}, {len(stages)} measured stages", flush=True)
    common = dict(network=name, device=args.device_name, date=args.date)

    # store-all reference
    def plain():
        loss = stages(x)
        loss.backward()
    peak_all, ms_all, each_all = meter.step(plain, params, args.steps, args.warmup)
    print(f"   store_all: peak {peak_all} B, {ms_all:.2f} ms", flush=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = te.profile_dict(stages, x, passes=args.passes, network=name)
    (args.out / f"profile_{name}_{args.gpu_tag}.json").write_text(json.dumps(data, indent=1))
    chain = te.chain_from_profile(data)
    predicted_all = store_all_peak_bytes(chain)
    host_chain = te.chain_from_profile(host_max_profile(data)) if args.host_max else None
    if host_chain is not None and host_chain.names != chain.names:
        raise RuntimeError("host_max: the chain's stages differ from the profiled chain's (fusion depends on memory "
                           "only)")

    def host_ms(schedule) -> dict:  # the schedule's time under the host_max model, beside the event times'
        if host_chain is None:
            return {}
        return {"predicted_step_ms_host_max": float(simulate(host_chain, schedule).time_ms)}

    def plain_row(method, peak, ms, each):
        return dict(common, budget_bytes=None, method=method, segments=None, measured_peak_bytes=peak,
                    predicted_peak_bytes=int(predicted_all), step_ms=ms, step_ms_each=each,
                    requested_peak_bytes=meter.requested_peak, **meter.diagnostics,
                    predicted_step_ms=float(chain.t_fwd.sum() + chain.t_bwd.sum()),
                    **({} if host_chain is None else
                       {"predicted_step_ms_host_max": float(host_chain.t_fwd.sum() + host_chain.t_bwd.sum())}))
    records.append(plain_row("store_all", peak_all, ms_all, each_all))
    store_all_ref = peak_all if peak_all is not None else predicted_all
    min_bytes = min_feasible_bytes(chain)
    budgets = [("%d%%" % round(100 * f), int(f * store_all_ref)) for f in FRACTIONS]
    budgets.append(("1.1x min", int(1.1 * min_bytes)))
    print(f"   chain: {chain.n} fused stages, model store-all {predicted_all} B, min feasible {min_bytes} B",
          flush=True)

    # gpusolve and the four cost models, at equal budgets; the wrapper reuses the profile above
    wrapped = te.CheckpointedSequential(stages, budget=None, network=name,
                                        schedule_fn=store_all_schedule)
    wrapped.prepare(x, profile=data)
    for label, budget in budgets:
        for kind in (COST_MODELS if args.cost_models else ("profiled",)) + (("host_max",) if args.host_max else ()):
            row = dict(common, budget_bytes=budget, budget_label=label, method="gpusolve", segments=None,
                       cost_model=kind)
            try:
                model_chain = host_chain if kind == "host_max" else with_cost_model(chain, kind)
                plan = solve(model_chain, budget, backend=args.backend)
                release_device_memory()  # the CUDA solver's workspace goes back before the measured steps
                sim = simulate(chain, plan.schedule)  # the plan's cost under the measured model
                wrapped.replan(budget=None, schedule_fn=lambda _c, s=plan.schedule: s)

                def step():
                    loss = wrapped(x)
                    loss.backward()
                peak, ms, each = meter.step(step, params, args.steps, args.warmup)
                row.update(measured_peak_bytes=peak, predicted_peak_bytes=int(sim.peak_bytes), step_ms=ms,
                           step_ms_each=each, requested_peak_bytes=meter.requested_peak, **meter.diagnostics,
                           predicted_step_ms=float(sim.time_ms), solve_seconds=plan.solve_seconds,
                           ops=len(plan.schedule), **host_ms(plan.schedule))
                print(f"   gpusolve[{kind}] {label} ({budget} B): peak {peak} B (pred {sim.peak_bytes}), "
                      f"{ms:.2f} ms (pred {sim.time_ms:.2f})", flush=True)
            except Exception as err:  # infeasible under this cost model, OOM, ...
                row.update(measured_peak_bytes=None, predicted_peak_bytes=None, step_ms=None,
                           predicted_step_ms=None, error=f"{type(err).__name__}: {str(err).splitlines()[0]}")
                print(f"   gpusolve[{kind}] {label}: {row['error']}", flush=True)
                if not _is_oom(err) and args.verbose:
                    traceback.print_exc()
            records.append(row)
            _free()

    # What a user gets at each budget: the wrapper's own decision (plain autograd where its measured peak fits,
    # else its plan on the executor's chain, what it reserves included). The rows above force the solver's
    # schedule through the executor: at 100 % of ResNet-50's peak on the H100 a plan that recomputes a
    # little (the model's store-all peak is 2 MiB above the measured one) read +2.8 %, where the wrapper runs
    # plain autograd.
    for label, budget in budgets:
        row = dict(common, budget_bytes=budget, budget_label=label, method="gpusolve (wrapper)", segments=None,
                   cost_model="profiled")
        try:
            wrapped.replan(budget=budget, schedule_fn=None)

            def step():
                loss = wrapped(x)
                loss.backward()
            peak, ms, each = meter.step(step, params, args.steps, args.warmup)
            plan = wrapped.plan
            row.update(measured_peak_bytes=peak, predicted_peak_bytes=int(plan.predicted_peak_bytes), step_ms=ms,
                       step_ms_each=each, requested_peak_bytes=meter.requested_peak, **meter.diagnostics,
                       predicted_step_ms=float(plan.predicted_time_ms), runs_plain=bool(wrapped._last.plain),
                       ops=len(plan.schedule),
                       **(host_ms(plan.schedule) if not wrapped._last.plain and plan.chain is not None
                          and plan.chain.names == chain.names else {}))
            print(f"   gpusolve (wrapper) {label} ({budget} B): peak {peak} B (pred {plan.predicted_peak_bytes}), "
                  f"{ms:.2f} ms (pred {plan.predicted_time_ms:.2f}){', plain autograd' if row['runs_plain'] else ''}",
                  flush=True)
        except Exception as err:  # below the wrapper's least budget (its reserves), OOM, ...
            row.update(measured_peak_bytes=None, predicted_peak_bytes=None, step_ms=None, predicted_step_ms=None,
                       error=f"{type(err).__name__}: {str(err).splitlines()[0]}")
            print(f"   gpusolve (wrapper) {label}: {row['error']}", flush=True)
            if not _is_oom(err) and args.verbose:
                traceback.print_exc()
        records.append(row)
        _free()

    # checkpoint_sequential with several segment counts
    from torch.utils.checkpoint import checkpoint_sequential
    n_measured = len(stages)
    counts = sorted({s for s in (2, 3, 4, 6, 8, round(math.sqrt(n_measured)), 12, 16, 24, 32) if 1 < s <= n_measured})
    for segments in counts:
        row = dict(common, budget_bytes=None, method="checkpoint_sequential", segments=segments)
        bounds = to_chain_boundaries(chain, checkpoint_sequential_boundaries(n_measured, segments))
        schedule = None if bounds is None else te.plan_from_schedule(chain, segments_policy(bounds, chain.n)).schedule
        sim = None if schedule is None else simulate(chain, schedule)
        try:
            def step(segments=segments):
                loss = checkpoint_sequential(stages, segments, x, use_reentrant=False)
                loss.backward()
            peak, ms, each = meter.step(step, params, args.steps, args.warmup)
            row.update(measured_peak_bytes=peak, step_ms=ms, step_ms_each=each,
                       requested_peak_bytes=meter.requested_peak, **meter.diagnostics)
            print(f"   checkpoint_sequential({segments}): peak {peak} B, {ms:.2f} ms", flush=True)
        except Exception as err:
            row.update(measured_peak_bytes=None, step_ms=None, error=f"{type(err).__name__}: {str(err).splitlines()[0]}")
            errors.append(f"{name}: checkpoint_sequential({segments}) raised {row['error']}")
            print(f"   checkpoint_sequential({segments}): {row['error']}", flush=True)
        row.update(predicted_peak_bytes=None if sim is None else int(sim.peak_bytes),
                   predicted_step_ms=None if sim is None else float(sim.time_ms))
        if schedule is not None:
            row.update(host_ms(schedule))
        records.append(row)
        _free()
    # plain autograd again, last: on the H100 DenseNet-121's first measurement (81.1 ms) sat 27 % above
    # the 100 % plan's (63.8 ms) at the same peak; the two readings bracket the run's drift
    peak_again, ms_again, each_again = meter.step(plain, params, args.steps, args.warmup)
    records.append(plain_row("store_all (again, last)", peak_again, ms_again, each_again))
    print(f"   store_all again: peak {peak_again} B, {ms_again:.2f} ms", flush=True)
    stages = x = wrapped = None  # drop the network before the next one (the closures above read these cells)
    _free()


def store_all_schedule(chain):
    from gpusolve.baselines import store_all
    return store_all(chain)


# ---------------------------------------------------------------------------- report
def write_report(records, errors, args, command, quiet: bool = False):
    path_json = args.out / f"executor_{args.gpu_tag}.json"
    path_md = args.out / f"executor_{args.gpu_tag}.md"
    path_json.write_text(json.dumps(records, indent=1))
    mib = lambda b: "-" if b is None else f"{b / 2**20:.0f}"  # noqa: E731
    ms = lambda t: "-" if t is None else f"{t:.1f}"  # noqa: E731
    lines = [f"# Executor benchmark on {args.device_name}", "", f"Command: `{command}`", "",
             f"torch {torch.__version__}, {args.date}. Peaks in MiB above the pre-step allocation; times in ms "
             f"(median of {args.steps} steps).", ""]
    lines += ["| network | budget | method | segments / cost model | measured peak | predicted peak | step | "
              "predicted step |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in records:
        extra = r.get("cost_model") if r["method"].startswith("gpusolve") else (r["segments"] or "")
        if r.get("runs_plain"):
            extra += ", plain autograd"
        budget = f"{r.get('budget_label', '')} {mib(r['budget_bytes'])}".strip() if r["budget_bytes"] else "-"
        note = f" ({r['error'][:60]})" if r.get("error") else ""
        lines.append(f"| {r['network']} | {budget} | {r['method']}{note} | {extra} | {mib(r['measured_peak_bytes'])} | "
                     f"{mib(r['predicted_peak_bytes'])} | {ms(r['step_ms'])} | {ms(r['predicted_step_ms'])} |")
    lines += ["", "## checkpoint_sequential segment counts that raised", ""]
    lines += [f"- {e}" for e in errors] or ["- none"]
    path_md.write_text("\n".join(lines) + "\n")
    if not quiet:
        print(f"wrote {path_json} and {path_md}")


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1 (``--batch 0`` would otherwise mean the default)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(DEFAULT_NETWORKS), choices=NETWORKS,
                        help="gpt2: transformers' GPT2LMHeadModel (GPT-2 small); gpt2-like: the same stack in plain "
                             "torch (torch_exec.split.gpt2_stages); default: all but gpt2-like")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--passes", type=int, default=5, help="profiling passes")
    parser.add_argument("--backend", default="auto", help="solver backend: auto, cpu, cuda")
    parser.add_argument("--no-cost-models", dest="cost_models", action="store_false",
                        help="skip the four-way cost-model experiment")
    parser.add_argument("--host-max", action="store_true",
                        help="also plans whose stage times are the larger of the event time and the host's queueing "
                             "time (CUDA profiles only), and each schedule's time under that model")
    parser.add_argument("--quick", action="store_true", help="tiny networks and sizes (smoke test)")
    parser.add_argument("--batch", type=_positive, help="batch size instead of the network's default")
    parser.add_argument("--size", type=_positive, help="image side (CNNs) or tokens (GPT-2s) instead of the default")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu (with --quick) for a smoke run")
    if args.host_max and not args.device.startswith("cuda"):
        raise SystemExit("--host-max needs a CUDA profile (the host's queueing times beside the events): "
                         "run it on a GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    args.device_name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    args.gpu_tag = (slug(args.device_name) + ("_quick" if args.quick else "")
                    + (f"_b{args.batch}" if args.batch else "") + (f"_s{args.size}" if args.size else ""))
    args.date = _dt.date.today().isoformat()
    if args.device.startswith("cuda"):
        torch.backends.cudnn.benchmark = False
    meter = Meter(args.device)
    command = command_line("executor.py", argv)
    errors, failed = [], []
    # written after every row: a step killed at its time limit (bench/gpu_session.py) keeps what it measured
    records = SavedRows(lambda: write_report(records, errors, args, command, quiet=True))
    for name in args.networks:
        try:
            bench_network(name, args, meter, records, errors)
        except SystemExit:
            raise
        except Exception as err:
            print(f"== {name} failed: {type(err).__name__}: {err}", flush=True)
            traceback.print_exc()
            failed.append(name)
        _free()
    write_report(records, errors, args, command)
    # nonzero where a network failed: bench/gpu_session.py counts a step done by its exit status (a review:
    # bench/repros/rv12_gpu_executor_failed_network_exit_zero.py)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
