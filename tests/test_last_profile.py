"""``last_profile``: the measured profile a wrapper planned its latest input signature from, saved and read back by
``prepare(profile=...)`` and the command line."""
from __future__ import annotations

import contextlib
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve import Chain  # noqa: E402
from gpusolve.cli import main  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:profiling on the CPU")


def _mlp(seed=0, depth=5):
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(depth)], nn.Linear(32, 4))


def test_sequential_profile_round_trip(tmp_path):
    model = te.CheckpointedSequential(list(_mlp()), budget="80%", backend="cpu", profile_passes=1)
    assert model.last_profile is None
    x = torch.randn(16, 32)
    model(x).sum().backward()
    data = model.last_profile
    assert data["format"] == "measured-chain/1" and len(data["stages"]) == 6  # the six stages given
    assert data is model._last.profile
    path = tmp_path / "planned.json"
    te.save_profile(data, path)
    assert Chain.load(path).n == Chain.from_profile(data).n
    other = te.CheckpointedSequential(list(_mlp()), budget="80%", backend="cpu")
    other.prepare(x, profile=str(path))  # planned from the file, no profiling: the same plan
    assert other.plan.schedule == model.plan.schedule
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["compare", str(path), "--budget", "80%"]) == 0


def test_auto_checkpoint_chain_and_join():
    x = torch.randn(16, 32)
    auto = te.auto_checkpoint(_mlp(depth=6), "60%", backend="cpu")
    assert auto.last_profile is None
    auto(x).sum().backward()
    assert isinstance(auto.executor, te.CheckpointedSequential) and auto.last_profile is auto.executor.last_profile
    assert auto.last_profile["format"] == "measured-chain/1"

    tower = _mlp(1)
    join = te.CheckpointedJoin([list(tower), list(_mlp(2))], lambda a, b: ((a - b) ** 2).mean(), budget="60%",
                               backend="cpu")
    assert join.last_profile is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        join(torch.randn(16, 32), torch.randn(16, 32)).backward()
    profiles = join.last_profile
    assert len(profiles) == 2 and all(p["format"] == "measured-chain/1" for p in profiles)
    assert [len(p["stages"]) for p in profiles] == [len(list(tower))] * 2
