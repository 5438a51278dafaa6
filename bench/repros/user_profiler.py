"""A wrapper used inside the user's own torch.profiler on the CPU (Note [One profiler per thread] in
torch_exec/meter.py): the CPU memory meter is a torch.profiler session, and torch runs one per thread."""
import subprocess
import sys
import warnings

from _setup import ROOT, nn, te, torch


def model():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(6)])


x = torch.randn(32, 64)


def step(w):
    w(x).sum().backward()


def events(prof):
    return len([e for e in prof.events() if e.name.startswith("aten::")])


# 1. the first call (which profiles the model) inside the user's profiler
w = te.CheckpointedSequential(model(), budget="80%")
try:
    with torch.profiler.profile() as prof:
        step(w)
    print(f"1. first call inside torch.profiler: ran; the user's trace has {events(prof)} aten events")
except Exception as exc:  # noqa: BLE001
    print(f"1. first call inside torch.profiler: {type(exc).__name__}: {str(exc)[:150]}")
    print(f"   the user's trace has {events(prof)} aten events")

# 2. a measured step (measure_memory) inside the user's profiler, after a first call outside it
w = te.CheckpointedSequential(model(), budget="80%")
step(w)
w.measure_memory(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        with torch.profiler.profile() as prof:
            step(w)
        n = events(prof)
        print(f"2. measured step inside torch.profiler: {len(w.memory_report())} records; user trace {n} aten events; "
              f"warnings: {[str(c.message)[:80] for c in caught]}")
        step(w)
        print(f"   the next step, outside it: {len(w.memory_report())} records")
    except Exception as exc:  # noqa: BLE001
        print(f"2. measured step inside torch.profiler: {type(exc).__name__}: {str(exc)[:150]}")

# 3. a measured step inside a scheduled profiler's warmup step: torch crashes, which Python cannot foresee
code = f"""
import sys; sys.path.insert(0, {ROOT!r})
import torch, torch_exec as te
from torch import nn
torch.manual_seed(0)
w = te.CheckpointedSequential(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)), budget="100%")
x = torch.randn(4, 8)
w(x).sum().backward()
w.measure_memory(1)
with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=1)) as prof:
    for i in range(2):
        w(x).sum().backward(); w.memory_report(); prof.step()
print("ran")
"""
res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
print(f"3. measured step in a scheduled profiler's warmup step: exit code {res.returncode} "
      f"({'SIGSEGV' if res.returncode == -11 else res.stdout.strip()[-40:]})")
