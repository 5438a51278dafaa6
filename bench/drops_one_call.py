"""What counting a merged stage's drops held would cost (Note [Drops seen on one call] in gpusolve/chain.py).

    python bench/drops_one_call.py [--out bench/results/drops_one_call_cpu]

Each of bench/fidelity.py's models (its U-Net, six residual blocks that begin with a dropout, and the fidelity tests'
six small models, tests/fidelity_models.py) is profiled
once as a ``CheckpointedSequential`` of its Python stages; its chain is read from that profile twice, with a
merged stage's members' drops freed as the profiled call saw them (``free_drops=True``, the default) and held until
the merged stage's backward (``free_drops=False``, safe where a stage reads a tensor on some calls only). Per
reading: the merged stages, the chain's least budget and store-all peak against plain autograd's measured peak,
and the predicted step time of the optimal plan at 35, 50 and 70 % of that peak (CPU times: compare them only
within a row). Writes ``--out`` ``.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import fidelity  # noqa: E402  (same folder: the models)
import fidelity_models  # noqa: E402  (tests/: the fidelity tests' small models)
import torch_exec as te  # noqa: E402
from _common import record_header, write_cpu_record  # noqa: E402
from gpusolve import Chain, InfeasibleBudgetError, solve, store_all_peak_bytes  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402

FRACTIONS = (0.35, 0.5, 0.7)


def six_dropout_blocks():
    """Six residual blocks that begin with a dropout (their boundaries saved by no backward), then a head."""
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop, self.fc = nn.Dropout(0.1), nn.Linear(256, 256)

        def forward(self, h):
            return h + torch.tanh(self.fc(self.drop(h)))
    return nn.Sequential(*[Block() for _ in range(6)], nn.Linear(256, 10)), torch.randn(64, 256)


MODELS = {**fidelity.MODELS, "unet_style": fidelity.unet_style, "six_dropout_blocks": six_dropout_blocks,
          **{f"tests_{name}": build for name, build in fidelity_models.MODELS.items()}}


def reading(data: dict, free_drops: bool, plain: int) -> dict:
    chain = Chain.from_profile(data, free_drops=free_drops)
    row = {"stages": chain.n, "merged": sum(len(m) > 1 for m in chain.provenance["members"]),
           "least_bytes": min_feasible_bytes(chain), "store_all_bytes": store_all_peak_bytes(chain)}
    for f in FRACTIONS:
        try:
            row[f"time_ms_{f:g}"] = solve(chain, int(plain * f), backend="cpu").predicted_time_ms
        except InfeasibleBudgetError:
            row[f"time_ms_{f:g}"] = None
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "drops_one_call_cpu")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rows = []
    for name, build in MODELS.items():
        torch.manual_seed(0)
        stages, x = build()
        wrapped = te.CheckpointedSequential(stages, budget="1TiB", backend="cpu", profile_passes=2, measure_steps=0)
        wrapped.prepare(x)
        data = wrapped.last_profile
        plain = int(data["reference"]["store_all_peak_bytes"])
        row = {"model": name, "plain_peak_bytes": plain,
               "freed": reading(data, True, plain), "held": reading(data, False, plain)}
        rows.append(row)
        print(name, row, flush=True)
    record = write_cpu_record(args.out, "drops_one_call.py", argv, rows)
    lines = record_header(record, "A merged stage's drops freed or held (CPU)",
                          "One profile per model; least budget and store-all peak as a share of plain autograd's "
                          "measured peak; predicted step (ms) at 35 / 50 / 70 % of it (- : infeasible).")
    lines += ["| model | merged stages | drops | least budget | store-all peak | 35 % | 50 % | 70 % |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        for key in ("freed", "held"):
            c = r[key]
            times = " | ".join("-" if c[f"time_ms_{f:g}"] is None else f"{c[f'time_ms_{f:g}']:.2f}" for f in FRACTIONS)
            lines.append(f"| {r['model']} | {c['merged']} | {key} | {c['least_bytes'] / r['plain_peak_bytes']:.1%} | "
                         f"{c['store_all_bytes'] / r['plain_peak_bytes']:.3f} x | {times} |")
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {Path(args.out).with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
