"""Predicted = measured: the executor's step peak and time against its plan, on the CPU (or a GPU).

    python bench/fidelity.py                      # CPU: the allocator's events measure every peak
    python bench/fidelity.py --models gpt2_hf --fractions 1.0,0.5
    python bench/fidelity.py --models densenet121_tv,resnet50_tv,vgg16_tv --name fidelity_cpu_torchvision

For each model (larger than the test suite's, and different ones: the tests are not the
definition) and each budget (fractions of plain autograd's measured step peak, and the minimum
budget): the plan's predicted peak and step time, the measured peak (one meter for every method:
``torch_exec.meter.MemoryMeter``, the CPU allocator's events or CUDA's counters) and the median
measured step time over ``--steps`` steps, the overhead over plain autograd measured side by side,
and the fastest ``torch.utils.checkpoint.checkpoint_sequential`` (segment counts 1..12 and
round(sqrt(N))) whose *measured* peak fits the budget. Parameter gradients are allocated before
every measured step (the budget does not count them).

Writes ``bench/results/fidelity_<device>.json`` (records) and ``.md`` (table), with device, date
and command. CPU times are CPU times: compare them only side by side within one run.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import math
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint_sequential  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve import format_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402
from torch_exec.split import CausalLMLoss, CrossEntropyStage, gpt2_hf_stages, gpt2_stages, split_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import TORCHVISION_CPU_SIZES, cpu_description, number_list, torchvision_models  # noqa: E402  (same folder)

RESULTS = ROOT / "bench" / "results"
FRACTIONS = (1.0, 0.7, 0.5, 0.35)


# ---------------------------------------------------------------------------- models (bench only)
class Bottleneck(nn.Module):
    """torchvision's ResNet-50 bottleneck (expansion 4), widths scaled."""

    def __init__(self, cin, mid, stride=1):
        super().__init__()
        cout = 4 * mid
        self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


def resnet50_style(batch=8, size=64, width=8):
    layers = [nn.Conv2d(3, 2 * width, 7, 2, 3, bias=False), nn.BatchNorm2d(2 * width), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 2 * width
    for stage, (blocks, mid) in enumerate(zip((3, 4, 6, 3), (width, 2 * width, 4 * width, 8 * width))):
        for b in range(blocks):
            layers.append(Bottleneck(cin, mid, 2 if (b == 0 and stage > 0) else 1))
            cin = 4 * mid
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 100), CrossEntropyStage(torch.randint(0, 100, (batch,)))]
    return nn.Sequential(*layers), torch.randn(batch, 3, size, size)


class DenseStage(nn.Module):
    def __init__(self, c, growth):
        super().__init__()
        self.layer = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, 4 * growth, 1, bias=False),
                                   nn.BatchNorm2d(4 * growth), nn.ReLU(inplace=True),
                                   nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.layer(x)], 1)


def densenet_style(batch=8, size=32, growth=12, blocks=(6, 12, 8)):
    layers, c = [nn.Conv2d(3, 2 * growth, 3, padding=1, bias=False)], 2 * growth
    for i, n in enumerate(blocks):
        for _ in range(n):
            layers.append(DenseStage(c, growth))
            c += growth
        if i < len(blocks) - 1:
            layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
            c //= 2
    layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 100),
               CrossEntropyStage(torch.randint(0, 100, (batch,)))]
    return nn.Sequential(*layers), torch.randn(batch, 3, size, size)


def vgg16_style(batch=4, size=64, div=8):
    layers, c = [], 3
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v // div, 3, padding=1), nn.ReLU(inplace=True)]
            c = v // div
    layers += [nn.Flatten(), nn.Linear(c * (size // 32) ** 2, 256), nn.ReLU(inplace=True), nn.Dropout(0.5),
               nn.Linear(256, 256), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(256, 100),
               CrossEntropyStage(torch.randint(0, 100, (batch,)))]
    return nn.Sequential(*layers), torch.randn(batch, 3, size, size)


def gpt2_style(batch=4, context=128, layers=6, width=128, vocab=2000):
    targets = torch.randint(0, vocab, (batch, context))
    return gpt2_stages(layers=layers, width=width, heads=4, vocab=vocab, context=context, targets=targets), \
        torch.randint(0, vocab, (batch, context))


def gpt2_hf(batch=4, context=128, layers=4, width=128, vocab=2000):
    """transformers' GPT2LMHeadModel (random weights, small config, sdpa attention), cut into its blocks
    by ``torch_exec.split.gpt2_hf_stages`` (its loss is the model's, bit for bit)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=4, vocab_size=vocab, n_positions=context)
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, vocab, (batch, context))
    return gpt2_hf_stages(model, ids), ids


class _Down(nn.Module):
    """U-Net encoder stage: the state is (x, skips...); it returns (pooled y, skips..., y). The skips
    made by earlier stages pass through (Note [Outputs passed through] in gpusolve/chain.py)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, state):
        x, *skips = (state,) if isinstance(state, torch.Tensor) else state
        y = self.conv(x)
        return (nn.functional.max_pool2d(y, 2), *skips, y)


class _Up(nn.Module):
    """U-Net decoder stage: upsamples x, joins the last skip, and passes the other skips on."""

    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin + cskip, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, state):
        x, *skips, skip = state
        y = self.conv(torch.cat([nn.functional.interpolate(x, scale_factor=2.0), skip], dim=1))
        return (y, *skips) if skips else y


