"""pyproject.toml lists every package: an editable install (CI's) finds any folder, a wheel only the
listed ones, so a package missing from the list breaks ``pip install .`` and nothing else shows it."""
from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed_and_the_kernels_are_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("gpusolve", "torch_exec")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), f"add {sorted(found - listed)} to [tool.setuptools] packages"
    assert listed - found == {"gpusolve.kernels"}
    assert config["package-dir"]["gpusolve.kernels"] == "kernels"
    shipped = set(config["package-data"]["gpusolve.kernels"])
    for source in (ROOT / "kernels").glob("*.cu*"):
        assert any(source.match(pattern) for pattern in shipped), f"{source.name} is not package data"
