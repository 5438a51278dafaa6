"""bench/gpu_session.py, the runner of the GPU sessions' work, checked without a GPU: its time rules
(limits, skips), what it leaves under --out, the ledger that carries the work from one lent GPU to the
next, and that every bench command it runs still matches the script's command line (a renamed flag
would only show on the device, at its cost)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_session  # noqa: E402
from gpu_session import SETUP, Step  # noqa: E402


def test_limits_skips_and_outputs(tmp_path, monkeypatch):
    steps = [Step("ok", "9.1", 20, 1, "echo hello > {R}/hello.txt && echo said hello"),
             Step("slow", "9.1", 1, 1, "sleep 5"),
             Step("fails", "9.2", 20, 1, "exit 4"),
             Step("greedy", "9.2", 20, 10_000, "echo never")]
    monkeypatch.setattr(gpu_session, "STEPS", [Step("setup-step", SETUP, 20, 1, "echo set up")] + steps)
    rc = gpu_session.run_steps(steps, tmp_path, seconds=60, dry_run=False)
    assert rc == 1
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert [s["name"] for s in summary["steps"]] == ["setup-step", "ok", "slow", "fails", "greedy"]
    by = {s["name"]: s for s in summary["steps"]}
    assert by["ok"]["rc"] == 0 and by["slow"]["rc"] == "timeout" and by["slow"]["seconds"] < 4
    assert by["fails"]["rc"] == 4 and "skipped" in by["greedy"] and by["ok"]["item"] == "9.1"
    assert summary["device"] and summary["started"]
    log = (tmp_path / "run.log").read_text()
    assert "said hello" in log and "greedy: SKIPPED" in log and "never" not in log.replace("echo never", "")
    with tarfile.open(tmp_path / "run_results.tar.gz") as tar:
        assert "run_results/hello.txt" in tar.getnames()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.log", "run_results.tar.gz",
                                                         "run_summary.json"]  # well under 8 files


def test_a_timeout_kills_the_whole_pipeline(tmp_path, monkeypatch):
    marker = tmp_path / "survived"
    steps = [Step("pipe", "9.1", 1, 1, f"(sleep 3; touch {marker}) | cat")]
    monkeypatch.setattr(gpu_session, "STEPS", steps)
    gpu_session.run_steps(steps, tmp_path / "out", seconds=30, dry_run=False)
    time.sleep(3.5)
    assert not marker.exists(), "a process of the timed-out step went on running"


def test_a_step_gets_at_most_what_is_left(tmp_path, monkeypatch):
    steps = [Step("long", "9.1", 100, 1, "sleep 10")]
    monkeypatch.setattr(gpu_session, "STEPS", steps)
    gpu_session.run_steps(steps, tmp_path, seconds=2, dry_run=False)
    step = json.loads((tmp_path / "run_summary.json").read_text())["steps"][0]
    assert step["rc"] == "timeout" and step["seconds"] < 5


def test_the_ledger_carries_the_work_to_the_next_gpu(tmp_path, monkeypatch):
    """A call's results are recorded here; a step that ran to its end is no longer pending, a failed or
    skipped one still is; the same call is not recorded twice."""
    steps = [Step("a", "9.1", 20, 1, "echo A > {R}/a.json"), Step("b", "9.1", 20, 1, "exit 3"),
             Step("c", "9.2", 20, 10_000, "true"), Step("d", "9.2", 20, 1, "mkdir -p {R}/sub && echo D > {R}/sub/d.md")]
    monkeypatch.setattr(gpu_session, "STEPS", [Step("setup-step", SETUP, 20, 1, "true")] + steps)
    ledger, runs = tmp_path / "ledger.json", tmp_path / "repo" / "runs"
    assert [s.name for s in gpu_session.pending_steps(gpu_session.load_ledger(ledger))] == ["a", "b", "c", "d"]
    out = tmp_path / "out"
    gpu_session.run_steps(gpu_session.pending_steps(gpu_session.load_ledger(ledger)), out, seconds=60, dry_run=False)
    target = gpu_session.record(out, ledger, runs)
    assert (target / "a.json").read_text() == "A\n" and (target / "sub" / "d.md").read_text() == "D\n"
    assert (target / "run.log").exists() and (target / "run_summary.json").exists()
    data = gpu_session.load_ledger(ledger)
    assert data["format"] == gpu_session.LEDGER_FORMAT and len(data["runs"]) == 1
    assert {s["name"]: s.get("rc") for s in data["runs"][0]["steps"]} == {"setup-step": 0, "a": 0, "b": 3, "c": None,
                                                                          "d": 0}
    assert [s.name for s in gpu_session.pending_steps(data)] == ["b", "c"]
    with pytest.raises(ValueError, match="in .* already"):
        gpu_session.record(out, ledger, runs)
    listing = gpu_session.list_steps(data)
    assert re.search(r"^a +9\.1 .* done$", listing, re.M) and re.search(r"^c +9\.2 .* pending$", listing, re.M)
    assert re.search(r"^setup-step .* every call$", listing, re.M)


def test_the_command_line(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_session.py"), *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=120)
    listing = run("--list")
    assert listing.returncode == 0 and "pytest-gpu" in listing.stdout and "pending:" in listing.stdout
    bad = run("--steps", "pytest-gpu,no-such-step", "--out", str(tmp_path))
    assert bad.returncode == 2 and "no-such-step" in bad.stderr
    missing = run("--record", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.startswith("gpu_session: error:") and "files_at" in missing.stderr
    dry = run("--steps", "solver-speed-baselines", "--dry-run", "--out", str(tmp_path / "dry"))
    assert dry.returncode == 0 and "=== env" in dry.stdout and "--backends cpu" in dry.stdout
    assert "=== pytest-gpu" not in dry.stdout


def test_the_committed_ledger_reads():
    """bench/results/gpu_session_ledger.json (when there is one) names only steps that exist."""
    data = gpu_session.load_ledger()
    names = {s.name for s in gpu_session.STEPS}
    assert all(s["name"] in names for run in data["runs"] for s in run["steps"])


def bench_invocations():
    """(script, flags) of every ``bench/*.py`` command in the runner's steps."""
    for step in gpu_session.STEPS:
        command = step.render(Path("/tmp/r"), "cpu,rotor-c")
        for match in re.finditer(r"bench/(\w+\.py)((?:\s+--[\w-]+(?:\s+[^-\s|&;][^\s|&;]*)*)*)", command):
            yield step.name, match.group(1), re.findall(r"--[\w-]+", match.group(2))


@pytest.mark.parametrize("name,script,flags", list(bench_invocations()))
def test_bench_commands_match_the_scripts(name, script, flags):
    path = ROOT / "bench" / script
    assert path.exists(), f"step {name}: bench/{script} is gone"
    if script == "gpu_sanitize.py":
        assert flags == []
        return
    if re.search(r"^\s*(import torch|from torch)", path.read_text(), re.M):  # its --help needs torch too
        pytest.importorskip("torch")
    help_text = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                               cwd=ROOT, timeout=120).stdout
    for flag in flags:
        assert flag in help_text, f"step {name}: bench/{script} has no {flag}"


def test_a_call_killed_mid_run_brings_back_what_its_finished_steps_made(tmp_path, monkeypatch):
    # a review: the results were written under $OUT and archived at the end only: a call the device tool killed
    # left a folder of files past its limit of 8 (run.log among those it may drop), and --record found no summary.
    # Now the results live outside $OUT and the summary and archive are written after every step
    out = tmp_path / "out"
    seen = tmp_path / "seen"
    steps = [Step("a", "9.1", 20, 1, "echo A > {R}/a.json"),
             Step("b", "9.1", 20, 1, f"ls {out} > {seen} && tar -tzf {out}/run_results.tar.gz >> {seen}")]
    monkeypatch.setattr(gpu_session, "STEPS", steps)
    gpu_session.run_steps(steps, out, seconds=60, dry_run=False)
    listed = seen.read_text().split()
    assert "run_summary.json" in listed and "run_results.tar.gz" in listed and "run_results" not in listed
    assert "run_results/a.json" in listed  # step a's file, archived before step b ran
    assert sorted(p.name for p in out.iterdir()) == ["run.log", "run_results.tar.gz", "run_summary.json"]
    assert json.loads((out / "run_summary.json").read_text())["complete"] is True
