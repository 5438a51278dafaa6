"""Review rv14 of 831846c (Note [Host time of a stage]): the CUDA profiler's clock (_Stamp marks) rehearsed on the
CPU, end to end: profile_dict (whole and stage by stage, tuple states, a first stage no gradient reaches),
CheckpointedSequential, CheckpointedJoin, and bench/executor.py's bench_network with --host-max.

torch.cuda.Event is replaced by a strict fake: its device clock runs at half the host's (so event times and host
times differ), it refuses comparison, truth tests, float(), pickling and JSON, and elapsed_time takes only another
fake event. _CpuProfiler gets _CudaProfiler's mark/elapsed/host_elapsed (and host_clock where it exists), so every
timing pass runs the CUDA path's clock code.

    python bench/repros/rv14_review_cuda_marks_rehearsal.py [repo root, default: this file's repo]
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import pickle
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
import torch_exec.profiler as P  # noqa: E402
from gpusolve import Chain  # noqa: E402

warnings.simplefilter("ignore")
print("repo:", ROOT, "torch_exec from", te.__file__)


class StrictEvent:
    """A torch.cuda.Event stand-in that fails wherever a real one would (or where using one is a bug)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        assert enable_timing, "elapsed_time needs enable_timing=True"
        self.at = None

    def record(self, stream=None):
        self.at = time.perf_counter() * 0.5 * 1e3  # the "device" runs at half the host's rate: ms

    def elapsed_time(self, other):
        if not isinstance(other, StrictEvent):
            raise TypeError(f"elapsed_time(): argument 'end_event' must be Event, not {type(other).__name__}")
        if self.at is None or other.at is None:
            raise RuntimeError("event not recorded")
        return other.at - self.at

    def synchronize(self):
        pass

    def query(self):
        return True

    def _refuse(self, *a):
        raise TypeError("a CUDA event used as a number / compared")
    __lt__ = __le__ = __gt__ = __ge__ = __float__ = __bool__ = _refuse

    def __reduce__(self):
        raise TypeError("cannot pickle a CUDA event")


torch.cuda.Event = StrictEvent
STAMPED = []


def _elapsed(self, a, b):
    assert isinstance(a, P._Stamp) and isinstance(b, P._Stamp), (type(a), type(b))
    STAMPED.append(1)
    return P._CudaProfiler.elapsed(self, a, b)


P._CpuProfiler.mark = P._CudaProfiler.mark
P._CpuProfiler.elapsed = _elapsed
P._CpuProfiler.host_elapsed = P._CudaProfiler.host_elapsed
if "host_clock" in vars(P._CudaProfiler):
    P._CpuProfiler.host_clock = P._CudaProfiler.host_clock

