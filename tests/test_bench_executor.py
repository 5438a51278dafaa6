"""bench/executor.py's helpers that run before any GPU measurement (a failure here loses a GPU session)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import executor as bench  # noqa: E402

from gpusolve import Chain  # noqa: E402


@pytest.mark.parametrize("kind", bench.COST_MODELS)
def test_cost_models_keep_a_valid_chain_when_the_backward_holds_less_tape(kind):
    chain = Chain.uniform(5)
    chain = Chain.from_dict(dict(chain.to_dict(), tape_bytes=[4000, 900, 3000, 800, 500],
                                 bwd_tape_bytes=[3900, 100, 2900, 700, 0]))
    model = bench.with_cost_model(chain, kind)  # a bwd_tape above the averaged tape raised ValueError
    assert np.all(model.bwd_tape_bytes <= model.tape_bytes)
    if kind in ("uniform_memory", "uniform"):
        assert len(set(model.tape_bytes)) == 1 and len(set(model.bwd_tape_bytes)) == 1
