"""bench/geometry_sweep.py before it meets a GPU: its arguments, and one run to its end with the CPU DP
standing in for the CUDA fill (what the device answers is faked; the sweep's own logic is not)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import geometry_sweep as sweep  # noqa: E402

from gpusolve.dp import cpu, cuda  # noqa: E402


def test_parse_geometry_and_label():
    g = sweep.parse_geometry("band=12, bulk_ktile=4")
    assert (g.band, g.bulk_ktile, g.diag_threads) == (12, 4, cuda.Geometry().diag_threads)
    assert sweep.label(g) == "band=12,bulk_ktile=4" and sweep.label(sweep.parse_geometry("")) == "default"
    with pytest.raises(ValueError, match="unknown field 'bnd'"):
        sweep.parse_geometry("bnd=3")
    with pytest.raises(ValueError, match="needs an int"):
        sweep.parse_geometry("band=x")
    with pytest.raises(ValueError, match="multiple of 32"):  # Geometry's own check
        sweep.parse_geometry("bulk_threads=100")


def test_sweep_runs_to_its_end_and_flags_a_geometry_that_disagrees(tmp_path, monkeypatch):
    fills = []

    def fill(problem, progress=None, timings=None, band=True, geometry=None):
        fills.append(geometry)
        table = cpu.fill(problem, progress, timings)
        if geometry is not None and geometry.band == 5:  # a wrong kernel: one bucket's value changes
            table.curve = table.curve.copy()
            table.curve[-1] += 1.0
        return table

    fake = SimpleNamespace(__version__="fake", cuda=SimpleNamespace(
        runtime=SimpleNamespace(getDeviceProperties=lambda i: {"name": b"Fake GPU"}),
        Device=lambda: SimpleNamespace(id=0), get_current_stream=lambda: SimpleNamespace(synchronize=lambda: None)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(cuda, "ensure_available", lambda geometry=None: None)
    monkeypatch.setattr(cuda, "fill", fill)
    monkeypatch.setattr(cuda, "release", lambda: None)
    monkeypatch.setattr(cuda._MODULES, "get", lambda g, timings=None: SimpleNamespace(
        get_function=lambda name: SimpleNamespace(num_regs=g.band * 10)))
    rc = sweep.main(["--profile", "resnet50_b128", "--buckets", "32", "--repeats", "2", "--geometry", "band=4",
                     "--geometry", "band=5", "--out", str(tmp_path)])
    assert rc == 1  # band=5's curve differs
    record = json.loads((tmp_path / "geometry_sweep_fake_gpu.json").read_text())
    rows = {r["geometry"]: r for r in record["rows"]}
    assert list(rows) == ["default", "band=4", "band=5"] and len(fills) == 3 * 3
    assert rows["band=4"]["same_as_default"] and rows["band=4"]["registers"]["dp_bulk"] == 40
    assert not rows["band=5"]["same_as_default"] and "differs" in rows["band=5"]["error"]
    assert len(rows["default"]["dp_ms_each"]) == 2 and rows["default"]["dp_ms"] > 0
    md = (tmp_path / "geometry_sweep_fake_gpu.md").read_text()
    assert "| band=5 |" in md and "NO" in md and record["command"].startswith("python bench/geometry_sweep.py")