spec = importlib.util.spec_from_file_location("bench_executor", ROOT / "bench" / "executor.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

D = 16
HOST = ("host_fwd_ms", "host_fwd_nograd_ms", "host_bwd_ms")


class Shift(nn.Module):  # no parameters, input needs no gradient: no gradient reaches this stage
    def forward(self, x):
        return x + 1.0, x * 2.0


class Block(nn.Module):  # tuple in, tuple out, second tensor passed on untouched
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(D, D)

    def forward(self, t):
        h, x0 = t
        return torch.tanh(self.l(h)) + x0, x0


class Merge(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(D, D)

    def forward(self, t):
        return (self.l(t[0]) * t[1]).square().mean()


def model():
    torch.manual_seed(1)
    return [Shift(), Block(), Block(), Block(), Merge()]


RESULTS = {}


def check(name, fn):
    try:
        out = fn()
        RESULTS[name] = "ok" + (f": {out}" if out else "")
    except Exception as err:  # noqa: BLE001
        RESULTS[name] = f"FAIL {type(err).__name__}: {str(err).splitlines()[0][:300]}"
        traceback.print_exc()
    print(f"[{name}] {RESULTS[name]}", flush=True)


def profile_case(isolated):
    def run():
        x = torch.randn(8, D)
        data = te.profile_dict(model(), x, passes=2, warmup=1, isolated=isolated, progress=False)
        json.dumps(data)
        pickle.dumps(data)
        missing = {s + 1: [k for k in HOST if k not in st] for s, st in enumerate(data["stages"])
                   if any(k not in st for k in HOST)}
        Chain.from_profile(data)
        te.chain_from_profile(data)
        first = data["stages"][0]
        summary = f"stage1 t_bwd={first['t_bwd']} host_bwd_ms={first.get('host_bwd_ms', 'ABSENT')}; missing host fields {missing}"
        hm = bench.host_max_profile(data)  # what --host-max does with it
        hc = te.chain_from_profile(hm)
        assert hc.names == te.chain_from_profile(data).names
        for st in data["stages"][1:]:
            assert st["host_fwd_ms"] > st["t_fwd"], st  # the fake device runs at half speed
        return summary
    return run


def wrapper_case(isolated):
    def run():
        torch.manual_seed(0)
        x = torch.randn(8, D)
        ref = model()
        sum_ref = None
        loss = x
        for f in ref:
            loss = f(loss)
        loss.backward()
        sum_ref = [p.grad.clone() for f in ref for p in f.parameters()]
        mods = model()
        w = te.CheckpointedSequential(mods, budget="75%", backend="cpu", profile_passes=2, profile_isolated=isolated)
        w(x).backward()
        got = [p.grad for f in mods for p in f.parameters()]
        assert all(torch.allclose(a, b) for a, b in zip(sum_ref, got, strict=True))
        hosts = [k for st in w.profile["stages"] for k in st if k.startswith("host_")] if hasattr(w, "profile") else "?"
        return f"plan ops {len(w.plan.schedule)}, host fields in its profile: {len(hosts) if hosts != '?' else '?'}"
    return run


def join_case():
    torch.manual_seed(0)

    def tower(seed):
        torch.manual_seed(seed)
        return [nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 12)]

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.Linear(12, 4)

        def forward(self, a, b):
            return (self.p(a) * self.p(b)).square().mean()
    j = te.CheckpointedJoin([tower(1), tower(2)], Head(), budget="85%", profile_passes=2, profile_warmup=1,
                            backend="cpu")
    xs = [torch.randn(5, 6, requires_grad=True) for _ in range(2)]
    j(*xs).backward()
    return f"join plan ops {len(j.plan.schedule)}"


def bench_case(name):
    def run():
        with tempfile.TemporaryDirectory() as tmp:
            args = argparse.Namespace(device="cpu", quick=True, batch=None, size=None, passes=2, steps=1, warmup=0,
                                      backend="cpu", cost_models=False, host_max=True, out=Path(tmp), verbose=False,
                                      device_name="cpu", gpu_tag="cpu_quick", date=datetime.date.today().isoformat())
            records, errors = [], []
            bench.bench_network(name, args, bench.Meter("cpu"), records, errors)
            json.dumps(records)
            prof = json.loads((Path(tmp) / f"profile_{name}_cpu_quick.json").read_text())
        host = [r for r in records if r.get("cost_model") == "host_max"]
        errs = [r["error"] for r in records if "error" in r]
        with_pred = sum("predicted_step_ms_host_max" in r for r in records)
        wrapper = [r for r in records if r["method"] == "gpusolve (wrapper)"]
        return (f"{len(prof['stages'])} stages, {len(records)} rows, {len(host)} host_max rows, {with_pred} rows with "
                f"predicted_step_ms_host_max, wrapper rows with it {sum('predicted_step_ms_host_max' in r for r in wrapper)}"
                f"/{len(wrapper)} (runs_plain {[r.get('runs_plain') for r in wrapper]}), errors {errs}")
    return run


def bench_tuple_case():
    """bench_network's --host-max path on the tuple model with the stage no gradient reaches."""
    orig = bench.build

    def build(name, device, quick, batch=None, size=None):
        return nn.Sequential(*model()), torch.randn(8, D), "tuple model"
    bench.build = build
    try:
        return bench_case("resnet50")()
    finally:
        bench.build = orig


for iso in (False, True):
    check(f"profile_dict isolated={iso}", profile_case(iso))
for iso in (False, True):
    check(f"CheckpointedSequential isolated={iso}", wrapper_case(iso))
check("CheckpointedJoin", join_case)
for net in ("resnet50", "densenet121", "vgg16"):
    check(f"bench_network {net} --host-max", bench_case(net))
check("bench_network tuple model (stage no gradient reaches) --host-max", bench_tuple_case)
print(f"elapsed() calls on _Stamp marks: {len(STAMPED)}")
print(json.dumps(RESULTS, indent=1))
