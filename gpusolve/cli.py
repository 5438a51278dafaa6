"""Command line: ``gpusolve solve|compare|curve|thesis|demo|profiles|join`` (see README)."""
from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import warnings
from pathlib import Path

from . import profiles
from .chain import THESIS_FORMAT, Chain, read_json_object
from .data import THESIS_CASES
from .dp.buckets import DEFAULT_BUCKETS, parse_bucket
from .errors import BackendUnavailableError, FallbackWarning, ProfileWarning
from .simulate import budget_bytes_of, store_all_peak_bytes
from .units import exact_bytes, format_bytes, parse_bytes, whole_bytes

PROFILE_DIR = profiles.DIRECTORY
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
    return profiles.names()


def load_chain(spec: str) -> Chain:
    """A chain from a path or the name of a bundled profile (with or without ``.json``): the rule of
    :func:`gpusolve.profiles.resolve`, which :meth:`Chain.load` applies."""
    return Chain.load(spec)


def version() -> str:
    """The installed package's version (its metadata), else ``gpusolve.__version__``."""
    from importlib import metadata
    try:
        return metadata.version("gpusolve")
    except metadata.PackageNotFoundError:
        from . import __version__
        return __version__


def _bytes(value: str, what: str) -> int:
    return parse_bytes(whole_bytes(value, what, percent=False), what)