def unet_style(batch=4, size=64, widths=(16, 32, 64, 128), classes=8):
    """A U-Net as a chain of stages: every checkpoint between its encoder and decoder holds the skips."""
    layers, c = [], 3
    for w in widths:
        layers.append(_Down(c, w))
        c = w
    for w in reversed(widths):
        layers.append(_Up(c, w, w))
        c = w
    layers += [nn.Conv2d(c, classes, 1), CrossEntropyStage(torch.randint(0, classes, (batch, size, size)))]
    return nn.Sequential(*layers), torch.randn(batch, 3, size, size)


def _torchvision(name: str, batch: int, size: int):
    """torchvision's own ``name`` (random weights), cut by ``torch_exec.split.split_model``; ImportError
    when torchvision is missing or does not load beside this torch."""
    models = torchvision_models()
    targets = torch.randint(0, 1000, (batch,))
    return split_model(getattr(models, name)(weights=None), targets=targets), torch.randn(batch, 3, size, size)


MODELS = {"resnet50_style": resnet50_style, "densenet_style": densenet_style, "vgg16_style": vgg16_style,
          "gpt2_style": gpt2_style, "gpt2_hf": gpt2_hf}
# torchvision's own networks at sizes a CPU runs in minutes: only when asked for (--models)
TORCHVISION = {f"{name}_tv": functools.partial(_torchvision, name, *shape) for name, shape in TORCHVISION_CPU_SIZES.items()}
# only when asked for (--models): the default set is the one bench/results/fidelity_cpu.md records
EXTRA = {"unet_style": unet_style, **TORCHVISION}


# ---------------------------------------------------------------------------- measurement
def _step(model, x):
    model(x).backward()


def _ensure_grads(model):
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_of(model, x, device) -> int:
    """Peak bytes of one step of ``model`` after a warm one, parameter gradients allocated first."""
    _ensure_grads(model)
    _step(model, x)
    _, reading = measure_peak(_step, model, x, device=device)
    return reading.peak


def measure(model, x, steps: int, device, reference=None) -> tuple[int, float, float | None]:
    """(peak bytes of one step, median seconds of ``steps`` steps, median seconds of ``reference``'s
    steps timed interleaved with them, or None). Gradients allocated, one warm step each; timing
    the two alternately keeps a changing machine load out of their ratio."""
    peak = peak_of(model, x, device)
    if reference is not None:
        _ensure_grads(reference)
        _step(reference, x)
    times, ref_times = [], []
    for _ in range(steps):
        for net, out in ((model, times), (reference, ref_times)):
            if net is None:
                continue
            _sync(device)
            started = time.perf_counter()
            _step(net, x)
            _sync(device)
            out.append(time.perf_counter() - started)
    return peak, statistics.median(times), statistics.median(ref_times) if ref_times else None


class SequentialCheckpoint(nn.Module):
    """``torch.utils.checkpoint.checkpoint_sequential`` with ``segments`` over ``stages``."""

    def __init__(self, stages, segments):
        super().__init__()
        self.stages, self.segments = stages, segments

    def forward(self, x):
        return checkpoint_sequential(self.stages, self.segments, x, use_reentrant=False)


def best_checkpoint_sequential(stages, x, budget: int, steps: int, device) -> dict:
    """The fastest segment count whose measured peak fits ``budget`` (``best``: None when none does),
    and the segment counts torch refused to run (an in-place op modifies a checkpointed input)."""
    n = len(stages)
    best, failed = None, []
    for k in sorted(set(range(1, min(n, 12) + 1)) | {max(1, round(math.sqrt(n)))}):
        try:
            peak, seconds, plain = measure(SequentialCheckpoint(stages, k), x, steps, device, reference=stages)
        except RuntimeError as err:  # e.g. "modified by an inplace operation" at a ReLU(inplace) boundary
            failed.append({"segments": k, "error": str(err).splitlines()[0][:160]})
            for p in stages.parameters():
                p.grad = None
            continue
        if peak <= budget and (best is None or seconds / plain < best["ratio"]):
            best = {"segments": k, "peak_bytes": peak, "step_s": seconds, "plain_s": plain, "ratio": seconds / plain}
    return {"best": best, "failed": failed}


