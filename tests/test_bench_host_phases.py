"""bench/host_phases.py stays runnable (it times other checkouts of the code side by side)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_host_phases_runs_and_records(tmp_path):
    out = tmp_path / "phases.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "host_phases.py"), "--profile", "resnet50_b128",
                           "--buckets", "16", "--repeats", "2", "--json", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert set(record["median_ms"]) == {"segment candidates", "policy_peak_bytes", "tree from quads",
                                        "schedule + simulate"}
    assert all(v >= 0 for v in record["median_ms"].values()) and record["policy_states"] > 0
    assert record["gpusolve"] == str(ROOT / "gpusolve") and record["device"]
