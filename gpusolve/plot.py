"""The time/memory trade-off curve: the optimum for every budget against the baselines (PNG)."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from .baselines import baseline_curves, fastest_plan_peak_bytes
from .chain import Chain
from .dp.minpeak import min_feasible_bytes
from .errors import InfeasibleBudgetError
from .simulate import budget_bytes_of, store_all_time_ms
from .units import binary_unit

GRID_POINTS = 24
STYLES = {
    "checkpoint_sequential (best k)": dict(color="tab:orange", marker="s"),
    "chen2016 greedy": dict(color="tab:green", marker="^"),
    "thesis uniform-cost": dict(color="tab:purple", marker="D"),
    "bisection (budget-aware)": dict(color="tab:brown", marker="v"),
    "store-all": dict(color="black", marker="*"),
    "checkpoint_sequential (sqrt N)": dict(color="tab:red", marker="P"),
    "bisection (fixed)": dict(color="tab:gray", marker="X"),
}


def curve_data(chain: Chain, max_budget=None, bucket=None, backend: str = "auto", points: int = GRID_POINTS) -> dict:
    """Numbers behind the plot: the optimal curve and the baselines at ``points`` budgets from the
    minimum feasible budget to ``max_budget`` (default: the store-all peak; :func:`curve_budgets`). Bytes and ms
    throughout.

    The optimal curve is the fastest plan gpusolve has for each budget: the table's optimum at every
    bucket (one table, filled at ``max_budget``) and, at each of the ``points`` budgets, the plan made
    there from that table with the exact-byte candidates of ``solve()`` (Note [Exact candidates] in
    gpusolve/solve.py: the store-all plan at the store-all peak, the least-peak plan at the minimum),
    a plan holding for every larger budget too. The table alone is optimal for the rounded sizes only:
    baselines, evaluated in exact bytes, were drawn below it (a review, 2026-11-27). The exact
    backend's curve is exact already."""
    from .solve import solve, solve_budgets, solves_exactly

    low = min_feasible_bytes(chain)
    top, grid = curve_budgets(chain, max_budget, low, points)
    if solves_exactly(backend, bucket, chain.n):
        tables = plans = [solve(chain, top, bucket=bucket, backend=backend)]
    else:
        tables, plans = ladder_plans(lambda at, below: solve_budgets(chain, at, below, bucket=bucket, backend=backend),
                                     top, grid, bucket is None)
    plan = tables[0]
    optimal = fastest_line(top, [t.curve for t in tables], plans)
    return {"name": chain.provenance.get("network") or chain.provenance.get("source") or "chain",
            "stages": chain.n, "profiled_stages": chain.profiled_stages, "max_budget_bytes": top, "min_feasible_bytes": low,
            "store_all_time_ms": store_all_time_ms(chain), "backend": plan.backend, "buckets": plan.buckets,
            "optimal": optimal, "grid_bytes": grid, "baselines": baseline_curves(chain, grid)}


LADDER = 4
"""A curve's plan at a budget comes from a table filled at most this many times above it (Note [A ladder of
tables])."""

# Note [A ladder of tables]
#     A curve's plans at its grid budgets came from ONE table, filled at the top budget: its bucket (the top over
#     1024) is coarse for the low budgets, where the rounded sizes fit few plans or none. On
#     densenet121_fine_b32 (top 11x its least budget: 93 buckets there) the line was at 205.81 ms (+218 %) at
#     the least budget, where solve() there gives 95.18 ms (a review, 2026-11-28:
#     bench/repros/rv6_docs_curve_above_solve_at_minimum.py). So the grid is planned from a ladder of tables:
#     the top's, and for the budgets more than LADDER times below it one filled at the largest of them, and so
#     on; each budget then has at least 1024 / LADDER of its own default buckets. A chain whose least budget is
#     within LADDER of its store-all peak fills one table, as before (vgg16_b64, 1.2x); resnet50_b128 (4.3x),
#     densenet121_b64 (7.6x) and densenet121_fine_b32 (11x) fill two, and the latter's least budget is solved
#     alone (below): 2.5x the time of one table on the CPU (bench/results/curve_cost_cpu.md).
#     A plan the rounded sizes still fit nothing for (the least-peak fallback) is solved alone, at its own
#     bucket. A bucket the user gives is every table's: one table.


def ladder_plans(solve_many, top: int, grid: list, ladder: bool = True) -> tuple[list, list]:
    """The plans at ``top`` and at each budget of ``grid`` (bytes, at most ``top``) from a ladder of tables
    (Note [A ladder of tables]); ``solve_many(at, below) -> (plan at at, [plan at each of below])`` fills one
    table at ``at`` (:func:`gpusolve.solve.solve_budgets`, :func:`gpusolve.offload.solver.solve_offload_budgets`).
    Returns (each table's own plan, the top's first; every plan). ``ladder=False`` (a user's bucket): one table."""
    tables, plans = [], []
    at, pending = top, sorted({int(b) for b in grid if b < top})
    while True:
        group = [b for b in pending if not ladder or b * LADDER >= at]
        head, below = solve_many(at, group)
        tables.append(head)
        plans += [head, *below]
        pending = [b for b in pending if b not in group]
        if not pending:
            break
        at = pending.pop()  # the largest left fills the next table
    for k, p in enumerate(plans):  # the rounded sizes fit no plan from its table: alone, at its own bucket
        if ladder and p.budget_bytes < top and not np.isfinite(p.curve.time_ms).any():
            plans[k] = alone = solve_many(p.budget_bytes, [])[0]
            tables.append(alone)
    return tables, plans