def to_device(stages: nn.Module, x: torch.Tensor, device) -> tuple[nn.Module, torch.Tensor]:
    """``stages`` and ``x`` on ``device``, the loss stage's targets included: ``CrossEntropyStage.targets``
    and ``CausalLMLoss.labels`` are plain attributes, which ``Module.to`` leaves where they are (on a GPU
    the loss would get CUDA logits and CPU targets)."""
    stages = stages.to(device)
    for module in stages.modules():
        attr = {CrossEntropyStage: "targets", CausalLMLoss: "labels"}.get(type(module))
        if attr is not None and isinstance(getattr(module, attr), torch.Tensor):
            setattr(module, attr, getattr(module, attr).to(device))
    return stages, x.to(device)


def run_model(name: str, args, device) -> list[dict]:
    torch.manual_seed(0)
    stages, x = to_device(*(MODELS | EXTRA)[name](), device)
    wrapped = te.CheckpointedSequential(stages, budget="1TiB", backend=args.backend, profile_passes=args.passes,
                                        network=name, measure_steps=0)
    started = time.perf_counter()
    wrapped.prepare(x)
    profile_s = time.perf_counter() - started
    plain_peak, _, _ = measure(stages, x, 1, device)
    minimum = wrapped.min_budget_bytes
    budgets = [(f, int(plain_peak * f)) for f in args.fractions] + [("min", minimum)]
    rows = []
    for label, budget in budgets:
        if budget < minimum:
            print(f"{name}: {label} of the plain peak is below the minimum ({format_bytes(minimum)}): skipped")
            continue
        wrapped.replan(budget=budget)
        plan = wrapped.plan
        peak, seconds, reference = measure(wrapped, x, args.steps, device, reference=stages)
        found = best_checkpoint_sequential(stages, x, budget, args.steps, device) if args.sequential else None
        seq = None if found is None else found["best"]
        row = {
            "model": name, "stages": len(stages), "chain_stages": wrapped.chain.n, "budget_label": str(label),
            "budget_bytes": budget, "plain_peak_bytes": plain_peak, "min_budget_bytes": minimum,
            "predicted_peak_bytes": plan.predicted_peak_bytes, "measured_peak_bytes": peak,
            "measured_over_predicted": peak / plan.predicted_peak_bytes, "within_budget": peak <= budget,
            "predicted_step_ms": plan.predicted_time_ms, "predicted_overhead": plan.overhead,
            "measured_step_ms": seconds * 1e3, "plain_step_ms": reference * 1e3,
            "measured_overhead": seconds / reference - 1.0, "plan_notes": plan.notes,
            "best_checkpoint_sequential": None if seq is None else {
                "segments": seq["segments"], "peak_bytes": seq["peak_bytes"], "step_ms": seq["step_s"] * 1e3,
                "overhead": seq["ratio"] - 1.0},
            "checkpoint_sequential_failed": [] if found is None else found["failed"],
            "profile_s": profile_s,
        }
        rows.append(row)
        print(f"{name:15s} {str(label):4s} budget {format_bytes(budget):>11s} predicted {format_bytes(plan.predicted_peak_bytes):>11s} "
              f"measured {format_bytes(peak):>11s} ({peak / plan.predicted_peak_bytes:.3f}) overhead "
              f"{100 * row['measured_overhead']:+.1f} % (predicted {100 * plan.overhead:+.1f} %)"
              + ("" if seq is None else f"; checkpoint_sequential k={seq['segments']} {100 * (seq['ratio'] - 1):+.1f} %"))
    return rows


