"""Recompute only vs offload only vs combined: ``gpusolve.offload.compare`` and the CLI's ``--offload``."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusolve import Chain
from gpusolve.cli import main
from gpusolve.offload import Link, solve_offload
from gpusolve.offload.compare import PAPER_METHODS, offload_curve_data, offload_records, paper_chain
from gpusolve.offload.paper import m_peak
from gpusolve.simulate import simulate, store_all_peak_bytes, store_all_time_ms
from gpusolve.solve import solve

pytestmark = pytest.mark.filterwarnings("ignore::gpusolve.FallbackWarning")


@pytest.fixture(scope="module")
def resnet():
    return Chain.load("resnet50_b128")


@pytest.mark.parametrize("name", ["resnet50_b128", "vgg16_b64"])
def test_both_models_agree_at_store_all(name):
    """Note [One budget, two models]: at the store-all peak the paper's instance needs exactly our
    store-all peak and its schedules offload nothing, so they take exactly our store-all time."""
    chain = Chain.load(name)
    top = store_all_peak_bytes(chain)
    c = paper_chain(chain, top, Link.parse("12.2GB/s"))
    assert float(m_peak(c)) - chain.input_bytes + chain.reserved_bytes == top
    rows = {r["name"]: r for r in offload_records(chain, top, Link.parse("12.2GB/s"), backend="cpu")}
    for name_ in ("combined (gpusolve)", "recompute only (gpusolve)", "GREEDY [O]", "VDNN [O]"):
        assert rows[name_]["feasible"] and rows[name_]["peak_bytes"] == top
        assert rows[name_]["time_ms"] == pytest.approx(store_all_time_ms(chain), rel=1e-12)


def test_records_below_the_papers_minimum(resnet):
    rows = {r["name"]: r for r in offload_records(resnet, "30%", Link.parse("50GB/s"), backend="cpu")}
    for name in PAPER_METHODS:
        assert not rows[name]["feasible"] and "needs to run" in rows[name]["detail"]["reason"]
    assert rows["combined (gpusolve)"]["feasible"] and rows["recompute only (gpusolve)"]["feasible"]


def test_records_over_a_useless_or_unlimited_link(resnet):
    for link in (Link.useless(), Link.parse("inf")):
        rows = {r["name"]: r for r in offload_records(resnet, "60%", link, backend="cpu")}
        assert all(not rows[n]["feasible"] and "finite" in rows[n]["detail"]["reason"] for n in PAPER_METHODS)


def test_a_thesis_chain_has_no_rows_of_the_papers_algorithms():
    """[O]'s schedules are store-all with tapes moved: outside the thesis model's class, priced by its encoding at 8 B
    under a least budget of 13 B (bench/repros/rv10_diff_offload_compare_thesis_paper_rows.py)."""
    import json

    from gpusolve.data import THESIS_CASES
    case = next(c for c in json.loads(THESIS_CASES.read_text())["cases"] if c["name"] == "random_seed1_N3")
    chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"])
    rows = {r["name"]: r for r in offload_records(chain, 13, Link.parse("1GB/s"), backend="cpu")}
    assert rows["combined (gpusolve)"]["feasible"] and rows["combined (gpusolve)"]["peak_bytes"] <= 13
    for name in PAPER_METHODS:
        assert not rows[name]["feasible"] and "outside the thesis model's class" in rows[name]["detail"]["reason"]
    data = offload_curve_data(chain, Link.parse("1GB/s"), backend="cpu", points=4)
    assert all(t is None for t in data["offload_only"]["best"])


def test_the_recompute_only_flag_says_what_the_plan_is(resnet):
    """is_recompute_only_plan: the plan moves nothing, whichever solve handed it over; it said False for such plans
    where the combined table's policy was not the reference solve's object (bench/repros/
    rv10_offload_compare_recompute_only_flag.py: vgg16_b64 at 90 % over 12GB/s)."""
    for chain, budget, rate in ((Chain.load("vgg16_b64"), "90%", "12GB/s"), (Chain.load("vgg16_b64"), "90%", "0"),
                                (resnet, "35%", "12GB/s"), (resnet, "35%", "inf")):
        combined, recompute, *_ = offload_records(chain, budget, Link.parse(rate), backend="cpu")
        detail = combined["detail"]
        assert detail["is_recompute_only_plan"] == (detail["swaps"] == 0), (budget, rate)
        if detail["swaps"] == 0:
            assert combined["time_ms"] == recompute["time_ms"]
        else:
            assert combined["time_ms"] < recompute["time_ms"] and not detail["recompute_only_decided"]


@pytest.mark.parametrize("name,rate,percents", [("resnet50_b128", "inf", (90, 60, 45, 35, 25)),
                                                ("resnet50_b128", "50GB/s", (90, 60, 45, 35, 25)),
                                                ("vgg16_b64", "inf", (90, 60, 45, 35, 25)),
                                                ("densenet121_b64", "50GB/s", (35,))])
def test_combined_never_slower_than_recompute_only(name, rate, percents):
    """Note [Never slower than recompute only]: not even by rounding. densenet121_b64 at 35 % over
    50 GB/s is where the combined table's exact-byte search alone gave 82.911 ms against the chain
    DP's 82.909 (bench/results/offload_curves.md of 2026-11-25T01:50)."""
    chain = Chain.load(name)
    link = Link.parse(rate)
    for pct in percents:
        budget = int(store_all_peak_bytes(chain) * pct / 100)
        plain = solve(chain, budget, backend="cpu", strict=False)
        combined = solve_offload(chain, budget, link, backend="cpu", strict=False)
        if not plain.feasible:
            continue
        assert combined.feasible
        assert combined.predicted_time_ms <= plain.predicted_time_ms
        assert combined.recompute_only.predicted_time_ms == plain.predicted_time_ms
        sim = simulate(chain, combined.schedule, link=link)
        assert sim.peak_bytes <= budget and sim.time_ms == combined.predicted_time_ms


