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


def test_host_max_profile_takes_the_larger_time_per_stage():
    stage = dict(name="s", t_fwd=2.0, t_fwd_nograd=1.5, t_bwd=4.0, host_fwd_ms=3.0, host_fwd_nograd_ms=1.0,
                 host_bwd_ms=4.5, x=8)
    data = {"stages": [stage, dict(stage, name="t", host_fwd_ms=0.5)]}
    out = bench.host_max_profile(data)
    assert [(s["t_fwd"], s["t_fwd_nograd"], s["t_bwd"]) for s in out["stages"]] == [(3.0, 1.5, 4.5), (2.0, 1.5, 4.5)]
    assert data["stages"][0]["t_fwd"] == 2.0 and out["stages"][0]["x"] == 8  # the caller's profile is left alone
    with pytest.raises(ValueError, match=r"stages \[2\] of the profile have no host times"):
        bench.host_max_profile({"stages": [stage, {k: v for k, v in stage.items() if k != "host_bwd_ms"}]})


def test_host_max_runs_every_path_with_host_times_faked(tmp_path, monkeypatch):
    """--host-max's rows on the CPU, the profile given host times (twice the event times; a CUDA profile has
    them): a host_max plan per budget, and each schedule's time under that model beside the event times'."""
    import argparse
    import datetime

    import torch_exec as te
    profile = te.profile_dict

    def with_host_times(*args, **kwargs):
        data = profile(*args, **kwargs)
        for stage in data["stages"]:
            stage.update(host_fwd_ms=2 * stage["t_fwd"], host_fwd_nograd_ms=2 * stage["t_fwd_nograd"],
                         host_bwd_ms=2 * stage["t_bwd"])
        return data
    monkeypatch.setattr(te, "profile_dict", with_host_times)
    args = argparse.Namespace(device="cpu", quick=True, batch=None, size=None, passes=1, steps=1, warmup=0,
                              backend="cpu", cost_models=False, host_max=True, out=tmp_path, verbose=True,
                              device_name="cpu", gpu_tag="cpu_quick", date=datetime.date.today().isoformat())
    records, errors = [], []
    bench.bench_network("resnet50", args, bench.Meter("cpu"), records, errors)
    rows = {(r["cost_model"], r["budget_label"]): r for r in records if r["method"] == "gpusolve"}
    labels = {label for _, label in rows}
    assert len(labels) == len(bench.FRACTIONS) + 1 and len(rows) == 2 * len(labels)
    for label in labels:  # the stand-in's small budgets are infeasible: under both models alike (memory is the same)
        assert ("error" in rows["host_max", label]) == ("error" in rows["profiled", label])
    assert sum("error" not in r for r in rows.values()) >= 4
    timed = [r for r in records if r.get("predicted_step_ms") is not None and r["method"] != "store_all (again, last)"]
    assert timed and all("predicted_step_ms_host_max" in r for r in timed if r["method"] != "gpusolve (wrapper)")
    for r in timed:
        if "predicted_step_ms_host_max" in r:  # every stage's time doubled: the schedule's time doubles
            assert r["predicted_step_ms_host_max"] == pytest.approx(2 * r["predicted_step_ms"], rel=1e-9)


def test_rows_are_written_as_they_come(tmp_path, monkeypatch):
    """A step killed at its time limit keeps the rows measured before: the report is rewritten after each row."""
    import json

    def two_rows_then_killed(name, args, meter, records, errors):
        for budget in ("100%", "50%"):
            records.append(dict(network=name, budget_bytes=None, budget_label=budget, method="store_all",
                                segments=None, measured_peak_bytes=1, predicted_peak_bytes=1, step_ms=1.0,
                                predicted_step_ms=1.0))
        raise KeyboardInterrupt  # what a kill leaves: no end-of-run report
    monkeypatch.setattr(bench, "bench_network", two_rows_then_killed)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--networks", "gpt2-like", "--device", "cpu", "--quick", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "executor_cpu_quick.json").read_text())
    assert [r["budget_label"] for r in rows] == ["100%", "50%"]
