"""Why the bundled DenseNet profiles over-count the store-all peak, and what it means for the executor.

The bundled profiles carry no ``out_saved_bytes``/``in_saved_bytes``, so ``Chain.from_profile`` counts
every stage boundary as held by autograd. The profiles also carry a separately measured whole-chain
reference (``retained_after_forward_bytes``, ``store_all_peak_bytes``). This script

1. splits the model's excess over that reference into the boundaries that no backward saves:
   - ``densenet121_b64``: each dense layer was run as torchvision's ``_DenseLayer`` on one tensor, whose
     ``torch.cat([x])`` copies its input; ``norm1`` saves the copy, so the tensor before each dense layer
     is saved by no backward;
   - ``densenet121_fine_b32``: the BatchNorm outputs that feed an out-of-place ReLU (ReLU saves its
     result, BatchNorm its input);
2. on ``densenet121_b64``, writes the saved-bytes fields autograd's save rules give (BatchNorm, conv and
   max-pool save their input, in-place ReLU its result = its input, cat nothing, the head's
   out-of-place ReLU its result), once for the layer as profiled (the copy) and once for
   ``torch_exec.split.DenseStage`` after Note [Dense layers without the copy] (``norm1`` saves ``x``;
   the copy's bytes leave the stage's tape), checks each annotated model's store-all peak against the
   measured reference, and solves both at fractions of the *measured* store-all peak.

Part 2 is an estimate from one measured profile and stated rules, not a GPU measurement: it says what
``torch_exec``'s own profiler would hand the DP for DenseNet-121 before and after the fix.

3. with torch installed: ``torch_exec.auto_checkpoint`` on ``examples/models.py``'s ``TVDenseNet``
   (torchvision's DenseNet layout and forward; small, and DenseNet-121's widths and depths on 64 x 64
   inputs), profiled on this machine's CPU, with and without Note [Running concatenation]: chain
   stages and the least budget as a fraction of plain autograd's measured peak.

    python bench/densenet_copy.py [--out bench/results] [--no-auto]
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, cpu_description  # noqa: E402
from gpusolve import Chain, solve  # noqa: E402
from gpusolve.baselines import best_checkpoint_sequential  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402
from gpusolve.profiles import resolve as resolve_profile  # noqa: E402
from gpusolve.simulate import overhead, store_all_peak_bytes, store_all_time_ms  # noqa: E402

FRACTIONS = (0.5, 0.35)
GB = 1e9


def load(name: str) -> dict:
    return json.loads(Path(resolve_profile(name)).read_text())


def input_nbytes(data: dict, s: int) -> int:
    return int(data["input_bytes"]) if s == 0 else int(data["stages"][s - 1]["x_nbytes"])


def excess(data: dict, unsaved) -> dict:
    """The model's tape over the measured retained bytes, and the bytes of the boundaries ``unsaved``
    picks (stage indices whose output no backward saves)."""
    stages = data["stages"]
    ref = data["reference"]
    tape = sum(int(st["xbar"]) for st in stages)
    picked = [s for s in range(len(stages) - 1) if unsaved(stages, s)]
    explained = sum(int(stages[s]["x"]) for s in picked)
    chain = Chain.from_profile(data)
    return {"model_store_all_peak_bytes": store_all_peak_bytes(chain),
            "measured_store_all_peak_bytes": int(ref["store_all_peak_bytes"]),
            "model_tape_bytes": tape, "measured_retained_bytes": int(ref["retained_after_forward_bytes"]),
            "excess_bytes": tape - int(ref["retained_after_forward_bytes"]),
            "unsaved_boundaries": len(picked), "unsaved_bytes": explained}


def feeds_dense_layer(stages, s):
    return "denselayer" in stages[s + 1]["name"]


def feeds_out_of_place_relu(stages, s):
    nxt = stages[s + 1]
    return nxt["name"].rsplit(".", 1)[-1].startswith("relu") and int(nxt["x"]) > 0


def saved_fields(name: str, stage: dict, in_bytes: int, direct: bool) -> tuple[int, int]:
    """(in_saved_bytes, out_saved_bytes) of one densenet121_b64 stage by autograd's save rules."""
    last = name.rsplit(".", 1)[-1]
    if "denselayer" in name:
        return (in_bytes if direct else 0), 0  # norm1 saves x itself, or the copy
    if last.startswith("relu") and int(stage["x"]) == 0:
        return in_bytes, int(stage["x_nbytes"])  # in place: saves its result, which is its input
    if name in ("head", "loss"):
        return 0, 0  # out-of-place ReLU / log_softmax save their results, not their inputs
    return in_bytes, 0  # conv, BatchNorm, max-pool, transition (norm first): input saved