def test_useless_link_solves_no_reference(resnet):
    """Over a useless link the combined table is the chain's bit for bit: no second solve."""
    plan = solve_offload(resnet, "40%", Link.useless(), backend="cpu")
    assert plan.recompute_only is None and "recompute_only" not in plan.timings
    assert plan.predicted_time_ms == solve(resnet, "40%", backend="cpu").predicted_time_ms


def test_offload_solve_reports_progress(resnet, capsys, monkeypatch):
    """A long offload fill says how far it is, on stderr, as the chain's does (it had no progress)."""
    from gpusolve import progress
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 0.0)  # as if the solve were long
    solve_offload(resnet, "40%", "50GB/s", backend="cpu", progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"gpusolve: solving {resnet.n} stages x ") and "buckets (offload DP, cpu): " in err[0]
    assert any("buckets (offload DP, cpu): done in" in line for line in err)
    assert "buckets (cpu): done in" in err[-1]  # then the recompute-only reference
    solve_offload(resnet, "40%", "50GB/s", backend="cpu", progress=False)
    assert capsys.readouterr().err == ""


def test_free_copies_help_on_resnet(resnet):
    budget = int(store_all_peak_bytes(resnet) * 0.25)
    combined = solve_offload(resnet, budget, Link.parse("inf"), backend="cpu")
    plain = solve(resnet, budget, backend="cpu")
    assert combined.swaps > 0 and combined.predicted_time_ms < plain.predicted_time_ms - 1.0


def _line_at(line, b):
    budgets, times = np.asarray(line["budget_bytes"]), np.asarray(line["time_ms"])
    k = np.searchsorted(budgets, b, side="right") - 1
    return times[k] if k >= 0 else np.inf


def test_curve_data(resnet):
    data = offload_curve_data(resnet, Link.parse("12.2GB/s"), backend="cpu", points=6)
    assert data["grid_bytes"][-1] == store_all_peak_bytes(resnet)
    assert data["offload_only"]["best"][-1] == pytest.approx(store_all_time_ms(resnet), rel=1e-12)
    comb, rec = data["combined"], data["recompute"]
    for line in (comb, rec):
        assert np.all(np.diff(line["budget_bytes"]) > 0) and np.all(np.diff(line["time_ms"]) < 0)
        assert line["budget_bytes"][-1] == data["max_budget_bytes"]
        assert _line_at(line, data["max_budget_bytes"]) == store_all_time_ms(resnet)
    assert comb["budget_bytes"][0] == data["min_feasible_bytes"]
    # everywhere, not only where both have a point: the combined line is never above the recompute one
    for b in sorted(set(comb["budget_bytes"]) | set(rec["budget_bytes"])):
        assert _line_at(comb, b) <= _line_at(rec, b), b