def _budget(chain: Chain, value: str, what: str = "budget") -> int:
    """A budget in bytes; also accepts a percentage of the store-all peak, e.g. ``50%``
    (:func:`gpusolve.units.parse_budget`, the rule every entry point shares)."""
    return budget_bytes_of(chain, value, what)


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
        # the solve's phase timings stay in --json: in the table, the solve's seconds only
        detail = ", ".join(f"solve={sum(v.values()):.3f}s" if k == "timings" else f"{k}={v}"
                           for k, v in r["detail"].items() if k not in ("notes", "note", "min_feasible_bytes"))
        rows.append((r["name"],
                     "-" if r["time_ms"] is None else f"{r['time_ms']:.2f}",
                     "-" if r["overhead"] is None else f"{100 * r['overhead']:+.1f} %",
                     "-" if r["peak_bytes"] is None else format_bytes(r["peak_bytes"]),
                     "yes" if r["feasible"] else "no", detail))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    align = ["<", ">", ">", ">", "^", "<"]
    lines = [f"budget {exact_bytes(budget_bytes)}"]
    for n, row in enumerate(rows):
        lines.append("  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, align, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [r["detail"]["note"] for r in records if "note" in r["detail"]]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- commands
def offload_link(args):
    """The :class:`gpusolve.offload.Link` of ``--offload --bandwidth R [--h2d-bandwidth R] [--latency T]``,
    or None without ``--offload`` (the link options then are an error); the one check of the offload
    flags (and of ``--backend``, which the combined DP takes without "exact")."""
    from .offload.link import Link
    given = [name for name in ("bandwidth", "h2d_bandwidth", "latency") if getattr(args, name, None) is not None]
    if not getattr(args, "offload", False):
        if given:
            raise CliError(f"--{given[0].replace('_', '-')} describes the host link: add --offload (e.g. "
                           f"{offload_example(args)})")
        return None
    if args.backend == "exact":  # before any solve (compare runs the chain DP first)
        raise CliError("--offload: the combined DP has no exact backend; use --backend auto, cpu or cuda")
    if args.bandwidth is None:
        raise CliError(f"--offload needs --bandwidth (the device-host copy rate, e.g. 12GB/s; measure it with "
                       f"torch_exec.offload.measure_link()): {offload_example(args)}")
    try:
        return Link.parse(args.bandwidth, args.h2d_bandwidth, args.latency if args.latency is not None else 0.0)
    except ValueError as err:
        raise CliError(str(err)) from None


def cmd_solve(args) -> int:
    from .solve import solve
    chain = load_chain(args.profile)
    _budget(chain, args.budget)  # checked first; solved as given, so that a percentage's error names the least
    budget = args.budget
    bucket = parse_bucket(args.bucket)
    link = offload_link(args)
    if link is not None:
        from .offload.solver import solve_offload
        plan = solve_offload(chain, budget, link, bucket=bucket, backend=args.backend)
    else:
        plan = solve(chain, budget, bucket=bucket, backend=args.backend)
    if args.json:
        _emit_json(plan.to_dict() | _stage_counts(chain))
    else:
        print(f"{_chain_name(chain, args.profile)}: {chain.summary()}")
        print(plan_text(plan))
    return 0


def cmd_compare(args) -> int:
    from .baselines import compare
    from .solve import check_budget, naming_percent
    chain = load_chain(args.profile)
    budget = _budget(chain, args.budget)
    bucket = parse_bucket(args.bucket)
    link = offload_link(args)
    least = None
    if link is not None:  # the combined class runs below recompute only's minimum
        from .offload.solver import min_budget_bytes
        least = min_budget_bytes(chain, link)
    with naming_percent(args.budget, lambda: store_all_peak_bytes(chain)):  # compare() reports it in its rows
        low = check_budget(chain, budget, bucket, least)
    records = compare(chain, budget, bucket=bucket, backend=args.backend)
    if link is not None:  # the combined DP first, the paper's offload-only algorithms after the recompute rows
        from .offload.compare import offload_records
        extra = offload_records(chain, budget, link, bucket=bucket, backend=args.backend, recompute=False)
        records[0]["name"] = "recompute only (gpusolve)"
        records = extra[:1] + records + extra[1:]
    if args.json:
        _emit_json({"network": _chain_name(chain, args.profile), **_stage_counts(chain), "budget_bytes": budget,
                    "min_feasible_bytes": low, "records": records})
    else:
        print(f"{_chain_name(chain, args.profile)}: {chain.summary()}")
        print(comparison_table(records, budget))
    return 0


def cmd_curve(args) -> int:
    from .plot import curve_data, output_path, plot_curve
    output_path(args.out)  # an unknown image format fails before the solve
    chain = load_chain(args.profile)
    top = _budget(chain, args.max_budget, "max budget") if args.max_budget is not None else None
    bucket = parse_bucket(args.bucket)
    link = offload_link(args)
    if link is not None:
        from .offload.compare import offload_curve_data, plot_offload_curves
        data = offload_curve_data(chain, link, top, bucket=bucket, backend=args.backend)
        out = plot_offload_curves(data, args.out)
        summary = (f"wrote {out} (recompute only, recompute + offload, and offload only at "
                   f"{len(data['grid_bytes'])} budgets up to {format_bytes(data['max_budget_bytes'])})")
    else:
        data = curve_data(chain, top, bucket=bucket, backend=args.backend)
        out = plot_curve(data, args.out)
        summary = (f"wrote {out} ({len(data['optimal']['budget_bytes'])} optimal points, "
                   f"{len(data['grid_bytes'])} baseline budgets up to {format_bytes(data['max_budget_bytes'])})")
    if args.json:
        _emit_json(data | {"out": str(out)})
    else:
        print(summary)
    return 0


def cmd_thesis(args) -> int:
    import numpy as np
    from .dp import cpu
    from .dp.buckets import table_fits_host
    from .dp.problem import Problem
    data, path = read_json_object(Path(args.cases) if args.cases is not None else THESIS_CASES)
    if data.get("format") != THESIS_FORMAT:
        raise CliError(f"{path}: format is {data.get('format')!r}, expected {THESIS_FORMAT!r}")
    cases = data.get("cases", [])
    if not isinstance(cases, list) or not all(isinstance(case, dict) for case in cases):
        raise CliError(f"{path}: 'cases' must be a list of objects with fields alpha_f, alpha_b, beta_f, beta_b, "
                       f"budgets")
    out = []
    for number, case in enumerate(cases, 1):
        try:
            chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"],
                                      name=case.get("name", "thesis"))
            if not isinstance(case["budgets"], list):
                raise ValueError(f"budgets = {case['budgets']!r} is not a list")
            budgets = [_bytes(b, "budget") for b in case["budgets"]]
        except KeyError as err:
            raise CliError(f"{path}: case {number} lacks field {err}") from None
        except (TypeError, ValueError) as err:
            raise CliError(f"{path}: case {number} ({case.get('name', '?')}): {err}") from None
        shifted = [b - chain.input_bytes for b in budgets]
        top = max([0] + shifted)
        fits, need, allowed = table_fits_host(chain.n, top, tables=2.0)  # float64 values: twice the float32 table's
        if not fits:
            raise CliError(f"{path}: case {number} ({case.get('name', '?')}): budget {max(budgets)} needs a table of "
                           f"{format_bytes(need)} ({top + 1} columns: the thesis's units are one column each) but "
                           f"{format_bytes(allowed)} of host memory may be used; give budgets in the thesis's units")
        problem = Problem.build(chain, 1, top, dtype=np.float64)
        curve, _ = cpu.run(problem, top)
        # Rounded to 1e-9: the inputs have a few decimals, so this only drops float64 summation noise
        # (23.637999999999998 for 23.638) that depends on the order of the additions.
        costs = [None if m < 0 or not np.isfinite(curve[m]) else round(float(curve[m]), THESIS_DECIMALS)
                 for m in shifted]
        # the file's own optimal_cost, where it has one, is the reference: None where it has none
        matches = None if "optimal_cost" not in case else costs == case["optimal_cost"]
        out.append({"name": case.get("name"), "optimal_cost": costs, "matches": matches})
    if args.json:
        _emit_json({"cases": out})
    else:
        for case in out:
            match = {True: "matches", False: "DIFFERS from", None: "no reference in"}[case["matches"]]
            print(f"{case['name']}: {sum(c is not None for c in case['optimal_cost'])} feasible budgets, {match} the file")
    return 1 if any(case["matches"] is False for case in out) else 0  # a scripted check sees a mismatch


