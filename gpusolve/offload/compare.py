"""Recompute-only, offload-only and combined, side by side: the rows of ``gpusolve compare --offload``
and the three curves of ``gpusolve curve --offload`` (and ``bench/offload_curves.py``).

- *recompute only*: :func:`gpusolve.solve` (the chain DP; no link).
- *combined*: :func:`gpusolve.offload.solve_offload` (recompute + ``Swap k`` over the link).
- *offload only*: the seed paper's algorithms ([O], :mod:`gpusolve.offload.paper`): GREEDY, DYNPROG
  (S = 500 slots, as published) and VDNN, each executed as the no-wait ordered schedule of its
  decisions, store-all otherwise (no recomputation).

Note [One budget, two models]
    The first two are simulated in this project's byte model (:func:`gpusolve.simulate.simulate`), the
    paper's algorithms in the paper's own model (:class:`~gpusolve.offload.paper.OffloadChain`, Note
    [Mapping a gpusolve chain onto the paper's model]: the x_i are whole tapes, the input counts in
    M_GPU). A budget b (beyond the input, reserved bytes included) is M_GPU = b + input_bytes there
    (``from_chain`` subtracts the reserved bytes), and a paper peak p is reported as p - input_bytes
    + reserved_bytes, so that every row's budget and peak mean the same bytes. The paper has one rate B
    and no latency: it gets the slower direction of the link and no latency (a row note says so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..chain import Chain
from ..errors import InfeasibleBudgetError
from ..simulate import budget_bytes_of, overhead, store_all_time_ms
from .link import Link

# The paper's algorithms shown as "offload only" (label, function of an OffloadChain -> makespan, peak).
PAPER_S = 500
PAPER_METHODS = ("GREEDY [O]", f"DYNPROG S={PAPER_S} [O]", "VDNN [O]")


def paper_rate(link: Link) -> float | None:
    """The one rate B the paper's model takes: the slower direction (None over a useless or an
    unlimited link, where its model has no meaning)."""
    rate = min(link.d2h_bytes_per_ms, link.h2d_bytes_per_ms)
    return None if rate == 0.0 or math.isinf(rate) else rate


def paper_chain(chain: Chain, budget_bytes: int, link: Link, input_on_device: bool = False, shared_grads=None):
    """The paper's instance at ``budget_bytes`` (Note [One budget, two models]); raises ``ValueError``
    when the budget is below what the paper's model needs to run at all, or the link has no finite rate.
    ``input_on_device``: the instance an executor runs (Note [Running the paper's plans]);
    ``shared_grads``: Note [Gradients summed across stages] (None: the chain's own)."""
    from .paper import OffloadChain
    rate = paper_rate(link)
    if rate is None:
        raise ValueError("the paper's model needs a finite, nonzero bandwidth")
    c = OffloadChain.from_chain(chain, B=rate)  # M_GPU = M_peak, valid whatever the budget
    x, exB = np.array(c.x, dtype=np.float64), np.array(c.exB, dtype=np.float64)
    for first, last, nbytes in checked_shared_grads(chain, shared_grads):  # Note [Gradients summed across stages]
        exB[first - 1:last - 1] += float(nbytes)  # B_i is stage i + 1's backward: stages first .. last - 1
    if input_on_device:
        x[0] = 0.0
        memory = float(budget_bytes) - float(chain.reserved_bytes)
    else:
        memory = float(budget_bytes) + float(chain.input_bytes) - float(chain.reserved_bytes)
    return OffloadChain(c.uF, c.uB, x, c.y, c.exF, exB, memory, c.B, c.names, dict(c.meta))


# Note [Gradients summed across stages]
#     A leaf tensor that several stages read (a language model's input embedding tied to its output
#     head) gets one gradient from each; plain autograd's engine sums them in a buffer the size of the
#     tensor, made at the backward of the last stage that reads it and let go once the first one's
#     backward has added its part. Each stage's profile sees only its own contribution (its backward
#     peak is measured above its start), so neither the paper's per-op model nor this project's chain
#     charges the buffer in between: on the CPU a GPT-2 with tied embeddings run by the paper's plans
#     measured up to 3.2 % above the model (the LM head's 2000 x 128 float32 gradient, 1 024 000 B;
#     ``bench/results/paper_fidelity_cpu_before.md``). This project's executor splits its backward calls
#     between the readers instead, each accumulating its part at once (Note [Shared leaves split tape runs]
#     in torch_exec/executor.py); a runner of plain autograd cannot.
#     ``shared_grads`` are ``(first, last, nbytes)``: the buffer is added to ex^B of the backwards of
#     stages first .. last - 1 (the last one's own backward profiled it). The profiler reads the readers off
#     the autograd graph (Note [Leaves several stages read] in torch_exec/profiler.py) and the chain carries
#     them (``Chain.shared_grads``, the default here), so ``gpusolve compare --offload`` on a profile charges
#     them too. Where the profile did not sum them (a reader held the parameter in a closure, the others
#     read the profiler's stand-in for it: two leaves), the first reader's backward missed the sum as well,
#     made beside the buffer and its own gradient: on the CPU, the embedding's backward peak of the tied
#     model read 4 063 232 B summed and 2 048 000 B not, and the runner measured 326 656 B over the plan at
#     the paper's least budget until that stage was charged the leaf's size once more
#     (tests/test_shared_leaves.py).


def checked_shared_grads(chain: Chain, shared_grads) -> list[tuple[int, int, int]]:
    """``shared_grads`` as ``(first, last, nbytes)`` int triples (None: the chain's own,
    :meth:`gpusolve.chain.Chain.shared_grads`); raises ``ValueError`` naming one that does not fit
    ``chain`` (stages 1 <= first < last <= N, bytes >= 0)."""
    if shared_grads is None:
        shared_grads = chain.shared_grads()
    out = []
    for item in shared_grads:
        first, last, nbytes = (int(v) for v in item)
        if not 1 <= first < last <= chain.n or nbytes < 0:
            raise ValueError(f"shared gradient {tuple(item)}: want (first stage, last stage, bytes) with 1 <= first "
                             f"< last <= {chain.n} (the chain's stages) and bytes >= 0")
        out.append((first, last, nbytes))
    return out


def paper_least_bytes(chain: Chain, link: Link, input_on_device: bool = True, shared_grads=None) -> int:
    """The least budget (this project's bytes) the paper's model runs ``chain`` in: its largest op
    footprint, everything else on the host (``input_on_device``: as :func:`paper_plan` has the input, else
    as :func:`paper_results` does; ``shared_grads``: Note [Gradients summed across stages], None: the
    chain's own). It can exceed the store-all peak: the paper's B_i holds x_{i+1} whole."""
    from .paper import m_min
    c = paper_chain(chain, 1 << 62, link, input_on_device, shared_grads)  # an instance valid at any budget
    shift = chain.reserved_bytes if input_on_device else chain.reserved_bytes - chain.input_bytes
    return int(math.ceil(float(m_min(c)))) + int(shift)


# Note [Running the paper's plans]
#     ``torch_exec.paper_offload`` runs a plan of the paper's algorithms on a GPU: plain autograd over the
#     stages, the chosen tapes copied to pinned host memory and back (Note [Issuing a timeline] in
#     gpusolve/offload/paper.py). The caller holds the input, so no executor can free it: the instance
#     it runs has |x_0| = 0 and M_GPU = the budget (beyond the input, as this project's budgets are), where
#     the rows of :func:`paper_results` count the input on both sides. The plan's peak and time are that
#     instance's; they differ from the rows' only by what moving the input would have given. A tape whose
#     output a later stage passes on, or that holds a tensor kept on the device, does not move
#     (``Chain.swappable``; Note [What may move] in gpusolve/offload/paper.py): the runner could not free it.
@dataclass
class PaperPlan:
    """One of the paper's offload-only plans, ready to run (Note [Running the paper's plans])."""

    method: str                  # "GREEDY", "DYNPROG" or "VDNN"
    decisions: list              # the offloaded x_k (x_k: the tape of stage k; 0 is the input, never moved)
    predicted_time_ms: float     # the paper model's makespan of those decisions
    issued_time_ms: float        # the time of the program an executor issues (paper.issued_makespan; >= the above)
    predicted_peak_bytes: int    # its peak in this project's terms (reserved bytes included)
    budget_bytes: int
    points: list                 # :func:`gpusolve.offload.paper.issue_points` of its timeline
    offloaded_bytes: int         # sum of the moved |x_k|
    shared_grads: tuple = ()     # (first, last, bytes): Note [Gradients summed across stages]
    considered: dict = field(default_factory=dict)  # method -> makespan, or the reason it has no schedule


PAPER_ALGORITHMS = ("GREEDY", "DYNPROG", "VDNN")


def run_paper_algorithms(c, names=PAPER_ALGORITHMS, movable=None) -> dict:
    """``{algorithm: (decisions, SimResult)}`` of the paper's algorithms (``names``, of
    :data:`PAPER_ALGORITHMS`) on the instance ``c``, their decisions simulated in its integral model, or
    ``{algorithm: reason}`` where one has no schedule; DYNPROG with :data:`PAPER_S` slots as published,
    VDNN over 64 thresholds; ``movable``: Note [What may move]."""
    from .paper import StateBudgetExceeded, dynprog, greedy, simulate, vdnn
    out: dict = {}
    for name in names:
        if name == "GREEDY":
            decisions = greedy(c, movable)
        elif name == "DYNPROG":
            try:
                decisions = dynprog(c, PAPER_S, max_seconds=60.0, movable=movable).decisions
            except StateBudgetExceeded as err:
                out[name] = f"state budget exceeded ({err})"
                continue
        else:
            decisions = vdnn(c, max_thresholds=64, movable=movable)[1]
        if decisions is None:
            out[name] = "no valid decisions"
            continue
        r = simulate(c, decisions)
        out[name] = (decisions, r) if r.feasible else (r.reason or "infeasible")
    return out


def paper_plan(chain: Chain, budget_bytes: int, link: Link, method: str = "best", shared_grads=None) -> PaperPlan:
    """The paper's ``method`` (one of :data:`PAPER_ALGORITHMS`, or ``"best"``: the fastest of them) at
    ``budget_bytes`` over ``link``, as a plan an executor runs. Raises ``ValueError`` naming why when it
    has no schedule there: :class:`~gpusolve.errors.InfeasibleBudgetError` (its ``min_bytes``:
    :func:`paper_least_bytes`) for a budget below the model's least; no finite rate, no valid decisions.
    ``shared_grads``: gradients autograd's engine sums across stages (Note [Gradients summed across stages];
    None: the chain's own, as its profile found them)."""
    from .paper import issue_points, issued_makespan
    shared_grads = checked_shared_grads(chain, shared_grads)  # a bad one is not a budget below the least
    wanted = PAPER_ALGORITHMS if method == "best" else (method.upper(),)
    if wanted[0] not in PAPER_ALGORITHMS:
        raise ValueError(f"method {method!r} is not one of the paper's algorithms; use one of "
                         f"{', '.join(PAPER_ALGORITHMS)} or 'best'")
    try:
        c = paper_chain(chain, int(budget_bytes), link, True, shared_grads)
    except ValueError:
        if paper_rate(link) is None:
            raise
        least = paper_least_bytes(chain, link, True, shared_grads)
        raise InfeasibleBudgetError(f"budget {budget_bytes} B is below the least the paper's model runs this chain "
                                    f"in, {least} B (its largest op footprint, everything else on the host); give "
                                    f"at least that", least) from None
    # x_k (k <= L), the tape of stage k, holds a_k: it moves where a_k may (x_0, the input, never)
    movable = chain.swappable()[:len(c.x) - 1].tolist()  # Note [What may move]
    considered, best = {}, None
    for name, result in run_paper_algorithms(c, wanted, movable).items():
        if isinstance(result, str):
            considered[name] = result
            continue
        decisions, r = result
        considered[name] = float(r.makespan)
        if best is None or r.makespan < best[1].makespan:
            best = (name, r, [k for k in decisions if float(c.x[k]) > 0])
    if best is None:
        raise ValueError(f"the paper's {method} has no schedule at {budget_bytes} B: "
                         + "; ".join(f"{k}: {v}" for k, v in considered.items()))
    name, r, moved = best
    points = issue_points(c, r.timeline)
    return PaperPlan(name, moved, float(r.makespan), float(issued_makespan(c, points)),
                     int(round(float(r.timeline.peak))) + int(chain.reserved_bytes), int(budget_bytes), points,
                     int(sum(float(c.x[k]) for k in moved)), tuple(map(tuple, shared_grads)), considered)


def paper_results(chain: Chain, budget_bytes: int, link: Link) -> dict[str, tuple[float, float] | str]:
    """``{method: (makespan_ms, peak_bytes)}`` for :data:`PAPER_METHODS` at ``budget_bytes``, or
    ``{method: reason}`` where it has no schedule (peaks in this project's terms). A chain in the thesis's model
    has none: [O]'s schedules are store-all with tapes moved, outside that model's class and priced wrongly by its
    encoding (Note [The thesis model's class] in gpusolve/solve.py; they read 14.15 ms at 8 B under a least budget
    of 13 B: bench/repros/rv10_diff_offload_compare_thesis_paper_rows.py)."""
    from ..baselines import OUTSIDE_THESIS_CLASS
    from ..units import format_bytes
    if not chain.multi_tape:
        return {name: f"store-all with tapes moved: {OUTSIDE_THESIS_CLASS}" for name in PAPER_METHODS}
    shift = -chain.input_bytes + chain.reserved_bytes
    try:
        c = paper_chain(chain, budget_bytes, link)
    except ValueError as err:
        if paper_rate(link) is None:
            return {name: str(err) for name in PAPER_METHODS}
        need = paper_least_bytes(chain, link, input_on_device=False)
        return {name: f"below what [O]'s model needs to run ({format_bytes(need)})" for name in PAPER_METHODS}

    results = run_paper_algorithms(c)
    return {method: result if isinstance(result, str) else
            (float(result[1].makespan), float(result[1].timeline.peak) + shift)
            for method, result in zip(PAPER_METHODS, (results[name] for name in PAPER_ALGORITHMS), strict=True)}


def offload_records(chain: Chain, budget, link: Link, bucket=None, backend: str = "auto",
                    recompute: bool = True) -> list[dict]:
    """Rows ``{name, time_ms, peak_bytes, overhead, feasible, detail}`` (as :func:`gpusolve.compare`):
    combined, recompute only (unless ``recompute=False``), then the paper's offload-only algorithms.
    Nothing raises for an infeasible budget: rows say feasible=False."""
    from ..baselines import Record
    from ..solve import solve
    from .solver import OffloadPlan, solve_offload
    budget_bytes = budget_bytes_of(chain, budget)
    base = store_all_time_ms(chain)
    rows = []
    combined = solve_offload(chain, budget_bytes, link, bucket=bucket, backend=backend, strict=False)
    plans = [("combined (gpusolve)", combined)]
    if recompute:  # the combined solve ran it where it could differ (Note [Never slower than recompute only])
        other = combined.recompute_only
        plans.append(("recompute only (gpusolve)", other if other is not None else
                      solve(chain, budget_bytes, bucket=bucket, backend=backend, strict=False)))
    for name, plan in plans:
        detail = {"backend": plan.backend, "buckets": plan.buckets}
        if isinstance(plan, OffloadPlan):
            # is_recompute_only_plan: the plan moves nothing (it is then as fast as recompute only's optimum, Note
            # [Never slower than recompute only]); recompute_only_decided: gpusolve.solve's plan, faster in exact bytes
            # than the combined table's, is the plan. The flag was the second, by the policies' identity, and so
            # said False for plans that moved nothing (bench/repros/rv10_offload_compare_recompute_only_flag.py)
            other = plan.recompute_only
            detail |= {"swaps": plan.swaps, "timings": dict(plan.timings),
                       "is_recompute_only_plan": plan.feasible and plan.swaps == 0,
                       "recompute_only_decided": other is not None and other.policy is plan.policy}
        if plan.feasible:
            rows.append(Record(name, float(plan.predicted_time_ms), int(plan.predicted_peak_bytes),
                               float(plan.predicted_time_ms / base - 1.0) if base else 0.0, True, detail))
        else:
            rows.append(Record(name, None, None, None, False, detail))
    note = "paper's model: store-all plus offloaded tapes, one rate (the slower direction), no latency"
    shared = chain.shared_grads()
    if shared:  # Note [Gradients summed across stages]
        note += (f"; charged what plain autograd holds of the gradients several stages add to one leaf "
                 f"(the profile's shared_leaves: {', '.join(f'{b} B over stages {f}-{l - 1}' for f, l, b in shared)})")
    for name, result in paper_results(chain, budget_bytes, link).items():
        if isinstance(result, str):
            rows.append(Record(name, None, None, None, False, {"reason": result}))
        else:
            ms, peak = result
            rows.append(Record(name, ms, int(round(peak)), overhead(ms, base), peak <= budget_bytes,
                               {"model": "[O]"}))
    if any(r.name in PAPER_METHODS for r in rows):
        rows[-1].detail["note"] = note
    return [r.to_dict() for r in rows]


def offload_curve_data(chain: Chain, link: Link, max_budget=None, bucket=None, backend: str = "auto",
                       points: int = 24) -> dict:
    """The three curves (time in ms against the budget in bytes) at ``points`` budgets from the combined
    minimum to the top (``max_budget``, default the store-all peak: :func:`gpusolve.plot.curve_budgets`).
    Recompute only and combined are each the fastest plan known at every budget, as
    :func:`gpusolve.plot.curve_data`'s optimal line: the tables' optimum at every bucket (a combined and a
    recompute-only table filled at the top, and lower ones where the grid reaches far below it: Note [A ladder
    of tables] in gpusolve/plot.py) and the plan
    :func:`solve_offload_budgets` makes at each of the ``points`` budgets from those tables, with the
    exact-byte candidates (Note [Exact candidates] in gpusolve/solve.py). Every recompute-only plan is a
    combined one, so the combined line also takes the recompute line's points: it is never above it. Offload
    only is the best of the paper's algorithms at each of the ``points`` budgets."""
    from ..plot import curve_budgets, fastest_line, ladder_plans
    from .solver import min_budget_bytes, solve_offload_budgets
    low = min_budget_bytes(chain, link)
    top, grid = curve_budgets(chain, max_budget, low, points, " with offloading")
    tables, plans = ladder_plans(lambda at, below: solve_offload_budgets(chain, at, link, below, bucket=bucket,
                                                                         backend=backend), top, grid, bucket is None)
    combined = tables[0]
    references = [p.recompute_only for p in plans if p.recompute_only is not None]
    if references or not link.is_useless:  # below recompute only's own minimum its plans are infeasible
        recompute = fastest_line(top, [t.recompute_only.curve for t in tables if t.recompute_only is not None],
                                 references)
    else:  # a link that moves nothing, one backend: the combined plans are recompute only's (none was solved)
        recompute = fastest_line(top, [t.curve for t in tables], plans)
    line = fastest_line(top, [*(t.curve for t in tables), recompute], plans)
    paper = {name: [] for name in PAPER_METHODS}
    for b in grid:
        results = paper_results(chain, int(b), link)
        for name in PAPER_METHODS:
            r = results[name]
            paper[name].append(None if isinstance(r, str) else r[0])
    best = [min((paper[n][q] for n in PAPER_METHODS if paper[n][q] is not None), default=None)
            for q in range(len(grid))]
    return {"name": chain.provenance.get("network") or chain.provenance.get("source") or "chain", "stages": chain.n,
            "link": link.to_dict(), "paper_rate_bytes_per_ms": paper_rate(link), "max_budget_bytes": top,
            "min_feasible_bytes": int(low), "store_all_time_ms": store_all_time_ms(chain),
            "backend": combined.backend, "bucket_bytes": combined.bucket_bytes, "combined": line,
            "recompute": recompute, "grid_bytes": grid, "offload_only": {"best": best, **paper}}


def plot_offload_curves(data: dict, out) -> "object":
    """Write the three curves of :func:`offload_curve_data` to ``out`` (format from its extension)."""
    from ..plot import axis_unit, output_path, save_figure
    out = output_path(out)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = data["store_all_time_ms"]
    scale, unit = axis_unit(data["max_budget_bytes"])
    fig, ax = plt.subplots(figsize=(9, 6.5), dpi=110)
    shown = []
    for key, label, style in (("combined", "recompute + offload (gpusolve)", {"color": "tab:green", "linewidth": 2.6}),
                              ("recompute", "recompute only (gpusolve)",
                               {"color": "tab:blue", "linewidth": 1.2, "linestyle": "--"})):
        b = np.asarray(data[key]["budget_bytes"], dtype=np.float64) / scale
        t = np.asarray(data[key]["time_ms"], dtype=np.float64)
        ax.step(b, t, where="post", label=label, **style)
        shown += [float(v) for v in t if np.isfinite(v)]
    grid = np.asarray(data["grid_bytes"], dtype=np.float64) / scale
    best = np.array([np.nan if v is None else v for v in data["offload_only"]["best"]], dtype=np.float64)
    if np.isfinite(best).any():
        ax.plot(grid, best, "o--", color="tab:orange", markersize=4, linewidth=1.2,
                label="offload only: best of GREEDY, DYNPROG, VDNN [O]")
        shown += [float(v) for v in best if np.isfinite(v)]
    cap = base * 3.0
    if shown:
        ax.set_ylim(min(min(shown), base) * 0.97, min(max(shown), cap) * 1.03)
    rate = data["paper_rate_bytes_per_ms"]
    link = data["link"]
    ax.set_xlabel(f"memory budget beyond the input ({unit})")
    ax.set_ylabel("predicted training step (ms)")
    def gbps(rate) -> str:
        return "unlimited" if rate == "inf" else f"{float(rate) / 1e6:.3g} GB/s"
    ax.set_title(f"{data['name']}: link {gbps(link['d2h_bytes_per_ms'])} D2H, "
                 f"{gbps(link['h2d_bytes_per_ms'])} H2D, latency {link['latency_ms']:g} ms"
                 + ("" if rate is not None else " ([O] not shown: no finite rate)"), fontsize=10)
    ax.grid(True, alpha=0.3)
    secondary = ax.secondary_yaxis("right", functions=(lambda t: 100.0 * (t / base - 1.0),
                                                       lambda p: base * (1.0 + p / 100.0)))
    secondary.set_ylabel("overhead over store-all (%)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.tight_layout()
    return save_figure(fig, out, bbox_inches="tight")