def test_curve_lines_are_below_the_baselines_users_run():
    # a review (2026-11-27) found the chain curve's line drawn above baselines evaluated in exact bytes; the
    # offload curve's two lines were still the bucketed tables alone (a coarser bucket than the chain's)
    from gpusolve.baselines import baseline_curves
    chain = Chain.load("densenet121_b64")
    data = offload_curve_data(chain, Link.parse("12GB/s"), backend="cpu", points=12)
    points = dict(baseline_curves(chain, data["grid_bytes"]))
    points.pop("points")
    for line in (data["combined"], data["recompute"]):
        for name, series in points.items():
            for b, t in zip(data["grid_bytes"], series, strict=True):
                assert t is None or _line_at(line, b) <= t + 1e-9, (name, b, t, _line_at(line, b))


def test_solve_offload_budgets_plans_fit_and_never_lose_to_recompute_only(resnet):
    from gpusolve.offload.solver import min_budget_bytes, solve_offload_budgets
    link = Link.parse("12.2GB/s")
    top, least = store_all_peak_bytes(resnet), min_budget_bytes(resnet, link)
    grid = [least, int(least + 0.3 * (top - least)), int(least + 0.7 * (top - least))]
    plan, below = solve_offload_budgets(resnet, top, link, grid, backend="cpu")
    assert len(below) == 3
    for b, p in zip(grid, below, strict=True):
        assert p.feasible and p.budget_bytes == b and p.predicted_peak_bytes <= b
        assert p.bucket_bytes == plan.bucket_bytes  # one table
        sim = simulate(resnet, p.schedule, link=link)
        assert (sim.time_ms, sim.peak_bytes) == (p.predicted_time_ms, p.predicted_peak_bytes)
        if p.recompute_only is not None:
            assert p.predicted_time_ms <= p.recompute_only.predicted_time_ms
    with pytest.raises(ValueError, match="above the budget"):
        solve_offload_budgets(resnet, grid[0], link, [top], backend="cpu")
    _, (under,) = solve_offload_budgets(resnet, top, link, [least - 1], backend="cpu")
    assert not under.feasible


# ---------------------------------------------------------------------------- CLI
def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_solve_offload(capsys):
    out = _json(capsys, ["solve", "resnet50_b128", "--budget", "30%", "--offload", "--bandwidth", "inf",
                         "--backend", "cpu", "--json"])
    kinds = {op[0] for op in out["schedule"]}
    assert out["swaps"] > 0 and {"offload", "release", "prefetch", "acquire"} <= kinds
    assert out["link"]["latency_ms"] == 0.0 and out["predicted_peak_bytes"] <= out["budget_bytes"]
    out = _json(capsys, ["solve", "resnet50_b128", "--budget", "30%", "--offload", "--bandwidth", "12GB/s",
                         "--h2d-bandwidth", "10GB/s", "--latency", "10us", "--backend", "cpu", "--json"])
    assert out["link"] == {"d2h_bytes_per_ms": 12e6, "h2d_bytes_per_ms": 10e6, "latency_ms": pytest.approx(0.01),
                           "channels": 1}


