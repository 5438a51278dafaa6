"""The command line, run as a subprocess: JSON contracts, outputs, and one-line errors (exit 2)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THESIS = ROOT / "tests" / "thesis_dp_cases.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLAN_KEYS = {"feasible", "predicted_time_ms", "predicted_peak_bytes", "budget_bytes", "bucket_bytes", "buckets",
             "backend", "solve_seconds", "min_feasible_bytes", "store_all_time_ms", "overhead", "bytes_per_state",
             "notes", "curve", "schedule", "timings"}
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


def test_solve_by_path_human():
    res = run("solve", ROOT / "gpusolve" / "profiles" / "vgg16_b64.json", "--budget", "4.5GiB", "--backend", "cpu")
    assert res.returncode == 0, res.stderr
    assert "predicted step" in res.stdout


def test_compare_json_and_table():
    res = run("compare", "resnet50_b128", "--budget", "6GiB", "--backend", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    records = out["records"]
    assert out["budget_bytes"] == 6 * 2**30
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


def test_thesis_matches_reference_exactly():
    res = run("thesis", THESIS, "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    ref = json.loads(THESIS.read_text())
    assert [c["name"] for c in got["cases"]] == [c["name"] for c in ref["cases"]]
    for mine, theirs in zip(got["cases"], ref["cases"]):
        assert mine["optimal_cost"] == theirs["optimal_cost"], mine["name"]


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
    "unknown backend": lambda tmp: ["solve", "resnet50_b128", "--budget", "5GiB", "--backend", "tpu"],
    "missing budget": lambda tmp: ["solve", "resnet50_b128"],
    "no command": lambda tmp: [],
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