def cmd_demo(args) -> int:
    from .baselines import compare
    from .plot import curve_data, output_path, plot_curve
    from .solve import _pick_backend, solve
    output_path(args.out)  # an unknown image format fails before the solves
    if args.backend != "exact":  # (which needs no device)
        _pick_backend(args.backend, [])  # and a backend that cannot run, before anything is printed
    chain = load_chain(DEMO_PROFILE)
    peak = store_all_peak_bytes(chain)
    budget = int(DEMO_FRACTION * peak)
    print(f"== {DEMO_PROFILE}: {chain.summary()}")
    print(f"store-all (plain autograd) peak {format_bytes(peak)}; budget {int(100 * DEMO_FRACTION)} % of it: "
          f"{format_bytes(budget)}")
    print("\n== optimal plan")
    plan = solve(chain, budget, backend=args.backend)
    print(plan_text(plan))
    print("\n== comparison with the baselines")
    print(comparison_table(compare(chain, budget, plan=plan), budget))
    data = curve_data(chain, None, backend=args.backend)
    out = plot_curve(data, args.out)
    print(f"\n== trade-off curve written to {out}")
    return 0


def _stage_counts(chain: Chain) -> dict:
    """Both stage counts for JSON: ``stages`` (after merging in-place stages into the stage before,
    what the solver sees) and ``profiled_stages`` (the profile's own)."""
    return {"stages": chain.n, "profiled_stages": chain.profiled_stages}


def profile_record(name: str) -> dict:
    """What ``gpusolve profiles --json`` says about the bundled profile ``name``."""
    chain = Chain.load(name)
    prov = chain.provenance
    return {"name": name, **_stage_counts(chain), "merged_in_place": prov.get("merged_in_place"),
            "merged_unsaved": prov.get("merged_unsaved"), "network": prov.get("network"), "args": prov.get("args"),
            "device": prov.get("device"), "torch": prov.get("torch"), "dtype": prov.get("dtype"),
            "input_bytes": chain.input_bytes, "forward_ms": float(chain.t_fwd.sum()),
            "backward_ms": float(chain.t_bwd.sum()), "tape_bytes": int(chain.tape_bytes.sum()),
            "store_all_peak_bytes": store_all_peak_bytes(chain),
            "measured_store_all_peak_bytes": measured_store_all_peak(chain), "path": str(profiles.resolve(name))}


def measured_store_all_peak(chain: Chain) -> int | None:
    """The profile's separately measured store-all peak (``reference``), or None."""
    value = chain.provenance.get("reference", {}).get("store_all_peak_bytes")
    return int(value) if value else None


