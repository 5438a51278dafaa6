"""The command line, run as a subprocess: JSON contracts, outputs, and one-line errors (exit 2)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpusolve.data import THESIS_CASES

ROOT = Path(__file__).resolve().parent.parent
THESIS = THESIS_CASES
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLAN_KEYS = {"feasible", "predicted_time_ms", "predicted_peak_bytes", "budget_bytes", "bucket_bytes", "buckets",
             "backend", "solve_seconds", "min_feasible_bytes", "store_all_time_ms", "overhead", "bytes_per_state",
             "notes", "curve", "schedule", "timings", "stages", "profiled_stages"}
RECORD_KEYS = {"name", "time_ms", "peak_bytes", "overhead", "feasible", "detail"}


def run(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "gpusolve.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout)


def test_solve_json():
    res = run("solve", "resnet50_b128", "--budget", "5GiB", "--bucket", "4MiB", "--backend", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)  # exactly one JSON object
    assert set(plan) == PLAN_KEYS
    assert plan["feasible"] and plan["backend"] == "cpu"
    assert plan["budget_bytes"] == 5 * 2**30 and plan["bucket_bytes"] == 4 * 2**20
    assert plan["predicted_peak_bytes"] <= plan["budget_bytes"]
    assert plan["schedule"] and plan["schedule"][0][0] in ("fwd_tape", "fwd_nograd")
    assert (plan["stages"], plan["profiled_stages"]) == (21, 22)
    assert res.stderr == ""  # a short solve prints no progress


def test_solve_by_path_human():
    res = run("solve", ROOT / "gpusolve" / "profiles" / "vgg16_b64.json", "--budget", "4.5GiB", "--backend", "cpu")
    assert res.returncode == 0, res.stderr
    assert "predicted step" in res.stdout
    assert "25 stages (40 profiled; 15 in-place stages merged)" in res.stdout


def test_compare_json_and_table():
    res = run("compare", "resnet50_b128", "--budget", "6GiB", "--backend", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    records = out["records"]
    assert out["budget_bytes"] == 6 * 2**30
    assert (out["stages"], out["profiled_stages"]) == (21, 22)
    assert records[0]["name"].startswith("optimal") and records[0]["feasible"]
    names = {r["name"] for r in records}
    for expected in ("store-all", "checkpoint_sequential (best k)", "chen2016 greedy", "thesis uniform-cost",
                     "bisection (budget-aware)", "bisection (fixed)", "checkpoint_sequential (sqrt N)"):
        assert expected in names
    for r in records:
        assert set(r) == RECORD_KEYS
        if r["feasible"]:
            assert r["peak_bytes"] <= out["budget_bytes"]
            assert r["time_ms"] >= records[0]["time_ms"] * (1 - 1e-5) or "note" in records[0]["detail"]
    table = run("compare", "resnet50_b128", "--budget", "6GiB", "--backend", "cpu")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if line.startswith("method"))
    assert "step (ms)" in header and "overhead" in header and "peak" in header
    assert any(line.startswith("chen2016 greedy") for line in lines)
    assert "21 stages (22 profiled; 1 in-place stage merged)" in table.stdout


def test_thesis_matches_reference_exactly():
    res = run("thesis", THESIS, "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    ref = json.loads(THESIS.read_text())
    assert [c["name"] for c in got["cases"]] == [c["name"] for c in ref["cases"]]
    for mine, theirs in zip(got["cases"], ref["cases"]):
        assert mine["optimal_cost"] == theirs["optimal_cost"] and mine["matches"] is True, mine["name"]


def test_thesis_exits_1_when_a_case_differs_from_the_file(tmp_path):
    # a review (bench/repros/rv11_docs_thesis_differs_exit_zero.py): "DIFFERS from the file" exited 0, and --json said
    # nothing of the comparison
    data = json.loads(THESIS.read_text())
    feasible = next(i for i, c in enumerate(data["cases"][2]["optimal_cost"]) if c is not None)
    data["cases"][2]["optimal_cost"][feasible] += 1.0
    del data["cases"][3]["optimal_cost"]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    res = run("thesis", edited, "--json")
    assert res.returncode == 1
    assert [c["matches"] for c in json.loads(res.stdout)["cases"]][:5] == [True, True, False, None, True]
    res = run("thesis", edited)
    assert res.returncode == 1 and "DIFFERS from the file" in res.stdout and "no reference in the file" in res.stdout


def test_curve_writes_png(tmp_path):
    out = tmp_path / "curve.png"
    res = run("curve", "resnet50_b128", "--backend", "cpu", "--out", out)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 20_000


def test_curve_json_max_budget(tmp_path):
    out = tmp_path / "c.png"
    res = run("curve", "vgg16_b64", "--max-budget", "4.5GiB", "--backend", "cpu", "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["max_budget_bytes"] == int(4.5 * 2**30)
    assert max(data["optimal"]["budget_bytes"]) <= data["max_budget_bytes"]
    assert out.exists()


def test_demo_runs(tmp_path):
    out = tmp_path / "demo.png"
    res = run("demo", "--backend", "cpu", "--out", out, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "densenet121" in res.stdout and "predicted step" in res.stdout and "chen2016 greedy" in res.stdout
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_demo_takes_the_exact_backend(tmp_path):
    # a review: refused with "backend 'exact' is not one of 'auto', 'cpu', 'cuda', 'exact'"
    res = run("demo", "--backend", "exact", "--out", tmp_path / "demo.png", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "exact" in res.stdout and (tmp_path / "demo.png").read_bytes()[:8] == PNG_MAGIC


def test_demo_default_output_in_cwd(tmp_path):
    res = run("demo", "--backend", "cpu", cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "gpusolve-demo-curve.png").read_bytes()[:8] == PNG_MAGIC


def test_profiles_lists_bundled():
    res = run("profiles")
    assert res.returncode == 0, res.stderr
    assert "densenet121_b64" in res.stdout and "resnet50_b128" in res.stdout


# ---------------------------------------------------------------------------- bad input
def _profile(tmp_path, stages, **top):
    data = {"format": "measured-chain/1", "network": "toy", "input_bytes": 1024, "stages": stages} | top
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return path


def _stage(name="s", **over):
    stage = {"name": name, "t_fwd": 1.0, "t_fwd_nograd": 0.8, "t_bwd": 2.0, "x": 1024, "x_nbytes": 1024,
             "xbar": 2048, "fwd_peak_nograd": 1024, "fwd_peak_grad": 2048, "bwd_peak": 1024}
    return stage | over


def _cuda_available() -> bool:
    try:
        from gpusolve.dp import cuda
        cuda.ensure_available()
        return True
    except Exception:  # noqa: BLE001
        return False


BAD_CASES = {
    "missing file": lambda tmp: ["solve", tmp / "nope.json", "--budget", "1GiB"],
    "unknown bundled name": lambda tmp: ["compare", "resnet9000", "--budget", "1GiB"],
    "not json": lambda tmp: ["solve", _write(tmp / "x.json", "{not json"), "--budget", "1GiB"],
    "unknown format": lambda tmp: ["solve", _write(tmp / "f.json", json.dumps({"format": "other/9"})), "--budget", "1GiB"],
    "negative cost": lambda tmp: ["solve", _profile(tmp, [_stage("a"), _stage("b", t_bwd=-3.0)]), "--budget", "1MiB"],
    "nan cost": lambda tmp: ["solve", _write(tmp / "n.json", json.dumps(
        {"format": "measured-chain/1", "input_bytes": 0, "stages": [_stage("a", t_fwd=float("nan"))]})), "--budget", "1MiB"],
    "negative bytes": lambda tmp: ["compare", _profile(tmp, [_stage("a", xbar=-5)]), "--budget", "1MiB"],
    "empty chain": lambda tmp: ["solve", _profile(tmp, []), "--budget", "1MiB"],
    "budget below minimum": lambda tmp: ["solve", "resnet50_b128", "--budget", "1GiB", "--backend", "cpu"],
    "compare below minimum": lambda tmp: ["compare", "resnet50_b128", "--budget", "1GiB", "--backend", "cpu"],
    "bucket above budget": lambda tmp: ["solve", "resnet50_b128", "--budget", "5GiB", "--bucket", "6GiB", "--backend", "cpu"],
    "bad budget string": lambda tmp: ["solve", "resnet50_b128", "--budget", "lots"],
    "nan budget": lambda tmp: ["solve", "resnet50_b128", "--budget", "nan"],
    "negative budget": lambda tmp: ["solve", "resnet50_b128", "--budget=-5GiB"],
    "negative budget, spaced": lambda tmp: ["solve", "resnet50_b128", "--budget", "-5GiB"],
    "negative bucket, spaced": lambda tmp: ["compare", "resnet50_b128", "--budget", "6GiB", "--bucket", "-1MiB"],
    "negative max budget": lambda tmp: ["curve", "vgg16_b64", "--max-budget", "-1e9", "--out", tmp / "c.png"],
    "unknown image format": lambda tmp: ["curve", "vgg16_b64", "--out", tmp / "c.xyz"],
    "unknown image format, demo": lambda tmp: ["demo", "--out", tmp / "demo.docx"],
    "unknown backend": lambda tmp: ["solve", "resnet50_b128", "--budget", "5GiB", "--backend", "tpu"],
    "missing budget": lambda tmp: ["solve", "resnet50_b128"],
    "unknown command": lambda tmp: ["optimise", "resnet50_b128"],
    "thesis wrong format": lambda tmp: ["thesis", ROOT / "gpusolve" / "profiles" / "vgg16_b64.json", "--json"],
    "curve below minimum": lambda tmp: ["curve", "resnet50_b128", "--max-budget", "1GiB", "--out", tmp / "c.png"],
    "directory as profile": lambda tmp: ["solve", tmp, "--budget", "1GiB"],
}


def _write(path, text):
    path.write_text(text)
    return path


def _check_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("gpusolve: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert res.stdout == ""


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_is_one_line_exit_2(case, tmp_path):
    _check_error(run(*BAD_CASES[case](tmp_path)))


def test_budget_below_minimum_names_the_minimum():
    from gpusolve import Chain
    from gpusolve.dp.minpeak import min_feasible_bytes
    low = min_feasible_bytes(Chain.load(ROOT / "gpusolve" / "profiles" / "resnet50_b128.json"))
    _check_error(run("solve", "resnet50_b128", "--budget", "1GiB", "--backend", "cpu"), "minimum", str(low))
    _check_error(run("compare", "resnet50_b128", "--budget", "1GiB"), "minimum", str(low))


def test_cuda_requested_but_unavailable():
    if _cuda_available():
        pytest.skip("a CUDA device is available here")
    _check_error(run("solve", "resnet50_b128", "--budget", "5GiB", "--backend", "cuda"), "CUDA")


def test_main_function_returns_code(capsys):
    from gpusolve.cli import main
    assert main(["solve", "resnet50_b128", "--budget", "1KiB", "--backend", "cpu"]) == 2
    assert capsys.readouterr().err.startswith("gpusolve: error:")
    assert main(["solve", "resnet50_b128", "--budget", "6GiB", "--backend", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["feasible"]


# ---------------------------------------------------------------------------- help, version, profiles, thesis data
def test_no_command_prints_the_commands():
    res = run()
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("usage: gpusolve")
    for command in ("solve", "compare", "curve", "thesis", "demo", "profiles", "--version"):
        assert command in res.stderr


def test_version_from_package_metadata(capsys):
    from importlib.metadata import version

    import gpusolve
    from gpusolve.cli import main
    res = run("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"gpusolve {version('gpusolve')}\n"
    assert version("gpusolve") == gpusolve.__version__
    assert main(["--version"]) == 0  # returns, as for every other command, instead of raising SystemExit
    assert capsys.readouterr().out.strip() == f"gpusolve {version('gpusolve')}"


def test_negative_budget_names_the_value_and_the_fix():
    for args in (["--budget", "-5GiB"], ["--budget=-5GiB"]):
        _check_error(run("solve", "resnet50_b128", *args), "budget '-5GiB' is negative", "e.g. '5GiB'")
    _check_error(run("solve", "resnet50_b128", "--budget", "6GiB", "--bucket", "-1MiB"), "bucket '-1MiB' is negative")


def test_profiles_json_and_counts():
    from gpusolve import profiles
    res = run("profiles", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)  # exactly one JSON object
    records = {r["name"]: r for r in data["profiles"]}
    assert sorted(records) == profiles.names()
    assert (records["vgg16_b64"]["stages"], records["vgg16_b64"]["profiled_stages"]) == (25, 40)
    assert (records["densenet121_fine_b32"]["stages"], records["densenet121_fine_b32"]["profiled_stages"]) == (363, 367)
    for r in records.values():
        assert r["stages"] + r["merged_in_place"] + r["merged_unsaved"] == r["profiled_stages"]
        assert r["device"] and r["store_all_peak_bytes"] > 0 and Path(r["path"]).is_file()
    for r in records.values():
        reference = json.loads(Path(r["path"]).read_text())["reference"]["store_all_peak_bytes"]
        assert r["measured_store_all_peak_bytes"] == reference
    human = run("profiles")
    assert "25 stages (40 profiled; 15 in-place stages merged)" in human.stdout
    assert "model +27.5 %" in human.stdout and "read conservatively" in human.stdout  # densenet121_b64


def test_thesis_defaults_to_the_bundled_cases(tmp_path):
    res = run("thesis", "--json", cwd=tmp_path)  # anywhere: the cases ship with the package
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json.loads(run("thesis", THESIS, "--json").stdout)
    human = run("thesis", cwd=tmp_path)
    assert human.returncode == 0 and "DIFFERS" not in human.stdout and "matches the file" in human.stdout


def test_thesis_cases_are_package_data():
    import tomllib

    import gpusolve
    assert THESIS_CASES.parent == Path(gpusolve.__file__).resolve().parent / "data" and THESIS_CASES.is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "gpusolve.data" in config["packages"] and "*.json" in config["package-data"]["gpusolve.data"]
    assert not (ROOT / "tests" / "thesis_dp_cases.json").exists()  # one copy


# ---------------------------------------------------------------------------- plot output
@pytest.mark.parametrize(("suffix", "magic"), [(".pdf", b"%PDF"), (".svg", b"<?xml"), (".PNG", PNG_MAGIC)])
def test_curve_writes_the_format_its_extension_names(tmp_path, suffix, magic):
    out = tmp_path / f"vgg{suffix}"
    res = run("curve", "vgg16_b64", "--max-budget", "4.5GiB", "--backend", "cpu", "--out", out)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:len(magic)] == magic
    if suffix == ".svg":
        assert b"<svg" in out.read_bytes()[:1000]


def test_curve_axes_fit_the_data_and_the_legend_covers_none(monkeypatch, tmp_path):
    import matplotlib.pyplot as plt

    from gpusolve import Chain
    from gpusolve.plot import curve_data, plot_curve
    data = curve_data(Chain.load("vgg16_b64"), backend="cpu")
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    assert plot_curve(data, tmp_path / "vgg") == tmp_path / "vgg.png"  # no extension: PNG
    (fig,) = figures
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    data_low = data["min_feasible_bytes"] / 2**30
    data_high = data["max_budget_bytes"] / 2**30
    span = data_high - data_low
    assert data_low - 0.1 * span < low < data_low and data_high < high < data_high + 0.1 * span  # not from 0
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.y1 <= ax.get_window_extent(renderer).y0  # below the axes: it hides no point
    assert legend.y0 >= 0  # and inside the figure
    monkeypatch.undo()
    plt.close(fig)


# ---------------------------------------------------------------------------- progress
def test_progress_counts_work_not_pairs():
    from gpusolve.progress import PairsToWork, diagonal_work, table_work
    n, columns = 9, 4
    assert table_work(n, columns) == sum((n + 1 - d) * d for d in range(1, n + 1)) * columns
    got = []
    meter = PairsToWork(n, columns, got.append)
    for d in range(1, n + 1):  # a diagonal at a time, as the CPU backend reports it
        meter(n + 1 - d)
        assert meter.work == int(diagonal_work(n)[:d].sum()) * columns
    assert sum(got) == table_work(n, columns)
    meter(5)  # past the end: never more than the total
    assert meter.work == table_work(n, columns)
    # Half the pairs of the 363-stage profile are a small part of its work (the old bar's error).
    big = PairsToWork(363, 1, lambda w: None)
    assert big.work_at(363 * 364 // 4) < 0.25 * table_work(363)  # ~21 %
    assert big.work_at(1) == 1 and big.work_at(364) == 363 + 2  # diagonal 1 weighs 1, diagonal 2 weighs 2


def test_progress_of_the_cpu_backend_reaches_the_whole_table():
    import numpy as np
    from conftest import random_chain

    from gpusolve.dp import cpu
    from gpusolve.dp.problem import Problem
    from gpusolve.progress import PairsToWork, table_work
    chain = random_chain(np.random.default_rng(3), 12)
    problem = Problem.build(chain, 1, 40)
    meter = PairsToWork(problem.n, problem.buckets + 1, lambda w: None)
    cpu.solve_table(problem, meter)
    assert meter.pairs == problem.pairs and meter.work == table_work(problem.n, problem.buckets + 1)


def test_progress_lines_off_a_terminal():
    import io

    from gpusolve import progress
    now = [0.0]
    out = io.StringIO()
    lines = progress.LineProgress(1000, "solving", out, clock=lambda: now[0])
    lines.update(50)  # before the delay: quiet
    assert out.getvalue() == ""
    now[0] = progress.PROGRESS_DELAY_S + 0.5
    lines.update(50)  # 10 % after 2.5 s: about 22.5 s left
    assert out.getvalue() == "gpusolve: solving: 10 % after 2 s, about 22 s left\n"
    now[0] += 1.0
    lines.update(100)  # a new tenth, but too soon after the last line
    assert out.getvalue().count("\n") == 1
    now[0] += progress.LINE_EVERY_S
    lines.update(100)
    assert out.getvalue().splitlines()[-1].startswith("gpusolve: solving: 30 % after")
    lines.close()
    assert out.getvalue().splitlines()[-1] == f"gpusolve: solving: done in {now[0]:.0f} s"
    quick = io.StringIO()
    short = progress.LineProgress(1000, "solving", quick, clock=lambda: 0.5)
    short.update(1000)
    short.close()
    assert quick.getvalue() == ""  # a short solve prints nothing


def test_progress_goes_to_stderr_and_json_stays_clean(monkeypatch, capsys):
    from gpusolve import Chain, progress, solve
    from gpusolve.cli import main
    solve_module = sys.modules["gpusolve.solve"]  # the module (gpusolve.solve is the function)
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 0.0)  # as if the solve were long
    monkeypatch.setattr(solve_module, "PROGRESS_THRESHOLD", 0)
    assert main(["solve", "vgg16_b64", "--budget", "4.5GiB", "--backend", "cpu", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["feasible"]
    lines = captured.err.splitlines()
    assert lines[0].startswith("gpusolve: solving 25 stages x ") and " % after " in lines[0]
    assert lines[-1].startswith("gpusolve: solving 25 stages x ") and "done in" in lines[-1]
    # The Python API: the same by default, nothing with progress=False.
    chain = Chain.load("vgg16_b64")
    solve(chain, "4.5GiB", backend="cpu")
    assert "done in" in capsys.readouterr().err
    solve(chain, "4.5GiB", backend="cpu", progress=False)
    assert capsys.readouterr().err == ""
    solve(chain, "4.5GiB", backend="exact", progress=True)
    assert "solving 25 stages (exact)" in capsys.readouterr().err


def test_the_curves_optimal_line_is_below_every_baseline_and_starts_at_the_minimum():
    # a review: the line was the bucketed table only; baselines (exact bytes) were drawn below it at 10 points
    # (store-all at the store-all peak among them), and it had no point at the least feasible budget
    import numpy as np

    from gpusolve import Chain
    from gpusolve.plot import curve_data
    chain = Chain.load("densenet121_b64")
    data = curve_data(chain, backend="cpu")
    budgets, times = np.array(data["optimal"]["budget_bytes"]), np.array(data["optimal"]["time_ms"])
    assert np.all(np.diff(budgets) > 0) and np.all(np.diff(times) <= 0)

    def line_at(b):
        k = np.searchsorted(budgets, b, side="right") - 1
        return times[k] if k >= 0 else np.inf
    assert budgets[0] == data["min_feasible_bytes"] and budgets[-1] == data["max_budget_bytes"]
    assert line_at(data["max_budget_bytes"]) == data["store_all_time_ms"]
    points = dict(data["baselines"])
    fixed = points.pop("points")
    for name, series in points.items():
        for b, t in zip(data["grid_bytes"], series, strict=True):
            assert t is None or line_at(b) <= t + 1e-9, (name, b, t, line_at(b))
    for name, (peak, t) in fixed.items():
        assert peak > data["max_budget_bytes"] or line_at(peak) <= t + 1e-9, (name, peak, t)


def test_python_m_gpusolve_runs_the_command():
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "gpusolve", "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("gpusolve "), res.stderr


def test_solve_budgets_plans_are_each_their_own():
    # the diff review: every lower plan carried the top plan's note, and the top plan's timings grew afterwards
    from gpusolve import Chain, solve
    from gpusolve.solve import solve_budgets
    chain = Chain.load("densenet121_b64")
    alone = solve(chain, "100%", backend="cpu")
    low = alone.min_feasible_bytes
    grid = [low, (low + alone.budget_bytes) // 2]
    top, below = solve_budgets(chain, "100%", grid, backend="cpu")
    assert top.notes == alone.notes and top.predicted_time_ms == alone.predicted_time_ms
    for plan, budget in zip(below, grid, strict=True):
        assert plan.budget_bytes == budget and plan.predicted_peak_bytes <= budget
        assert not any("store-all" in n for n in plan.notes), plan.notes  # the top plan's note
    assert sum(v for k, v in top.timings.items() if k == "recover") <= top.solve_seconds


def test_the_cpu_fallback_note_goes_to_stderr_once_and_not_to_stdout():
    # a review: printed twice, once on stdout among the plan's lines (`> plan.txt` captured it)
    from gpusolve.solve import _pick_backend
    notes: list = []
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if _pick_backend("auto", notes)[0] == "cuda":
            pytest.skip("CUDA runs here: no fallback")
    res = run("solve", "densenet121_b64", "--budget", "50%")
    assert res.returncode == 0, res.stderr
    assert "CUDA backend unavailable" not in res.stdout and "predicted step" in res.stdout
    assert res.stderr.count("CUDA backend unavailable") == 1
    plan = json.loads(run("solve", "densenet121_b64", "--budget", "50%", "--json").stdout)
    assert any("CUDA backend unavailable" in n for n in plan["notes"])  # the JSON keeps every note


def test_the_curves_plans_come_from_a_ladder_of_tables():
    # a review: every grid plan came from the top's table, whose bucket was coarse at the low budgets: on
    # densenet121_fine_b32 the line was at 205.81 ms at the least budget, where solve() gives 95.18 ms
    # (Note [A ladder of tables] in gpusolve/plot.py; that profile takes a minute here: densenet121_b64, 7.6x)
    import numpy as np

    from gpusolve import Chain
    from gpusolve.plot import LADDER, curve_data, ladder_plans
    from gpusolve.solve import solve, solve_budgets
    chain = Chain.load("densenet121_b64")
    data = curve_data(chain, backend="cpu")
    low, top = data["min_feasible_bytes"], data["max_budget_bytes"]
    assert top > LADDER * low  # the case: more than one table
    grid = data["grid_bytes"]
    tables, plans = ladder_plans(lambda at, below: solve_budgets(chain, at, below, backend="cpu"), top, grid)
    # two tables of the ladder, and the least budget solved alone (its table's rounded sizes fit nothing there)
    assert [t.budget_bytes for t in tables] == [top, max(b for b in grid if b * LADDER < top), low]
    assert {p.budget_bytes for p in plans} == set(grid) | {top}
    for p in plans:  # each from a table at most LADDER times above it: at least 1024 / LADDER of its own buckets
        assert p.feasible and p.budget_bytes // p.bucket_bytes >= 1024 // LADDER - 1, p.budget_bytes
    one = solve_budgets(chain, top, grid, backend="cpu")[1]  # the single table's plans, for comparison
    line = data["optimal"]

    def line_at(b):
        k = np.searchsorted(line["budget_bytes"], b, side="right") - 1
        return line["time_ms"][k]
    for p in one:
        assert line_at(p.budget_bytes) <= p.predicted_time_ms
    alone = solve(chain, low, backend="cpu")
    assert line_at(low) <= alone.predicted_time_ms * (1 + 1e-3)  # the least budget: as solve() there, or better
    tables, _ = ladder_plans(lambda at, below: solve_budgets(chain, at, below, bucket=4 << 20, backend="cpu"),
                             top, grid, ladder=False)
    assert len(tables) == 1  # a user's bucket: one table


def test_the_plots_axis_unit_follows_the_sizes():
    # a review: a 16 MiB profile's axis read 0.009 to 0.016 "(GiB)", its summary "tape 0.01 GiB"
    from gpusolve.plot import axis_unit
    assert axis_unit(16 * 2**20) == (2.0**20, "MiB") and axis_unit(5 * 2**30) == (2.0**30, "GiB")
    assert axis_unit(3000) == (1024.0, "KiB") and axis_unit(500) == (1.0, "B")
    from gpusolve import Chain
    one = [1.0]
    chain = Chain(t_fwd=one, t_fwd_nograd=one, t_bwd=one, act_bytes=[10 << 20], grad_bytes=[0],
                  tape_bytes=[10 << 20], fwd_nograd_extra=[0], fwd_grad_extra=[0], bwd_extra=[0])
    assert "tape 10.00 MiB" in chain.summary()


def test_the_curves_later_work_reports_its_progress(capsys, monkeypatch):
    # a review: after the table's progress said "done", `gpusolve curve densenet121_fine_b32` went on silently
    # for 11.5 s (the plans at the lower budgets, the baselines)
    import gpusolve.progress as P
    from gpusolve import Chain
    from gpusolve.baselines import baseline_curves
    from gpusolve.simulate import store_all_peak_bytes
    from gpusolve.solve import solve_budgets
    chain = Chain.load("densenet121_b64")
    top = store_all_peak_bytes(chain)
    grid = [int(top * f) for f in (0.5, 0.6, 0.7, 0.8)]
    monkeypatch.setattr(P, "PROGRESS_DELAY_S", 0.0)  # every phase long enough to report
    solve_budgets(chain, top, grid, backend="cpu", progress=False)
    baseline_curves(chain, grid, progress=False)
    assert capsys.readouterr().err == ""
    solve_budgets(chain, top, grid, backend="cpu", progress=None)
    baseline_curves(chain, grid)
    err = capsys.readouterr().err
    assert "gpusolve: plans at 4 lower budgets (cpu):" in err and "gpusolve: the baselines at 4 budgets:" in err
