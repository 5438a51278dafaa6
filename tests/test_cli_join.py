"""``gpusolve join PROFILE PROFILE [...] --budget B``: the byte-model join DP on branch profiles
(JSON contract, the comparison table, and one-line errors with exit code 2)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpusolve import Chain
from gpusolve.cli import main
from gpusolve.join.bytesim import simulate_join, store_all_join_peak_bytes
from gpusolve.join.dp import min_peak_join
from gpusolve.join.network import JoinNet, Turn
from gpusolve.schedule import schedule_from_json

from conftest import cuda_device_reason

ROOT = Path(__file__).resolve().parent.parent
PLAN_KEYS = {"feasible", "predicted_time_ms", "predicted_peak_bytes", "budget_bytes", "bucket_bytes", "buckets",
             "solve_seconds", "timings", "min_feasible_bytes", "store_all_time_ms", "overhead", "decided_by", "notes",
             "curve", "schedule"}
RECORD_KEYS = {"name", "time_ms", "peak_bytes", "overhead", "feasible", "detail"}


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, *argv, contains=()):
    code, out, err = cli(capsys, "join", *argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("gpusolve: error: "), err
    for text in contains:
        assert text in err, err
    return err


@pytest.fixture
def small(tmp_path):
    """Two small chains as JSON files (a fast join)."""
    a = Chain.uniform(6, t_fwd=1.0, t_bwd=2.0, act_bytes=1 << 20)
    b = Chain.uniform(4, t_fwd=2.0, t_bwd=3.0, act_bytes=2 << 20)
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    a.to_json(paths[0])
    b.to_json(paths[1])
    return paths, [a, b]


def test_json_plan_resimulates_within_budget(capsys):
    code, out, err = cli(capsys, "join", "resnet50_b128", "resnet50_b128", "--budget", "50%", "--turn-ms", "1.5",
                         "--turn-bytes", "64KiB", "--backend", "cpu", "--json")
    assert code == 0 and err == "", err
    data = json.loads(out)  # exactly one JSON object
    assert set(data) == {"branches", "turn", "store_all_peak_bytes", "plan"}
    plan = data["plan"]
    assert PLAN_KEYS <= set(plan) and plan["feasible"]
    assert plan.get("backend", "cpu") == "cpu"
    assert [b["stages"] for b in data["branches"]] == [21, 21]
    assert data["turn"] == {"time_ms": 1.5, "bytes": 64 * 1024}
    chain = Chain.load("resnet50_b128")
    net = JoinNet([chain, chain], Turn(t_fwd=1.5, bwd_extra=64 * 1024))
    assert data["store_all_peak_bytes"] == store_all_join_peak_bytes(net)
    assert plan["budget_bytes"] == store_all_join_peak_bytes(net) // 2  # % of the join's store-all peak
    assert plan["bucket_bytes"] * plan["buckets"] <= plan["budget_bytes"]
    assert plan["store_all_time_ms"] == pytest.approx(net.store_all_time_ms())
    schedule = schedule_from_json(plan["schedule"])
    assert all(op.branch in (0, 1) for op in schedule if op.kind.value != "turn")
    sim = simulate_join(net, schedule)
    assert sim.peak_bytes == plan["predicted_peak_bytes"] <= plan["budget_bytes"]
    assert sim.time_ms == pytest.approx(plan["predicted_time_ms"], rel=1e-12)
    assert plan["min_feasible_bytes"] == min_peak_join(net).min_bytes


def test_compare_json_and_table(capsys, small):
    paths, _ = small
    code, out, err = cli(capsys, "join", *paths, "--budget", "60%", "--bucket", "4KiB", "--compare", "--json")
    assert code == 0, err
    data = json.loads(out)
    records = data["records"]
    assert [r["name"] for r in records] == ["optimal (join DP)", "store-all", "split budget (chain DP per branch)",
                                            "EQUIV-CHAIN (levels)"]
    assert all(set(r) == RECORD_KEYS for r in records)
    assert data["plan"]["bucket_bytes"] == 4096
    best = records[0]["time_ms"]
    assert best == data["plan"]["predicted_time_ms"]
    assert not records[1]["feasible"]  # store-all does not fit 60 % of its own peak
    # but its time and peak are shown, as the chain comparison shows them (a review: '-' in every column)
    assert records[1]["time_ms"] == pytest.approx(data["store_all_time_ms"] if "store_all_time_ms" in data
                                                  else data["plan"]["store_all_time_ms"], rel=1e-12)
    assert records[1]["peak_bytes"] > data["plan"]["budget_bytes"] and records[1]["overhead"] == 0.0
    for r in records[1:]:
        assert not r["feasible"] or (r["time_ms"] >= best and r["peak_bytes"] <= data["plan"]["budget_bytes"])
    code, out, err = cli(capsys, "join", *paths, "--budget", "60%", "--bucket", "4KiB", "--compare")
    assert code == 0, err
    assert "join of 2 branches" in out and "predicted step" in out
    for name in ("optimal (join DP)", "store-all", "split budget", "EQUIV-CHAIN", "step (ms)", "overhead"):
        assert name in out


def test_full_budget_is_store_all_and_turn_time_counts(capsys, small):
    paths, chains = small
    code, out, _ = cli(capsys, "join", *paths, "--budget", "100%", "--turn-ms", "2", "--json")
    assert code == 0
    plan = json.loads(out)["plan"]
    store = sum(float(c.t_fwd.sum() + c.t_bwd.sum()) for c in chains) + 2.0
    assert plan["store_all_time_ms"] == pytest.approx(store)
    assert plan["predicted_time_ms"] == pytest.approx(store) and plan["overhead"] == pytest.approx(0.0, abs=1e-12)


def test_three_branches_mixing_a_bundled_profile_and_paths(capsys, small):
    paths, _ = small
    code, out, err = cli(capsys, "join", paths[0], paths[1], paths[0], "--budget", "40%", "--backend", "cpu", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["branches"]) == 3 and data["plan"]["feasible"]
    assert {op[3] for op in data["plan"]["schedule"] if op[0] != "turn"} == {0, 1, 2}


def test_budget_in_bytes_and_summary(capsys, small):
    paths, _ = small
    code, out, _ = cli(capsys, "join", *paths, "--budget", "12MiB")
    assert code == 0
    assert "budget 12.00 MiB" in out and "join DP minimum" in out


def test_budget_below_minimum_names_it(capsys, small):
    paths, chains = small
    low = min_peak_join(JoinNet(chains, Turn())).min_bytes
    one_line_error(capsys, *paths, "--budget", "1KiB", contains=("minimum", str(low)))


@pytest.mark.parametrize("argv,contains", [
    ([], ("at least 2 branch profiles", "got 0")),
    (["resnet50_b128", "--budget", "50%"], ("at least 2 branch profiles", "got 1", "gpusolve solve")),
    (["resnet50_b128", "resnet50_b128"], ("needs --budget",)),
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--turn-ms", "-1"], ("--turn-ms -1", ">= 0")),
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--turn-ms", "nan"], ("--turn-ms nan", "finite")),
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--turn-ms", "fast"], ("--turn-ms 'fast'",)),
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--turn-bytes", "-5"], ("--turn-bytes",)),
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--turn-bytes", "lots"], ("--turn-bytes",)),
    (["resnet50_b128", "resnet50_b128", "--budget", "half"], ("budget",)),
    (["resnet50_b128", "no_such_profile", "--budget", "50%"], ("no_such_profile",)),
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--backend", "exact"], ("--backend",)),
    (["--paper", "resnet50_b128", "resnet50_b128", "--lengths", "2,2", "--slots", "7"], ("--paper", "PROFILE")),
    (["--paper", "--lengths", "2,2", "--slots", "7", "--budget", "50%"], ("--budget",)),
    (["--lengths", "10,50", "--slots", "5"], ("add --paper",)),
])
def test_errors_are_one_line(capsys, argv, contains):
    one_line_error(capsys, *argv, contains=contains)


def test_cuda_requested_but_unavailable(capsys):
    if cuda_device_reason() is None:
        pytest.skip("a CUDA device is available here")
    err = one_line_error(capsys, "resnet50_b128", "resnet50_b128", "--budget", "50%", "--backend", "cuda")
    assert "cuda" in err.lower()


def test_paper_mode_unchanged(capsys):
    code, out, err = cli(capsys, "join", "--paper", "--lengths", "2,2,2", "--slots", "6..9", "--json")
    assert code == 0 and err == ""
    assert json.loads(out)["curve"][1] == {"slots": 7, "makespan": 15}


def test_entry_point_subprocess():
    res = subprocess.run([sys.executable, "-m", "gpusolve.cli", "join", "resnet50_b128", "densenet121_b64",
                          "--budget", "35%", "--compare"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "optimal (join DP)" in res.stdout and "EQUIV-CHAIN" in res.stdout


def test_a_thesis_join_says_store_all_is_outside_its_class(capsys, tmp_path):
    # its store-all peak (3 B) is printed beside a least budget of 4 B: the header says why
    from gpusolve.data import THESIS_CASES
    case = next(c for c in json.loads(THESIS_CASES.read_text())["cases"] if c["name"] == "uniform_N20")
    path = tmp_path / "thesis.json"
    path.write_text(Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"]).to_json())
    code, out, _ = cli(capsys, "join", str(path), str(path), "--budget", "4", "--turn-ms", "1", "--backend", "cpu",
                       "--compare")
    assert code == 0
    assert "peak 3 B, step" in out and "(outside the thesis model's class" in out and "join DP minimum 4 B" in out
    assert "beat the plan" not in out