def cmd_profiles(args) -> int:
    if args.json:
        _emit_json({"profiles": [profile_record(name) for name in bundled_profiles()]})
        return 0
    over = False
    for name in bundled_profiles():
        chain = Chain.load(name)
        model, measured = store_all_peak_bytes(chain), measured_store_all_peak(chain)
        versus = f" (measured {format_bytes(measured)}, model {100 * (model / measured - 1):+.1f} %)" if measured else ""
        over |= bool(measured) and model > 1.05 * measured
        print(f"{name:22s} {chain.summary()}, store-all peak {format_bytes(model)}{versus}")
    if over:
        print("a model well above the measured peak counts tensors that no backward saves as held: a profile "
              "without saved-bytes fields is read conservatively (bench/results/densenet_copy.md)")
    return 0


# ---------------------------------------------------------------------------- join
JOIN_METHODS = ("optimal", "equiv-chain")
JOIN_MAX_SLOT_COUNTS = 100_000


def parse_join_lengths(text: str) -> list[int]:
    """``--lengths 10,50``: the branch lengths (forward steps per branch), integers >= 0."""
    items = [t.strip() for t in str(text).split(",")]
    if not items or any(not t for t in items):
        raise CliError(f"--lengths {text!r}: expected branch lengths separated by commas, e.g. --lengths 10,50")
    out = []
    for t in items:
        try:
            n = int(t)
        except ValueError:
            raise CliError(f"--lengths {text}: {t!r} is not an integer; a length counts a branch's forward steps, "
                           "e.g. --lengths 10,50") from None
        if n < 0:
            raise CliError(f"--lengths {text}: branch length {n} is negative; lengths are integers >= 0")
        out.append(n)
    return out


def parse_join_slots(text: str) -> list[int]:
    """``--slots 5,6,31`` or ``--slots 5..62`` (inclusive; items may mix: ``5..9,20``): slot counts >= 1."""
    hint = "expected slot counts like 5,6,31 or a range like 5..62"
    out = []
    for item in str(text).split(","):
        item = item.strip()
        low, sep, high = item.partition("..")
        try:
            bounds = (int(low), int(high)) if sep else (int(item), int(item))
        except ValueError:
            raise CliError(f"--slots {text}: {item!r} is malformed; {hint}") from None
        if bounds[0] > bounds[1]:
            raise CliError(f"--slots {text}: the range {item} is empty ({bounds[0]} > {bounds[1]}); write low..high")
        if bounds[0] < 1:
            raise CliError(f"--slots {text}: slot count {bounds[0]} is below 1; memory holds at least one value")
        if len(out) + bounds[1] - bounds[0] + 1 > JOIN_MAX_SLOT_COUNTS:
            raise CliError(f"--slots {text}: more than {JOIN_MAX_SLOT_COUNTS} slot counts; ask for a shorter range "
                           "(counts above the store-all count all give the same makespan)")
        out += range(bounds[0], bounds[1] + 1)
    return out


def _join_number(x: float):
    """JSON/table form of a makespan: None when infeasible, an int when integral."""
    import math
    if not math.isfinite(x):
        return None
    return int(x) if float(x).is_integer() else float(x)


def offload_example(args) -> str:
    """The user's own command with the offload flags it needs (``solve``/``compare`` keep their budget; ``curve``
    takes none)."""
    import shlex
    budget, h2d = getattr(args, "budget", None), getattr(args, "h2d_bandwidth", None)
    return shlex.join(["gpusolve", args.command, str(args.profile)] + (["--budget", budget] if budget else [])
                      + ["--offload", "--bandwidth", args.bandwidth or "12GB/s"]
                      + (["--h2d-bandwidth", h2d] if h2d else [])
                      + ["--latency", args.latency if args.latency is not None else "0.01ms"])
JOIN_EXAMPLE = "e.g. gpusolve join resnet50_b128 resnet50_b128 --budget 50%"


def parse_turn_ms(value: str) -> float:
    """``--turn-ms``: the turn's time (its forward and backward), a finite number of ms >= 0."""
    import math
    try:
        ms = float(value)
    except (TypeError, ValueError):
        raise CliError(f"--turn-ms {value!r}: expected a number of milliseconds >= 0, e.g. --turn-ms 0.5") from None
    if not math.isfinite(ms) or ms < 0:
        raise CliError(f"--turn-ms {value}: the turn's time must be a finite number of ms >= 0, e.g. --turn-ms 0.5")
    return ms