@pytest.mark.parametrize("argv,message", [
    (["--bandwidth", "12GB/s"], "describes the host link: add --offload"),
    (["--latency", "1ms"], "describes the host link: add --offload"),
    (["--offload"], "--offload needs --bandwidth"),
    (["--offload", "--bandwidth", "fast"], "is not a rate"),
    (["--offload", "--bandwidth", "12GB/s", "--latency", "-1ms"], "must be a finite duration >= 0"),
    (["--offload", "--bandwidth", "12GB/s", "--backend", "exact"], "has no exact backend"),
])
def test_cli_offload_errors(capsys, argv, message):
    assert main(["solve", "resnet50_b128", "--budget", "30%", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_compare_offload(capsys):
    out = _json(capsys, ["compare", "resnet50_b128", "--budget", "95%", "--offload", "--bandwidth", "12.2GB/s",
                         "--backend", "cpu", "--json"])
    names = [r["name"] for r in out["records"]]
    assert names[:2] == ["combined (gpusolve)", "recompute only (gpusolve)"]
    assert names[-3:] == list(PAPER_METHODS) and "store-all" in names
    rows = {r["name"]: r for r in out["records"]}
    assert rows["combined (gpusolve)"]["time_ms"] <= rows["recompute only (gpusolve)"]["time_ms"]
    assert rows["GREEDY [O]"]["feasible"]


def test_cli_curve_offload(capsys, tmp_path):
    out = _json(capsys, ["curve", "vgg16_b64", "--offload", "--bandwidth", "50GB/s", "--backend", "cpu",
                         "--out", str(tmp_path / "c.png"), "--json"])
    assert (tmp_path / "c.png").stat().st_size > 0
    assert {"combined", "recompute", "offload_only", "grid_bytes", "link"} <= set(out)


def test_cli_compare_offload_charges_a_profiles_shared_leaves(capsys, tmp_path):
    """A profile that says two stages read one leaf (Note [Leaves several stages read] in
    torch_exec/profiler.py): the paper's rows are charged plain autograd's buffer of its summed gradient, in
    the backwards between the readers (Note [Gradients summed across stages]); ours are not (the executor
    splits its backward calls there)."""
    from gpusolve.offload.compare import paper_least_bytes
    from gpusolve.profiles import resolve
    data = json.loads(resolve("resnet50_b128").read_text())
    n = len(data["stages"])
    tied = dict(data, shared_leaves=[{"stages": [1, n - 1], "nbytes": 300 << 20, "summed": True}])
    path = tmp_path / "tied.json"
    path.write_text(json.dumps(tied))
    plain, charged = Chain.load("resnet50_b128"), Chain.load(str(path))
    (first, last, nbytes), = charged.shared_grads()
    assert first == 1 and last > 1 and nbytes == 300 << 20
    link = Link.parse("12.2GB/s")
    assert paper_least_bytes(charged, link) >= paper_least_bytes(plain, link) + (300 << 20) - (64 << 20)
    assert paper_least_bytes(charged, link, shared_grads=()) == paper_least_bytes(plain, link)
    rows = {}
    for name, spec in (("plain", "resnet50_b128"), ("tied", str(path))):
        out = _json(capsys, ["compare", spec, "--budget", "95%", "--offload", "--bandwidth", "12.2GB/s",
                             "--backend", "cpu", "--json"])
        rows[name] = {r["name"]: r for r in out["records"]}
    assert rows["tied"]["recompute only (gpusolve)"] == rows["plain"]["recompute only (gpusolve)"]
    assert f"{300 << 20} B over stages 1-{last - 1}" in rows["tied"]["VDNN [O]"]["detail"]["note"]
    assert "shared_leaves" not in rows["plain"]["VDNN [O]"]["detail"]["note"]
    greedy = [rows[k]["GREEDY [O]"] for k in ("plain", "tied")]
    assert greedy[0]["feasible"] and (not greedy[1]["feasible"] or greedy[1]["peak_bytes"] > greedy[0]["peak_bytes"]
                                      or greedy[1]["time_ms"] > greedy[0]["time_ms"])


def test_compare_table_shows_the_solve_time_not_its_phases(capsys):
    """The text table printed the combined solve's whole timings dict (a line of 240 characters); it shows
    the seconds, and --json keeps the phases."""
    import json
    from gpusolve.cli import main
    assert main(["compare", "resnet50_b128", "--budget", "35%", "--offload", "--bandwidth", "50GB/s",
                 "--backend", "cpu"]) in (0, None)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("combined (gpusolve)"))
    assert "timings=" not in line and "solve=" in line
    assert main(["compare", "resnet50_b128", "--budget", "35%", "--offload", "--bandwidth", "50GB/s",
                 "--backend", "cpu", "--json"]) in (0, None)
    records = json.loads(capsys.readouterr().out)
    rows = records if isinstance(records, list) else records.get("rows", records.get("records"))
    assert any("dp" in r["detail"].get("timings", {}) for r in rows)


# A chain (found by a review's fuzzing) whose combined class runs below recompute only's minimum:
# min_offload_bytes 51 B, min_feasible_bytes 55 B. compare and curve checked the budget against the
# recompute-only minimum and refused 52 B, which solve --offload solves; its plan said the minimum was 55 B.
GAP_CHAIN = json.loads((Path(__file__).resolve().parent / "data" / "offload_gap_chain.json").read_text())


@pytest.fixture
def gap_chain(tmp_path):
    path = tmp_path / "gap.json"
    path.write_text(json.dumps(GAP_CHAIN))
    return str(path)


def test_the_combined_minimum_below_recompute_onlys_is_the_one_reported_and_checked(capsys, gap_chain, tmp_path):
    from gpusolve.dp.minpeak import min_feasible_bytes
    from gpusolve.offload import min_offload_bytes
    chain = Chain.load(gap_chain)
    low, recompute_low = min_offload_bytes(chain), min_feasible_bytes(chain)
    assert (low, recompute_low) == (51, 55)
    link = ["--offload", "--bandwidth", "1e6B/s", "--backend", "cpu"]
    plan = solve_offload(chain, 52, "1e6B/s", backend="cpu")
    assert plan.feasible and plan.min_feasible_bytes == low and plan.to_dict()["min_feasible_bytes"] == low
    assert solve_offload(chain, 50, "1e6B/s", backend="cpu", strict=False).min_feasible_bytes == low
    out = _json(capsys, ["solve", gap_chain, "--budget", "52", *link, "--json"])
    assert out["feasible"] and out["min_feasible_bytes"] == low
    out = _json(capsys, ["compare", gap_chain, "--budget", "52", *link, "--json"])
    rows = {r["name"]: r for r in out["records"]}
    assert out["min_feasible_bytes"] == low and rows["combined (gpusolve)"]["feasible"]
    assert not rows["recompute only (gpusolve)"]["feasible"]
    out = _json(capsys, ["curve", gap_chain, "--max-budget", "52", *link, "--out", str(tmp_path / "c.png"), "--json"])
    assert out["min_feasible_bytes"] == low and out["combined"]["budget_bytes"] and not out["recompute"]["budget_bytes"]
    assert main(["compare", gap_chain, "--budget", "50", *link]) == 2
    assert f"raise the budget to at least {low} B" in capsys.readouterr().err


def test_curve_with_a_users_bucket_leaves_out_what_its_rounding_fits_not():
    # the diff review: a grid budget at the exact combined minimum, which a bucket of 2 B rounds out, raised
    # "use a finer bucket" from solve_offload_budgets; the curve was drawn before
    chain = Chain.from_dict(json.loads((Path(__file__).parent / "data" / "offload_gap_chain.json").read_text()))
    for bucket in (1, 2):
        data = offload_curve_data(chain, Link.parse("inf"), bucket=bucket, backend="cpu", points=8)
        assert data["combined"]["budget_bytes"] and data["combined"]["budget_bytes"][-1] == data["max_budget_bytes"]


def test_a_budget_the_bucket_rounds_out_gets_the_least_peak_plan():
    # a budget at the exact combined minimum that the bucket rounds out, below recompute only's least: it raised
    # "use a finer bucket", also with the bucket left to the solver (bench/tuple_fuzz.py --offload, seed 250 at
    # 6adbcd3), and a curve's lower budget was infeasible. Now the least-peak policy, a note naming a finer bucket
    from gpusolve.offload.solver import min_budget_bytes, solve_offload_budgets
    data = Path(__file__).parent / "data"
    fuzz = json.loads((data / "offload_rounded_auto_chain.json").read_text())
    chain, link = Chain.from_dict(fuzz["chain"]), Link.from_dict(fuzz["link"])
    plan = solve_offload(chain, fuzz["budget_bytes"], link, backend="cpu")
    assert plan.bucket_bytes > 1 and plan.feasible and plan.predicted_peak_bytes <= fuzz["budget_bytes"]
    assert sum("least-peak combined" in n and "finer bucket" in n for n in plan.notes) == 1, plan.notes
    assert plan.predicted_time_ms >= solve_offload(chain, fuzz["budget_bytes"], link, bucket=1,
                                                   backend="cpu").predicted_time_ms - 1e-9
    chain = Chain.from_dict(json.loads((data / "offload_gap_chain.json").read_text()))
    link = Link.parse("inf")
    least = min_budget_bytes(chain, link)
    top = least + 1000
    for plan in solve_offload_budgets(chain, top, link, [least, least + 1], bucket=2, backend="cpu")[1]:
        assert plan.feasible and plan.predicted_peak_bytes <= plan.budget_bytes
    rounded = solve_offload_budgets(chain, top, link, [least], bucket=2, backend="cpu")[1][0]
    assert any("least-peak" in n and "finer bucket" in n for n in rounded.notes), rounded.notes