def write(rows: list[dict], args, device) -> Path:
    args.out.mkdir(parents=True, exist_ok=True)
    tag = "cpu" if device.type == "cpu" else "gpu"
    desc = (cpu_description() if device.type == "cpu" else torch.cuda.get_device_name(device))
    meta = {"device": desc, "date": _dt.date.today().isoformat(), "torch": torch.__version__,
            "command": "python " + " ".join(sys.argv), "threads": torch.get_num_threads()}
    path = args.out / f"{args.name or 'fidelity_' + tag}.json"
    path.write_text(json.dumps({"meta": meta, "records": rows}, indent=1))
    lines = [f"# Fidelity: predicted vs measured ({tag.upper()})", "",
             f"Device: {meta['device']} ({meta['threads']} threads), torch {meta['torch']}, {meta['date']}.",
             f"Command: `{meta['command']}`. Peaks: the same meter for every method "
             f"({'CPU allocator events' if tag == 'cpu' else 'CUDA allocator counters'}), parameter gradients "
             f"allocated before the step. Times: median of {args.steps} steps, each method's steps alternating "
             f"with plain autograd's" + (" (CPU times: only the ratios mean anything)." if tag == "cpu" else "."), "",
             "| model | budget | budget bytes | predicted peak | measured peak | measured / predicted | fits | "
             "predicted overhead | measured overhead | best checkpoint_sequential that fits |",
             "| --- | --- | ---: | ---: | ---: | ---: | :---: | ---: | ---: | --- |"]
    for r in rows:
        seq = r["best_checkpoint_sequential"]
        seq_text = "none fits" if seq is None else (f"k={seq['segments']}: {format_bytes(seq['peak_bytes'])}, "
                                                   f"{100 * seq['overhead']:+.1f} %")
        if r.get("checkpoint_sequential_failed"):
            seq_text += f" (torch refused k = {', '.join(str(f['segments']) for f in r['checkpoint_sequential_failed'])})"
        if not args.sequential:
            seq_text = "not measured"
        label = r["budget_label"] if r["budget_label"] == "min" else f"{100 * float(r['budget_label']):.0f} %"
        lines.append(f"| {r['model']} | {label} | {r['budget_bytes']} | {format_bytes(r['predicted_peak_bytes'])} | "
                     f"{format_bytes(r['measured_peak_bytes'])} | {r['measured_over_predicted']:.4f} | "
                     f"{'yes' if r['within_budget'] else 'NO'} | {100 * r['predicted_overhead']:+.1f} % | "
                     f"{100 * r['measured_overhead']:+.1f} % | {seq_text} |")
    worst = max(rows, key=lambda r: abs(r["measured_over_predicted"] - 1.0)) if rows else None
    if worst:
        lines += ["", f"Largest |measured / predicted - 1|: {worst['model']} at {worst['budget_label']}: "
                      f"{worst['measured_over_predicted']:.4f}. Budgets held: "
                      f"{sum(r['within_budget'] for r in rows)} of {len(rows)}."]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return path


def add_models_option(parser) -> None:
    """``--models``: a comma list of :data:`MODELS` and :data:`EXTRA` (also bench/paper_fidelity.py's)."""
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma list of {', '.join(MODELS | EXTRA)} (default: {', '.join(MODELS)})")


def chosen_models(parser, text: str) -> list[str]:
    """The names of ``--models``, or the parser's one-line error (exit 2) naming the first unknown one."""
    names = text.split(",")
    unknown = [name for name in names if name not in MODELS | EXTRA]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; choose from {', '.join(MODELS | EXTRA)}")
    return names


def run_models(names: list[str], run) -> tuple[list[dict], list[str]]:
    """(the rows of ``run(name)`` for each model, the models that failed). One whose library is missing
    (ImportError) is skipped, saying so; one that raises anything else is reported with its traceback and the
    others still run, so that their rows are written (on the H100 the first model's error lost every row of the
    step: a review, bench/repros/rv12_gpu_fidelity_one_model_loses_all_rows.py); the caller exits nonzero."""
    rows, failures = [], []
    for name in names:
        try:
            rows += run(name)
        except ImportError as err:
            print(f"{name}: skipped ({err})")
        except Exception as err:  # noqa: BLE001 - reported, and the exit status says so
            print(f"{name}: FAILED ({type(err).__name__}: {err})", flush=True)
            traceback.print_exc()
            failures.append(name)
    return rows, failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_models_option(parser)
    parser.add_argument("--fractions", type=number_list(float), default=",".join(map(str, FRACTIONS)),
                        help="budgets as fractions of plain autograd's measured peak (the minimum is added)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per measurement (median)")
    parser.add_argument("--passes", type=int, default=3, help="profiling passes")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads on the CPU (1: steadier step times on a shared machine)")
    parser.add_argument("--no-sequential", dest="sequential", action="store_false",
                        help="skip the checkpoint_sequential search (faster)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the results (default bench/results)")
    parser.add_argument("--name", help="file name of the results without suffix (default fidelity_<cpu|gpu>)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", te.CPUTimingWarning)
    rows, failures = run_models(chosen_models(parser, args.models), lambda name: run_model(name, args, device))
    print(f"wrote {write(rows, args, device)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