def _join_turn(args):
    """The turn of ``gpusolve join``: ``--turn-ms`` (t_fwd + t_bwd) and ``--turn-bytes`` (bytes the head
    holds beyond the branch outputs and their gradients: the spec's turn_extra, ``Turn.bwd_extra``)."""
    from .join.network import Turn
    ms = parse_turn_ms(args.turn_ms) if args.turn_ms is not None else 0.0
    extra = _bytes(args.turn_bytes, "--turn-bytes") if args.turn_bytes is not None else 0
    return Turn(t_fwd=ms, t_bwd=0.0, bwd_extra=extra, name="turn")


def _join_records(plan, net) -> list[dict]:
    """The optimum and :func:`gpusolve.join.baselines.compare_join` at the plan's budget and bucket, as
    :func:`comparison_table` records (overhead vs store-all time)."""
    from .join.baselines import compare_join
    base = plan.store_all_time_ms

    def overhead(t):
        return float(t / base - 1.0) if base else 0.0
    records = [{"name": "optimal (join DP)", "time_ms": plan.predicted_time_ms, "peak_bytes": plan.predicted_peak_bytes,
                "overhead": overhead(plan.predicted_time_ms), "feasible": True,
                "detail": {"bucket_bytes": plan.bucket_bytes, "buckets": plan.buckets,
                           "decided_by": plan.decided_by}}]
    for b in compare_join(net, plan.budget_bytes, plan.bucket_bytes):
        fits = bool(b.feasible)
        # a baseline over the budget still has its time and peak (as the chain comparison shows store-all's)
        known = b.time_ms is not None and math.isfinite(b.time_ms) and b.peak_bytes is not None
        records.append({"name": b.name, "time_ms": float(b.time_ms) if known else None,
                        "peak_bytes": int(b.peak_bytes) if known else None,
                        "overhead": overhead(b.time_ms) if known else None, "feasible": fits,
                        "detail": {"how": b.detail} if b.detail else {}})
    faster = [r["name"] for r in records[1:] if r["feasible"] and r["time_ms"] < plan.predicted_time_ms * (1 - 1e-9)]
    if faster:  # never expected: solve_join takes the baselines as candidates (Note [Join candidates])
        records[0]["detail"]["note"] = f"{', '.join(faster)} beat the plan"
    return records


def cmd_join_profiles(args) -> int:
    """``gpusolve join PROFILE PROFILE [...] --budget B``: the byte-model join DP on branch profiles."""
    from .join.bytesim import store_all_join_peak_bytes
    from .join.solve import solve_join
    paper_only = [o for o, v in (("--lengths", args.lengths), ("--slots", args.slots), ("--uf", args.uf),
                                 ("--ub", args.ub), ("--ut", args.ut), ("--method", args.method)) if v is not None]
    if paper_only:  # taken and ignored before (a review)
        raise CliError(f"gpusolve join: {', '.join(paper_only)} {'belong' if len(paper_only) > 1 else 'belongs'} to "
                       f"the paper's slot model: add --paper (for real networks give branch profiles instead, "
                       f"{JOIN_EXAMPLE})")
    if len(args.profiles) < 2:
        got = f"got {len(args.profiles)}" + (f" ({args.profiles[0]})" if args.profiles else "")
        raise CliError(f"gpusolve join needs at least 2 branch profiles (bundled names or JSON paths), {got}; "
                       f"{JOIN_EXAMPLE} (a single chain: gpusolve solve; the paper's slot model: --paper)")
    if args.budget is None:
        raise CliError(f"gpusolve join needs --budget (bytes, KiB/MiB/GiB, or % of the join's store-all peak), "
                       f"{JOIN_EXAMPLE}")
    turn = _join_turn(args)
    branches = [load_chain(spec) for spec in args.profiles]
    bucket = parse_bucket(args.bucket)
    plan = solve_join(branches, turn, args.budget, bucket=bucket, backend=args.backend)
    net = plan.net
    names = [_chain_name(c, spec) for c, spec in zip(branches, args.profiles, strict=True)]
    records = _join_records(plan, net) if args.compare else None
    if args.json:
        out = {"branches": [{"profile": spec, "name": name, **_stage_counts(c)}
                            for spec, name, c in zip(args.profiles, names, branches, strict=True)],
               "turn": {"time_ms": turn.time_ms, "bytes": turn.bwd_extra},
               "store_all_peak_bytes": store_all_join_peak_bytes(net), "plan": plan.to_dict()}
        if records is not None:
            out["records"] = records
        _emit_json(out)
        return 0
    print(f"join of {net.k} branches at one turn ({turn.time_ms:g} ms, {format_bytes(turn.bwd_extra)} beyond the "
          f"output gradients):")
    for beta, (name, c) in enumerate(zip(names, branches, strict=True)):
        print(f"  branch {beta}: {name}: {c.summary()}")
    from .solve import outside_class_candidates
    where = ("" if outside_class_candidates(net.branches) else
             " (outside the thesis model's class, which prices it wrongly: Note [The thesis model's class])")
    print(f"store-all (plain autograd) peak {format_bytes(store_all_join_peak_bytes(net))}, "
          f"step {plan.store_all_time_ms:.2f} ms{where}; join DP minimum {format_bytes(plan.min_feasible_bytes)}")
    print(plan_text(plan))
    if records is not None:
        print(comparison_table(records, plan.budget_bytes))
    return 0