def annotated(data: dict, direct: bool) -> dict:
    """``densenet121_b64`` with the saved-bytes fields; ``direct``: the dense layers without the copy."""
    out = copy.deepcopy(data)
    for s, stage in enumerate(out["stages"]):
        in_bytes = input_nbytes(data, s)
        stage["in_saved_bytes"], stage["out_saved_bytes"] = saved_fields(stage["name"], stage, in_bytes, direct)
        if direct and "denselayer" in stage["name"]:
            # The copy (the input's size) is no longer allocated and saved: it leaves the stage's tape and
            # its forward-with-grad peak. The no-grad peak and the times are kept as measured (upper bounds).
            stage["xbar"] = int(stage["xbar"]) - in_bytes
            stage["fwd_peak_grad"] = int(stage["fwd_peak_grad"]) - in_bytes
    out["input_requires_grad"] = False
    return out


def variant(chain: Chain, measured_peak: int) -> dict:
    base = store_all_time_ms(chain)
    return {"stages": chain.n, "model_store_all_peak_bytes": store_all_peak_bytes(chain),
            "min_feasible_bytes": min_feasible_bytes(chain), "store_all_ms": base,
            "rows": solve_rows(chain, measured_peak, base)}


def solve_rows(chain: Chain, measured_peak: int, base: float) -> list[dict]:
    rows = []
    for fraction in FRACTIONS:
        budget = int(fraction * measured_peak)
        plan = solve(chain, budget, backend="cpu", strict=False, progress=False)
        seq = best_checkpoint_sequential(chain, budget)
        rows.append({"fraction_of_measured_peak": fraction, "budget_bytes": budget,
                     "optimal_ms": plan.predicted_time_ms if plan.feasible else None,
                     "optimal_overhead": plan.overhead if plan.feasible else None,
                     "checkpoint_sequential_overhead": overhead(seq.sim.time_ms, base) if seq else None,
                     "checkpoint_sequential_segments": seq.detail["segments"] if seq else None})
    return rows


AUTO_CASES = {  # name: (TVDenseNet keyword arguments, batch, image side)
    "small (blocks 3, 2)": (dict(), 4, 16),
    "DenseNet-121 widths": (dict(growth=32, blocks=(6, 12, 24, 16), init=64, classes=1000, bn_size=4), 2, 64),
}


def auto_rows() -> list[dict]:
    """Part 3: auto_checkpoint's chain on TVDenseNet, with and without the running-concatenation rewrite."""
    import warnings

    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    import torch_exec as te
    import torch_exec.auto as auto
    from models import TVDenseNet
    from torch_exec.executor import plain_peak_bytes

    rewrite = auto._running_concatenation
    rows = []
    try:
        for name, (kwargs, batch, side) in AUTO_CASES.items():
            for enabled in (False, True):
                auto._running_concatenation = rewrite if enabled else (lambda gm: 0)
                torch.manual_seed(0)
                model = TVDenseNet(**kwargs)
                x = torch.randn(batch, 3, side, side)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    wrapped = te.auto_checkpoint(model, "100%", backend="cpu", sample=(x,))
                ex = wrapped.executor
                plain = plain_peak_bytes(ex._last)
                rows.append({"model": name, "batch": batch, "side": side, "rewrite": enabled, "stages": ex.chain.n,
                             "min_budget_bytes": ex.min_budget_bytes, "plain_peak_bytes": plain,
                             "min_fraction": ex.min_budget_bytes / plain, "notes": wrapped.capture.notes})
                print(f"{name}, rewrite {enabled}: {ex.chain.n} stages, least budget "
                      f"{ex.min_budget_bytes / plain:.3f} of plain autograd's peak", file=sys.stderr)
    finally:
        auto._running_concatenation = rewrite
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--no-auto", action="store_true", help="skip part 3 (needs torch)")
    args = parser.parse_args(argv)
    b64, fine = load("densenet121_b64"), load("densenet121_fine_b32")
    result = {"device": f"CPU: {cpu_description()}",
              "date": datetime.date.today().isoformat(), "command": command_line("densenet_copy.py", argv),
              "excess": {"densenet121_b64": excess(b64, feeds_dense_layer),
                         "densenet121_fine_b32": excess(fine, feeds_out_of_place_relu)},
              "variants": {}}
    measured = int(b64["reference"]["store_all_peak_bytes"])
    for name, direct in (("as profiled (copy)", False), ("DenseStage without the copy", True)):
        result["variants"][name] = variant(Chain.from_profile(annotated(b64, direct)), measured)
    result["variants"]["bundled (no saved-bytes fields)"] = variant(Chain.load("densenet121_b64"), measured)
    if not args.no_auto:
        result["auto"] = auto_rows()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "densenet_copy.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (out / "densenet_copy.md").write_text(text)
    print(text)


