"""Command line: ``gpusolve solve|compare|curve|thesis|demo|profiles`` (see README)."""
from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

from .chain import THESIS_FORMAT, Chain, read_json_object
from .errors import BackendUnavailableError, FallbackWarning
from .simulate import store_all_peak_bytes
from .units import format_bytes, parse_bytes

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
DEMO_PROFILE = "densenet121_b64"
DEMO_FRACTION = 0.5
THESIS_DECIMALS = 9
BACKENDS = ("auto", "cpu", "cuda", "exact")


class CliError(ValueError):
    """A user error reported as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2 (argparse's own code)
        raise CliError(message)


# ---------------------------------------------------------------------------- helpers
def bundled_profiles() -> list[str]:
    """Names of the bundled profiles (``gpusolve/profiles/*.json``)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_chain(spec: str) -> Chain:
    """A chain from a path or the name of a bundled profile (with or without ``.json``)."""
    path = Path(spec)
    if not path.exists():
        bundled = PROFILE_DIR / (spec if spec.endswith(".json") else f"{spec}.json")
        if "/" not in spec and bundled.exists():
            path = bundled
        else:
            raise FileNotFoundError(f"no such file or bundled profile: {spec!r} "
                                    f"(bundled: {', '.join(bundled_profiles())})")
    if path.is_dir():
        raise CliError(f"{spec} is a directory, not a profile file")
    return Chain.load(path)


def _bytes(value: str, what: str) -> int:
    return parse_bytes(value, what)


def _budget(chain: Chain, value: str) -> int:
    """A budget in bytes; also accepts a percentage of the store-all peak, e.g. ``50%``."""
    text = value.strip()
    if text.endswith("%"):
        try:
            frac = float(text[:-1]) / 100.0
        except ValueError:
            raise CliError(f"budget {value!r} is not a size or a percentage") from None
        if not math.isfinite(frac) or frac <= 0:
            raise CliError(f"budget {value!r} must be a positive percentage")
        return int(store_all_peak_bytes(chain) * frac)
    return _bytes(text, "budget")


def _emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, allow_nan=False, default=_json_default) + "\n")


def _json_default(value):
    import numpy as np
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _chain_name(chain: Chain, spec: str) -> str:
    return str(chain.provenance.get("network") or Path(spec).stem)


def comparison_table(records: list[dict], budget_bytes: int) -> str:
    """Aligned text table of :func:`gpusolve.baselines.compare` records."""
    header = ("method", "step (ms)", "overhead", "peak", "fits", "detail")
    rows = [header]
    for r in records:
        detail = ", ".join(f"{k}={v}" for k, v in r["detail"].items() if k not in ("notes", "note", "min_feasible_bytes"))
        rows.append((r["name"],
                     "-" if r["time_ms"] is None else f"{r['time_ms']:.2f}",
                     "-" if r["overhead"] is None else f"{100 * r['overhead']:+.1f} %",
                     "-" if r["peak_bytes"] is None else format_bytes(r["peak_bytes"]),
                     "yes" if r["feasible"] else "no", detail))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    align = ["<", ">", ">", ">", "^", "<"]
    lines = [f"budget {format_bytes(budget_bytes)} ({budget_bytes} B)"]
    for n, row in enumerate(rows):
        lines.append("  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, align, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [r["detail"]["note"] for r in records if "note" in r["detail"]]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- commands
def cmd_solve(args) -> int:
    from .solve import solve
    chain = load_chain(args.profile)
    budget = _budget(chain, args.budget)
    bucket = _bytes(args.bucket, "bucket") if args.bucket is not None else None
    plan = solve(chain, budget, bucket=bucket, backend=args.backend)
    if args.json:
        _emit_json(plan.to_dict())
    else:
        print(f"{_chain_name(chain, args.profile)}: {chain.summary()}")
        print(plan.summary())
    return 0


def cmd_compare(args) -> int:
    from .baselines import compare
    from .solve import check_budget
    chain = load_chain(args.profile)
    budget = _budget(chain, args.budget)
    bucket = _bytes(args.bucket, "bucket") if args.bucket is not None else None
    low = check_budget(chain, budget, bucket)  # compare() itself reports infeasibility in its rows
    records = compare(chain, budget, bucket=bucket, backend=args.backend)
    if args.json:
        _emit_json({"network": _chain_name(chain, args.profile), "stages": chain.n, "budget_bytes": budget,
                    "min_feasible_bytes": low, "records": records})
    else:
        print(f"{_chain_name(chain, args.profile)}: {chain.summary()}")
        print(comparison_table(records, budget))
    return 0


def cmd_curve(args) -> int:
    from .plot import curve_data, plot_curve
    chain = load_chain(args.profile)
    top = _budget(chain, args.max_budget) if args.max_budget is not None else None
    bucket = _bytes(args.bucket, "bucket") if args.bucket is not None else None
    data = curve_data(chain, top, bucket=bucket, backend=args.backend)
    out = plot_curve(data, args.out)
    if args.json:
        _emit_json(data | {"out": str(out)})
    else:
        print(f"wrote {out} ({len(data['optimal']['budget_bytes'])} optimal points, "
              f"{len(data['grid_bytes'])} baseline budgets up to {format_bytes(data['max_budget_bytes'])})")
    return 0


def cmd_thesis(args) -> int:
    import numpy as np
    from .dp import cpu
    from .dp.problem import Problem
    data, path = read_json_object(Path(args.cases))
    if data.get("format") != THESIS_FORMAT:
        raise CliError(f"{path}: format is {data.get('format')!r}, expected {THESIS_FORMAT!r}")
    out = []
    for case in data.get("cases", []):
        try:
            chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"],
                                      name=case.get("name", "thesis"))
            budgets = [int(b) for b in case["budgets"]]
        except KeyError as err:
            raise CliError(f"{path}: a case lacks field {err}") from None
        shifted = [b - chain.input_bytes for b in budgets]
        top = max([0] + shifted)
        problem = Problem.build(chain, 1, top, dtype=np.float64)
        curve, _ = cpu.run(problem, top)
        # Rounded to 1e-9: the inputs have a few decimals, so this only drops float64 summation noise
        # (23.637999999999998 for 23.638) that depends on the order of the additions.
        costs = [None if m < 0 or not np.isfinite(curve[m]) else round(float(curve[m]), THESIS_DECIMALS)
                 for m in shifted]
        out.append({"name": case.get("name"), "optimal_cost": costs})
    if args.json:
        _emit_json({"cases": out})
    else:
        for case, ref in zip(out, data.get("cases", [])):
            match = "matches" if case["optimal_cost"] == ref.get("optimal_cost") else "DIFFERS from"
            print(f"{case['name']}: {sum(c is not None for c in case['optimal_cost'])} feasible budgets, {match} the file")
    return 0


def cmd_demo(args) -> int:
    from .baselines import compare
    from .plot import curve_data, plot_curve
    from .solve import solve
    chain = load_chain(DEMO_PROFILE)
    peak = store_all_peak_bytes(chain)
    budget = int(DEMO_FRACTION * peak)
    print(f"== {DEMO_PROFILE}: {chain.summary()}")
    print(f"store-all (plain autograd) peak {format_bytes(peak)}; budget {int(100 * DEMO_FRACTION)} % of it: "
          f"{format_bytes(budget)}")
    print("\n== optimal plan")
    plan = solve(chain, budget, backend=args.backend)
    print(plan.summary())
    print("\n== comparison with the baselines")
    print(comparison_table(compare(chain, budget, plan=plan), budget))
    data = curve_data(chain, None, backend=args.backend)
    out = plot_curve(data, args.out)
    print(f"\n== trade-off curve written to {out}")
    return 0


def cmd_profiles(args) -> int:
    for name in bundled_profiles():
        chain = Chain.load(PROFILE_DIR / f"{name}.json")
        print(f"{name:28s} {chain.summary()}, store-all peak {format_bytes(store_all_peak_bytes(chain))}")
    return 0


# ---------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpusolve", description="Optimal activation checkpointing: solve, compare, plot.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def common(p, budget_required=True):
        p.add_argument("profile", metavar="PROFILE", help="profile path or bundled profile name (see `gpusolve profiles`)")
        if budget_required:
            p.add_argument("--budget", required=True,
                           help="memory budget beyond the input: bytes, KiB/MiB/GiB, or %% of the store-all peak")
        p.add_argument("--bucket", default=None, help="memory granularity of the DP (default budget/1024 on CPU)")
        p.add_argument("--backend", default="auto", choices=BACKENDS,
                       help="auto (exact for small chains, else CUDA if available, else cpu), cpu, cuda or exact")
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    common(sub.add_parser("solve", help="optimal plan at one budget"))
    common(sub.add_parser("compare", help="optimum and every baseline at one budget"))
    p = sub.add_parser("curve", help="trade-off curve (PNG)")
    common(p, budget_required=False)
    p.add_argument("--max-budget", default=None, help="largest budget (default: the store-all peak)")
    p.add_argument("--out", default="curve.png", help="PNG path (default curve.png)")
    p = sub.add_parser("thesis", help="solve every case of a thesis-reference/1 file")
    p.add_argument("cases", metavar="CASES.json")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("demo", help=f"bundled {DEMO_PROFILE}: plan, comparison and curve")
    p.add_argument("--out", default="gpusolve-demo-curve.png", help="PNG path (default ./gpusolve-demo-curve.png)")
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="auto, cpu, cuda or exact")
    sub.add_parser("profiles", help="list the bundled profiles")
    return parser


COMMANDS = {"solve": cmd_solve, "compare": cmd_compare, "curve": cmd_curve, "thesis": cmd_thesis,
            "demo": cmd_demo, "profiles": cmd_profiles}


def main(argv=None) -> int:
    """Run the CLI; returns (and, as a script entry point, exits with) the exit code."""
    try:
        args = build_parser().parse_args(argv)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            code = COMMANDS[args.command](args)
        seen = set()
        for w in caught:  # notes go to stderr, once each (on errors only the error line is printed)
            text = " ".join(str(w.message).split())
            if issubclass(w.category, FallbackWarning) and text not in seen:
                seen.add(text)
                print(f"gpusolve: note: {text}", file=sys.stderr)
        sys.stdout.flush()
        return code
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError, MemoryError,
            BackendUnavailableError, RecursionError) as err:
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"gpusolve: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpusolve: error: interrupted", file=sys.stderr)
        return 130


def _entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