def cmd_join(args) -> int:
    """``gpusolve join PROFILE PROFILE [...] --budget B``: the byte-model join DP (gpusolve.join.solve) on
    branch profiles; ``gpusolve join --paper ...``: the seed paper's slot model (gpusolve.join.paper)."""
    if not args.paper:
        return cmd_join_profiles(args)
    byte_options = [o for o, v in (("PROFILE", args.profiles), ("--budget", args.budget), ("--bucket", args.bucket),
                                   ("--turn-ms", args.turn_ms), ("--turn-bytes", args.turn_bytes),
                                   ("--compare", args.compare)) if v]
    if byte_options:
        one = len(byte_options) == 1
        raise CliError(f"gpusolve join --paper: {', '.join(byte_options)} {'belongs' if one else 'belong'} to the "
                       f"byte-model join on branch profiles; drop --paper for it, or {'it' if one else 'them'} for the "
                       f"slot model")
    from .join import paper
    if args.lengths is None or args.slots is None:
        missing = " and ".join(o for o, v in (("--lengths", args.lengths), ("--slots", args.slots)) if v is None)
        raise CliError(f"gpusolve join --paper needs {missing}, e.g. --lengths 10,50 --slots 5..62")
    lengths = parse_join_lengths(args.lengths)
    slots = parse_join_slots(args.slots)
    costs = {}
    for name in ("uf", "ub", "ut"):
        value = 1.0 if getattr(args, name) is None else getattr(args, name)
        if not (value >= 0 and value != float("inf")):
            raise CliError(f"--{name} {value}: costs must be finite and >= 0 (the paper's u_f, u_b, u_t)")
        costs[name] = value
    method = args.method or "optimal"
    dp = paper.solver(method, lengths, max(slots), **costs)
    curve = [{"slots": c, "makespan": _join_number(dp.makespan(c))} for c in slots]
    if args.json:
        _emit_json({"lengths": lengths, "method": method, "curve": curve})
        return 0
    bound = paper.lower_bound(lengths, **costs)
    print(f"join, paper slot model (RR-9273): lengths {','.join(map(str, lengths))} (k = {len(lengths)}), "
          f"u_f = {costs['uf']:g}, u_b = {costs['ub']:g}, u_t = {costs['ut']:g}, method {method}")
    print(f"minimum slots {paper.c_min(lengths)} (Lemma 4), store-all {paper.store_all_slots(lengths)} slots, "
          f"lower bound {bound:g}")
    rows = [("slots", "makespan", "/ lower bound")]
    for point in curve:
        x = point["makespan"]
        rows.append((str(point["slots"]), "infeasible" if x is None else f"{x:g}",
                     "-" if x is None or bound == 0 else f"{x / bound:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for n, row in enumerate(rows):
        print("  ".join(f"{cell:>{w}}" for cell, w in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    return 0


# ---------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpusolve", description="Optimal activation checkpointing: solve, compare, plot.",
                     epilog="`gpusolve COMMAND --help` describes a command; e.g. gpusolve solve resnet50_b128 "
                            "--budget 5GiB")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def common(p, budget_required=True):
        p.add_argument("profile", metavar="PROFILE", help="profile path or bundled profile name (see `gpusolve profiles`)")
        if budget_required:
            p.add_argument("--budget", required=True,
                           help="memory budget beyond the input: bytes, KiB/MiB/GiB, or %% of the store-all peak")
        p.add_argument("--bucket", default=None,
                       help=f"memory granularity of the DP (default: the budget over {DEFAULT_BUCKETS['cpu']} buckets "
                            f"on the CPU, {DEFAULT_BUCKETS['cuda']} on CUDA; {DEFAULT_BUCKETS['cpu']} on both with "
                            f"--offload)")
        p.add_argument("--backend", default="auto", choices=BACKENDS,
                       help="auto (exact for small chains without --offload, else CUDA if available, else cpu), cpu, "
                            "cuda or exact (not with --offload)")
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    def offload(p):
        p.add_argument("--offload", action="store_true",
                       help="also move checkpoints to host memory while later stages run (the combined recompute + "
                            "offload DP); needs --bandwidth")
        p.add_argument("--bandwidth", default=None, metavar="RATE",
                       help="device-host copy rate with --offload, e.g. 12GB/s (both directions unless --h2d-bandwidth)")
        p.add_argument("--h2d-bandwidth", default=None, metavar="RATE", help="host-to-device rate, if it differs")
        p.add_argument("--latency", default=None, metavar="TIME", help="per-transfer latency, e.g. 0.01ms (default 0)")

    p = sub.add_parser("solve", help="optimal plan at one budget")
    common(p)
    offload(p)
    p = sub.add_parser("compare", help="optimum and every baseline at one budget")
    common(p)
    offload(p)
    p = sub.add_parser("curve", help="trade-off curve (PNG, PDF, SVG, ...)")
    common(p, budget_required=False)
    offload(p)
    p.add_argument("--max-budget", default=None,
                   help="largest budget (default: the store-all peak; a thesis-model chain's fastest plan's)")
    p.add_argument("--out", default="curve.png", help=f"image path, format from its extension ({OUT_FORMATS}; "
                                                      "default curve.png)")
    p = sub.add_parser("thesis", help="solve every case of a thesis-reference/1 file (default: the bundled one)")
    p.add_argument("cases", metavar="CASES.json", nargs="?", default=None,
                   help="a thesis-reference/1 file (default: the thesis cases bundled with gpusolve)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p = sub.add_parser("demo", help=f"bundled {DEMO_PROFILE}: plan, comparison and curve")
    p.add_argument("--out", default="gpusolve-demo-curve.png",
                   help=f"image path, format from its extension ({OUT_FORMATS}; default ./gpusolve-demo-curve.png)")
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="auto, cpu, cuda or exact")
    p = sub.add_parser("profiles", help="list the bundled profiles")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p = sub.add_parser("join", help="join networks (k branches into one loss): branch profiles, or --paper's slot model",
                       epilog="e.g. gpusolve join resnet50_b128 resnet50_b128 --budget 50% --compare; "
                              "gpusolve join --paper --lengths 10,50 --slots 5..62")
    p.add_argument("profiles", metavar="PROFILE", nargs="*",
                   help="branch profiles (>= 2; paths or bundled names): each branch is a chain, all meet at the turn")
    p.add_argument("--budget", default=None,
                   help="memory budget beyond the branch inputs: bytes, KiB/MiB/GiB, or %% of the join's store-all peak")
    p.add_argument("--bucket", default=None, help="memory granularity of the join DP (default budget/1024)")
    from .join.solve import JOIN_BACKENDS
    p.add_argument("--backend", default="auto", choices=JOIN_BACKENDS, help="auto, cpu or cuda (the join DP)")
    p.add_argument("--turn-ms", default=None,
                   help="time of the turn (the loss head's forward and backward), ms (default 0)")
    p.add_argument("--turn-bytes", default=None,
                   help="bytes the turn holds beyond the branch outputs and their gradients (default 0)")
    p.add_argument("--compare", action="store_true", help="also the baselines: store-all, split budget, EQUIV-CHAIN")
    p.add_argument("--paper", action="store_true",
                   help="the paper's model (Beaumont et al., RR-9273): unit-size slots, costs u_f, u_b, u_t")
    p.add_argument("--lengths", default=None, help="branch lengths (forward steps), comma separated, e.g. 10,50")
    p.add_argument("--slots", default=None, help="memory sizes in slots: a list 5,6,31 or a range 5..62")
    p.add_argument("--uf", type=float, default=None, help="with --paper: cost of a forward step (default 1)")
    p.add_argument("--ub", type=float, default=None, help="with --paper: cost of a backward step (default 1)")
    p.add_argument("--ut", type=float, default=None,
                   help="with --paper: cost of the turn (loss and its gradient; default 1)")
    p.add_argument("--method", default=None, choices=JOIN_METHODS,
                   help="with --paper: optimal (Theorem 3's DP; the default) or equiv-chain (the paper's baseline, "
                        "balanced joins only)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return parser


COMMANDS = {"solve": cmd_solve, "compare": cmd_compare, "curve": cmd_curve, "thesis": cmd_thesis,
            "demo": cmd_demo, "profiles": cmd_profiles, "join": cmd_join}
# Options whose value may start with '-' (a negative size, which their parsers then reject clearly).
# (join's lists and costs too: `--lengths -1,5` reaches parse_join_lengths, which names the value.)
SIZE_OPTIONS = ("--budget", "--bucket", "--max-budget", "--lengths", "--slots", "--uf", "--ub", "--ut", "--turn-ms",
                "--turn-bytes", "--bandwidth", "--h2d-bandwidth", "--latency")
OUT_FORMATS = "png, pdf, svg, ..."


def attach_dash_values(argv: list, options=SIZE_OPTIONS) -> list:
    """``--budget -5GiB`` as ``--budget=-5GiB``: argparse reads a value starting with '-' that is not a
    plain number as an option ("expected one argument"); attached, the value reaches the size parser,
    whose error names it and the fix."""
    out, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        if str(arg) in options and rest and str(rest[0])[:2].rstrip(".0123456789") == "-":
            arg = f"{arg}={rest.pop(0)}"
        out.append(arg)
    return out


# Warnings printed as notes on stderr: a backend fallback, and an estimate read into a profile (a missing
# backward time; before, the command line dropped it, the Python API warned).
NOTED_WARNINGS = (FallbackWarning, ProfileWarning)
_caught: list = []  # the warnings main() records while its command runs (its catch_warnings log)


def _noted(text: str) -> bool:
    """Whether ``text`` is a note main() prints on stderr (a warning of :data:`NOTED_WARNINGS` caught so far)."""
    text = " ".join(text.split())
    return any(issubclass(w.category, NOTED_WARNINGS) and " ".join(str(w.message).split()) == text for w in _caught)


def plan_text(plan) -> str:
    """``plan.summary()`` for stdout: without the notes that go to stderr as warnings (the CPU fallback was
    printed twice, once on stdout: a review)."""
    shown = copy.copy(plan)
    shown.notes = [n for n in plan.notes if not _noted(n)]
    return shown.summary()


def main(argv=None) -> int:
    """Run the CLI; returns (and, as a script entry point, exits with) the exit code."""
    global _caught
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if not argv:  # the commands, not one line about a missing one
        parser.print_help(sys.stderr)
        return 2
    try:
        try:
            args = parser.parse_args(attach_dash_values(argv))
        except SystemExit as done:  # --help, --version: printed, exit 0
            return done.code if isinstance(done.code, int) else 0
        with warnings.catch_warnings(record=True) as caught:
            for category in NOTED_WARNINGS:
                warnings.simplefilter("always", category)
            _caught = caught  # (plan_text reads it)
            code = COMMANDS[args.command](args)
        seen = set()
        for w in caught:  # notes go to stderr, once each (on errors only the error line is printed)
            text = " ".join(str(w.message).split())
            if issubclass(w.category, NOTED_WARNINGS) and text not in seen:
                seen.add(text)
                print(f"gpusolve: note: {text}", file=sys.stderr)
        sys.stdout.flush()
        return code
    except (ValueError, OSError, MemoryError, BackendUnavailableError, RecursionError) as err:
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
