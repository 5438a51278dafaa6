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


@pytest.mark.parametrize("name", ["densenet121", "gpt2-like"])
def test_batch_and_size_override_the_network_defaults(name):
    # --batch/--size: a CPU run of the real networks at sizes it can take (stand-ins here: --quick)
    stages, x, desc = bench.build(name, "cpu", quick=True, batch=3, size=32)
    assert x.shape[:2] == ((3, 32) if name == "gpt2-like" else (3, 3)) and "batch 3" in desc
    if name == "densenet121":
        assert x.shape[2:] == (32, 32)
    stages(x).backward()
    default, x_default, _ = bench.build(name, "cpu", quick=True)
    assert x_default.shape[0] == 2 and x_default.shape[-1] == 64


def test_batch_and_size_name_the_result_files(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(bench, "bench_network", lambda name, args, *rest: seen.setdefault("tag", args.gpu_tag))
    bench.main(["--networks", "gpt2-like", "--device", "cpu", "--quick", "--batch", "3", "--size", "16",
                "--out", str(tmp_path)])
    assert seen["tag"].endswith("_quick_b3_s16")
    assert (tmp_path / f"executor_{seen['tag']}.json").exists()


def test_a_torchvision_that_does_not_load_is_one_line(monkeypatch):
    # PyPI's torchvision beside a CPU-only torch raises RuntimeError at import; missing: ImportError
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(SystemExit, match="needs torchvision for the CNNs: torchvision does not load"):
        bench.build("resnet50", "cpu", quick=False)


@pytest.mark.parametrize("option", ["--batch", "--size"])
def test_batch_and_size_must_be_positive(option, capsys):
    with pytest.raises(SystemExit) as err:
        bench.main(["--networks", "gpt2-like", "--device", "cpu", "--quick", option, "0"])
    assert err.value.code == 2 and "0 is not a positive integer" in capsys.readouterr().err


def test_meter_on_cuda_records_enqueue_time_and_allocator_calls(monkeypatch):
    """The CUDA path of Meter.step, rehearsed with CUDA's counters and events faked: per measured step the
    host's time to queue it, and the cudaMalloc calls and allocator retries of the measured steps only."""
    import torch
    stats = {"num_alloc_retries": 0, "num_device_alloc": 0, "requested_bytes.all.current": 0,
             "requested_bytes.all.peak": 0}

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            pass

        def elapsed_time(self, other):
            return 5.0

    for name, value in (("synchronize", lambda device=None: None), ("memory_allocated", lambda device=None: 0),
                        ("max_memory_allocated", lambda device=None: 0),
                        ("reset_peak_memory_stats", lambda device=None: None),
                        ("memory_stats", lambda device=None: dict(stats)), ("Event", Event)):
        monkeypatch.setattr(torch.cuda, name, value)
    calls = []

    def run():
        calls.append(1)
        stats["num_device_alloc"] += 2  # two cudaMallocs per step
        if len(calls) == 4:
            stats["num_alloc_retries"] += 1

    meter = bench.Meter("cuda")
    peak, ms, each = meter.step(run, [], steps=3, warmup=2)
    assert len(calls) == 5 and each == [5.0] * 3 and ms == 5.0
    d = meter.diagnostics
    assert len(d["enqueue_ms_each"]) == 3 and all(t >= 0 for t in d["enqueue_ms_each"])
    assert len(d["sm_clock_mhz_each"]) == 3  # None without NVML
    assert d["device_mallocs"] == 6 and d["alloc_retries"] == 1  # the warm-up's are not counted
