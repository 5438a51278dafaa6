"""examples/train.py builds the model its --model names (a review: 'tvdensenet' built the small DenseNet)."""
from __future__ import annotations

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
