"""examples/train.py builds the model its --model names (a review: 'tvdensenet' built the small DenseNet)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import train  # noqa: E402


@pytest.mark.parametrize("name,cls", [("resnet", "ResNet"), ("densenet", "DenseNet"), ("tvdensenet", "TVDenseNet")])
def test_build_makes_the_named_model(name, cls):
    model, make_batch, _ = train.build(name, batch=2, size=32, classes=10, device="cpu")
    assert type(model).__name__ == cls


def test_a_backend_that_cannot_run_is_one_error_line():
    # a review: --backend cuda without a device gave a 42-line traceback (--device cuda gave one line)
    import subprocess
    try:
        from gpusolve.dp import cuda
        cuda.ensure_available()
        pytest.skip("the CUDA backend runs here")
    except Exception:  # noqa: BLE001 (ImportError, BackendUnavailableError)
        pass
    script = Path(train.__file__)
    res = subprocess.run([sys.executable, str(script), "--model", "resnet", "--backend", "cuda", "--steps", "1",
                          "--batch", "2", "--size", "32"], capture_output=True, text=True, timeout=300,
                         cwd=script.parent)
    # progress lines of profiling that ran long (a loaded machine) are not errors
    progress = re.compile(r"^gpusolve: .*(\d+ % after .* left|done in .*)$")
    lines = [line for line in res.stderr.splitlines() if line.strip() and "USDT" not in line
             and not progress.match(line)]
    assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith("train.py: error: the CUDA backend"), \
        res.stderr
