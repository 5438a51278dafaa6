"""The cost model against each bundled profile's own whole-chain reference.

Every bundled profile carries whole-chain figures measured apart from its per-stage readings
(``reference`` in ``gpusolve/profiles/README.md``). This puts the chain model built from the stages
(``Chain.from_profile``) beside them: the store-all step time and peak, the bytes held after the
forward (the model's summed tapes), and the no-grad forward (summed ``t_fwd_nograd``, what a
recomputation costs in the model). Arithmetic only; it says where a profile can be trusted and by
how much the model is off where it cannot. Any ``measured-chain/1`` file works too, e.g. the
``profile_<network>_<gpu>.json`` files ``bench/executor.py`` writes (``torch_exec``'s own profiler).

    python bench/profile_reference.py [--out bench/results]                 # the bundled profiles
    python bench/profile_reference.py PROFILE.json ... --out DIR --name NAME  # other profiles
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, cpu_description  # noqa: E402
from gpusolve import Chain, profiles, store_all_peak_bytes  # noqa: E402
from gpusolve.simulate import store_all_time_ms  # noqa: E402

GB = 1e9


def record(name: str) -> dict:
    try:
        chain = Chain.load(name)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"bench/profile_reference.py: {err}") from None
    ref = chain.provenance.get("reference") or {}
    missing = [k for k in ("store_all_step_ms", "store_all_peak_bytes", "retained_after_forward_bytes",
                           "nograd_forward_ms") if not ref.get(k)]
    if missing:
        raise SystemExit(f"{name}: the profile's reference lacks {', '.join(missing)}; nothing to compare against")
    return {"profile": Path(name).stem, "device": chain.provenance.get("device"), "stages": chain.n,
            "step_ms": [store_all_time_ms(chain), float(ref["store_all_step_ms"])],
            "peak_bytes": [store_all_peak_bytes(chain), int(ref["store_all_peak_bytes"])],
            "retained_bytes": [int(chain.tape_bytes.sum()), int(ref["retained_after_forward_bytes"])],
            "nograd_forward_ms": [float(chain.t_fwd_nograd.sum()), float(ref["nograd_forward_ms"])]}


def markdown(result: dict) -> str:
    def cell(pair, scale=1.0, unit=""):
        model, measured = pair
        return f"{model / scale:.2f}{unit} / {measured / scale:.2f}{unit} ({100 * (model / measured - 1):+.1f} %)"

    lines = ["# The cost model against the profiles' whole-chain references", "",
             f"{result['device']}, {result['date']}: `{result['command']}`. Arithmetic on profiles measured on the "
             "device named in each row; each cell is model / measured (model over measured).", "",
             "| profile | measured on | stages | store-all step | store-all peak | held after the forward | "
             "no-grad forward |", "|---|---|---|---|---|---|---|"]
    for r in result["profiles"]:
        lines.append(f"| {r['profile']} | {r['device']} | {r['stages']} | {cell(r['step_ms'], unit=' ms')} | "
                     f"{cell(r['peak_bytes'], GB, ' GB')} | {cell(r['retained_bytes'], GB, ' GB')} | "
                     f"{cell(r['nograd_forward_ms'], unit=' ms')} |")
    if not result["bundled"]:
        return "\n".join(lines) + "\n"
    lines += ["", "The DenseNet memory excess is the tensors no backward saves, which profiles without saved-bytes "
              "fields count as held (`bench/results/densenet_copy.md`). The DenseNets' summed `t_fwd_nograd` exceeds "
              "the measured whole no-grad forward by a quarter or more, on ResNet-50 and VGG-16 by about 1 %: in "
              "the model every recomputation on these two profiles costs more than the whole pass suggests, so their "
              "plans' predicted overheads are likely upper bounds. Finding the cause needs a GPU: `torch_exec`'s profiler records "
              "the same reference, so `python bench/profile_reference.py <its profile files>` checks it."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="*", help="measured-chain/1 files or bundled names (default: every bundled one)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--name", default="profile_reference", help="results file stem (default profile_reference)")
    args = parser.parse_args(argv)
    result = {"device": f"CPU: {cpu_description()}", "date": datetime.date.today().isoformat(),
              "command": command_line("profile_reference.py", argv), "bundled": not args.profiles,
              "profiles": [record(name) for name in (args.profiles or profiles.names())]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (out / f"{args.name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