def curve_budgets(chain: Chain, max_budget, low: int, points: int, what: str = "") -> tuple[int, list[int]]:
    """(top, grid) of a curve from the least budget ``low`` to ``max_budget`` (default: the peak of the fastest
    plan, :func:`gpusolve.baselines.fastest_plan_peak_bytes`: the store-all peak, or in the thesis's model the
    every-stage-checkpointed plan's, which the store-all peak was below: a review, bench/repros/
    rv10_solver_thesis_curve_default_top.py): the top in bytes and ``points`` budgets from ``low`` to it (fewer
    where they coincide). A top below ``low`` raises, naming both (``what``: the class of plans ``low`` is the
    least of, e.g. " with offloading")."""
    if max_budget is None:
        return _grid(max(fastest_plan_peak_bytes(chain), low), low, points)
    top = budget_bytes_of(chain, max_budget, "max budget")
    if top < low:
        default = "the store-all peak" if chain.multi_tape else "the peak of the fastest plan"
        raise InfeasibleBudgetError(f"max budget {top} B is below the chain's least feasible budget {low} B{what}: "
                                    f"raise it (--max-budget), or leave it out for {default}", low)
    return _grid(top, low, points)


def _grid(top: int, low: int, points: int) -> tuple[int, list[int]]:
    return top, np.unique(np.linspace(low, top, points).astype(np.int64)).tolist()


def axis_unit(top_bytes) -> tuple[float, str]:
    """(bytes per unit, unit name) for an axis of sizes up to ``top_bytes``, in the unit :func:`format_bytes`
    shows ``top_bytes`` in (:func:`gpusolve.units.binary_unit`; a 16 MiB profile's axis read 0.009 to 0.016
    GiB: a review)."""
    name, scale = binary_unit(top_bytes)
    return scale, name


def fastest_line(top: int, curves=(), plans=()) -> dict:
    """The fastest known time at every budget up to ``top``, as a step line ``{budget_bytes, time_ms}``, from
    ``curves`` (a table's :class:`gpusolve.solve.Curve`, its feasible points, or another such line) and
    ``plans`` (the feasible ones, each at its ``budget_bytes``): every point holds for every larger budget
    too. Empty where none is feasible."""
    budgets: list = []
    times: list = []
    for curve in curves:
        if isinstance(curve, dict):
            budgets += curve["budget_bytes"]
            times += curve["time_ms"]
        else:
            curve = curve.feasible()
            budgets += curve.budget_bytes.tolist()
            times += curve.time_ms.tolist()
    for plan in plans:
        if plan.feasible:
            budgets.append(plan.budget_bytes)
            times.append(plan.predicted_time_ms)
    line: dict = {"budget_bytes": [], "time_ms": []}
    for b, t in sorted(zip(budgets, times)):  # the fastest so far
        if not line["time_ms"] or t < line["time_ms"][-1]:
            if line["budget_bytes"] and line["budget_bytes"][-1] == b:
                line["time_ms"][-1] = float(t)
            else:
                line["budget_bytes"].append(int(b))
                line["time_ms"].append(float(t))
    if line["budget_bytes"] and line["budget_bytes"][-1] < top:  # the line runs on to the largest budget
        line["budget_bytes"].append(int(top))
        line["time_ms"].append(line["time_ms"][-1])
    return line