def pct(value) -> str:
    return "infeasible" if value is None else f"+{100 * value:.1f} %"


def markdown(result: dict) -> str:
    lines = ["# The bundled DenseNet profiles' store-all excess, and DenseNet layers without their input copy", "",
             f"{result['device']}, {result['date']}: `{result['command']}`. Arithmetic on the bundled H100 profiles "
             "and DP solves (CPU backend); no GPU was run.", "",
             "## 1. The model's tape over the measured retained bytes", "",
             "| profile | model store-all peak | measured | model tape | measured retained | excess | "
             "boundaries no backward saves | their bytes |", "|---|---|---|---|---|---|---|---|"]
    for name, e in result["excess"].items():
        lines.append(f"| {name} | {e['model_store_all_peak_bytes'] / GB:.3f} GB | {e['measured_store_all_peak_bytes'] / GB:.3f} GB "
                     f"| {e['model_tape_bytes'] / GB:.3f} GB | {e['measured_retained_bytes'] / GB:.3f} GB "
                     f"| {e['excess_bytes'] / GB:.3f} GB | {e['unsaved_boundaries']} | {e['unsaved_bytes'] / GB:.3f} GB |")
    lines += ["", "densenet121_b64: the boundaries are the tensors entering a dense layer (its `torch.cat([x])` "
              "copies x, `norm1` saves the copy); densenet121_fine_b32: the BatchNorm outputs entering an "
              "out-of-place ReLU.", "",
              "## 2. densenet121_b64 with saved-bytes fields from autograd's save rules (estimate)", "",
              f"Budgets are fractions of the measured store-all peak; the plain step is {next(iter(result['variants'].values()))['store_all_ms']:.2f} ms "
              "(the profile's stage sums).", "",
              "| chain | stages | model store-all peak | least budget | " +
              " | ".join(f"optimum at {int(100 * f)} % | best checkpoint_sequential at {int(100 * f)} %" for f in FRACTIONS) + " |",
              "|---|---|---|---|" + "---|---|" * len(FRACTIONS)]
    for name, v in result["variants"].items():
        cells = []
        for row in v["rows"]:
            seq = pct(row["checkpoint_sequential_overhead"])
            if row["checkpoint_sequential_segments"]:
                seq += f" ({row['checkpoint_sequential_segments']} segments)"
            cells += [pct(row["optimal_overhead"]), seq]
        lines.append(f"| {name} | {v['stages']} | {v['model_store_all_peak_bytes'] / GB:.3f} GB | "
                     f"{v['min_feasible_bytes'] / GB:.3f} GB | " + " | ".join(cells) + " |")
    if result.get("auto"):
        lines += ["", "## 3. `auto_checkpoint` on a torchvision-layout DenseNet, with and without Note [Running "
                  "concatenation] (measured on this CPU)", "",
                  "`examples/models.py`'s `TVDenseNet`, float32, profiled by `torch_exec` on the CPU (its allocator's "
                  "bytes); the least budget is the exact minimum of the chain found, over plain autograd's measured peak.", "",
                  "| model | batch, image | rewrite | chain stages | least budget | plain autograd's peak | fraction |",
                  "|---|---|---|---|---|---|---|"]
        for r in result["auto"]:
            lines.append(f"| {r['model']} | {r['batch']}, {r['side']} x {r['side']} | {'yes' if r['rewrite'] else 'no'} "
                         f"| {r['stages']} | {r['min_budget_bytes'] / 2**20:.2f} MiB | {r['plain_peak_bytes'] / 2**20:.2f} MiB "
                         f"| {100 * r['min_fraction']:.1f} % |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
