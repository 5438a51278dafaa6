"""bench/gpu_session.py, the runner of the GPU sessions' work, checked without a GPU: its time rules
(limits, skips), what it leaves under --out, and that every bench command it runs still matches the
script's command line (a renamed flag would only show on the device, at its cost)."""
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
from gpu_session import Step  # noqa: E402


def test_limits_skips_and_outputs(tmp_path, monkeypatch):
    steps = [Step("ok", 9, 20, 1, "echo hello > {R}/hello.txt && echo said hello"),
             Step("slow", 9, 1, 1, "sleep 5"),
             Step("fails", 9, 20, 1, "exit 4"),
             Step("greedy", 9, 20, 10_000, "echo never")]
    monkeypatch.setattr(gpu_session, "STEPS", steps)
    rc = gpu_session.run_stage(9, tmp_path, seconds=60, dry_run=False, only=None)
    assert rc == 1
    summary = json.loads((tmp_path / "stage9_summary.json").read_text())
    by = {s["name"]: s for s in summary["steps"]}
    assert by["ok"]["rc"] == 0 and by["slow"]["rc"] == "timeout" and by["slow"]["seconds"] < 4
    assert by["fails"]["rc"] == 4 and "skipped" in by["greedy"]
    log = (tmp_path / "stage9.log").read_text()
    assert "said hello" in log and "greedy: SKIPPED" in log and "never" not in log.replace("echo never", "")
    with tarfile.open(tmp_path / "stage9_results.tar.gz") as tar:
        assert "stage9_results/hello.txt" in tar.getnames()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stage9.log", "stage9_results.tar.gz",
                                                         "stage9_summary.json"]  # well under 8 files


def test_a_timeout_kills_the_whole_pipeline(tmp_path, monkeypatch):
    marker = tmp_path / "survived"
    monkeypatch.setattr(gpu_session, "STEPS", [Step("pipe", 9, 1, 1, f"(sleep 3; touch {marker}) | cat")])
    gpu_session.run_stage(9, tmp_path / "out", seconds=30, dry_run=False, only=None)
    time.sleep(3.5)
    assert not marker.exists(), "a process of the timed-out step went on running"


def test_a_step_gets_at_most_what_is_left(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_session, "STEPS", [Step("long", 9, 100, 1, "sleep 10")])
    gpu_session.run_stage(9, tmp_path, seconds=2, dry_run=False, only=None)
    step = json.loads((tmp_path / "stage9_summary.json").read_text())["steps"][0]
    assert step["rc"] == "timeout" and step["seconds"] < 5


def bench_invocations():
    """(script, flags) of every ``bench/*.py`` command in the runner's steps."""
    for step in gpu_session.STEPS:
        command = step.render(Path("/tmp/r"), "cuda,cpu")
        for match in re.finditer(r"bench/(\w+\.py)((?:\s+--[\w-]+(?:\s+[^-\s|&;][^\s|&;]*)*)*)", command):
            yield step.name, match.group(1), re.findall(r"--[\w-]+", match.group(2))


@pytest.mark.parametrize("name,script,flags", list(bench_invocations()))
def test_bench_commands_match_the_scripts(name, script, flags):
    path = ROOT / "bench" / script
    assert path.exists(), f"step {name}: bench/{script} is gone"
    if script == "gpu_sanitize.py":
        assert flags == []
        return
    help_text = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                               cwd=ROOT, timeout=120).stdout
    for flag in flags:
        assert flag in help_text, f"step {name}: bench/{script} has no {flag}"