def output_path(out) -> Path:
    """``out`` as the path :func:`plot_curve` writes: its extension names the format (``.png``,
    ``.pdf``, ``.svg``, ... : whatever matplotlib writes); none means PNG (``.png`` is appended).
    Raises ``ValueError`` for an extension matplotlib cannot write."""
    from matplotlib.backend_bases import FigureCanvasBase

    given = str(out)
    out = Path(out)
    if given.endswith(("/", os.sep)) or out.is_dir():
        raise ValueError(f"--out {given}: is a directory; give a file name in it, e.g. {out / 'curve.png'}")
    folder = next((p for p in out.parents if p.exists()), Path("."))  # the nearest folder there is
    if not folder.is_dir():
        raise ValueError(f"--out {given}: {folder} is a file, not a folder; give another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"--out {given}: cannot write in {folder}; give a path in a folder you may write to")
    suffix = out.suffix.lower().lstrip(".")
    if not suffix:
        return out.with_name(out.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise ValueError(f"--out {out}: cannot write a '.{suffix}' image; use one of "
                         f"{', '.join('.' + f for f in sorted(formats))} (the extension names the format)")
    return out


def save_figure(fig, out: Path, **savefig) -> Path:
    """Write matplotlib figure ``fig`` to ``out`` (a path from :func:`output_path`; the format from its
    extension) and close it. The image is written beside ``out`` and renamed onto it, so a failed write
    (a full disk) leaves no truncated file, and ``out`` is untouched; the failure is an ``OSError``
    naming the path. Missing folders on the way are made, and removed again when the write fails."""
    import matplotlib.pyplot as plt
    made = [p for p in out.parents if not p.exists()]  # deepest first
    temporary = out.with_name(f".{out.name}.{os.getpid()}.partial")  # made as any file is (the umask's mode)
    written = False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(temporary, format=out.suffix.lstrip(".").lower(), **savefig)
        os.replace(temporary, out)
        written = True
    except Exception as err:  # OSError, or what a writer raises on a short write (zlib.error for PDF)
        raise OSError(f"could not write {out}: {' '.join(str(err).split()) or type(err).__name__}") from err
    finally:
        plt.close(fig)
        if os.path.exists(temporary):
            os.unlink(temporary)
        if not written:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
    return out


def _limits(values, pad: float = 0.04) -> tuple[float, float]:
    """(low, high) around finite ``values`` with a margin of ``pad`` of their span (or of their size)."""
    finite = [float(v) for v in values if np.isfinite(v)]
    low, high = min(finite), max(finite)
    margin = pad * (high - low) if high > low else max(abs(high) * pad, 1e-3)
    return low - margin, high + margin


def plot_curve(data: dict, out) -> Path:
    """Write the trade-off plot of :func:`curve_data` to ``out`` (matplotlib Agg) in the format its
    extension names (:func:`output_path`); returns the path written."""
    out = output_path(out)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = data["store_all_time_ms"]
    scale, unit = axis_unit(data["max_budget_bytes"])
    fig, ax = plt.subplots(figsize=(9, 6.5), dpi=110)
    opt_b = np.asarray(data["optimal"]["budget_bytes"], dtype=np.float64) / scale
    opt_t = np.asarray(data["optimal"]["time_ms"], dtype=np.float64)
    ax.step(opt_b, opt_t, where="post", color="tab:blue", linewidth=2.2, label="optimal (gpusolve)", zorder=5)
    grid = np.asarray(data["grid_bytes"], dtype=np.float64) / scale
    baselines = dict(data["baselines"])
    points = baselines.pop("points", {})
    shown = [float(v) for v in opt_t if np.isfinite(v)]
    # x range: the data (optimal curve, baseline budgets, fixed policies, the minimum) and a margin
    xs = [*opt_b.tolist(), *grid.tolist(), data["min_feasible_bytes"] / scale, data["max_budget_bytes"] / scale]
    for name, times in baselines.items():
        t = np.array([np.nan if v is None else v for v in times], dtype=np.float64)
        if np.all(np.isnan(t)):
            continue
        style = STYLES.get(name, {})
        ax.plot(grid, t, linestyle="--", linewidth=1.2, markersize=4, label=name, **style)
        shown += [float(v) for v in t if np.isfinite(v)]
    cap = base * 2.5  # beyond +150 % a point is drawn at the top edge with its value
    for name, (peak, time_ms) in points.items():
        style = STYLES.get(name, {})
        y = min(time_ms, cap)
        ax.plot([peak / scale], [y], linestyle="none", markersize=10, label=f"{name}: one fixed policy", **style)
        if time_ms > cap:
            ax.annotate(f"{time_ms:.0f} ms", (peak / scale, y), textcoords="offset points", xytext=(8, -4), fontsize=8)
        shown.append(y)
        xs.append(peak / scale)
    ax.axvline(data["min_feasible_bytes"] / scale, color="tab:red", linewidth=0.8, linestyle=":",
               label="minimum feasible budget")
    ax.set_xlabel(f"memory budget beyond the input ({unit})")
    ax.set_ylabel("predicted training step (ms)")
    profiled = data.get("profiled_stages", data["stages"])
    stages = f"{data['stages']} stages" + (f" from {profiled} profiled" if profiled != data["stages"] else "")
    ax.set_title(f"{data['name']}: step time vs activation memory ({stages}, store-all {base:.1f} ms)")
    ax.grid(True, alpha=0.3)
    secondary = ax.secondary_yaxis("right", functions=(lambda t: 100.0 * (t / base - 1.0),
                                                       lambda p: base * (1.0 + p / 100.0)))
    secondary.set_ylabel("overhead over store-all (%)")
    if shown:
        ax.set_ylim(min(min(shown), base) * 0.97, min(max(shown), cap) * 1.03)
    ax.set_xlim(*_limits(xs))
    # Below the axes, where it covers no data.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    fig.tight_layout()
    return save_figure(fig, out, bbox_inches="tight")
