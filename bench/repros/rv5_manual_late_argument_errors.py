"""Arguments of CheckpointedSequential that are accepted at construction and fail only at the first
call (schedule_fn: after profiling), with a message that does not name the argument, or are taken
silently with another meaning: schedule_fn=3, profile_passes=0 / 2.5 / '3', budget='0.5' (0 bytes:
a fraction read as bytes and truncated), budget=1.5 (1 byte), preserve_rng_state='no' (truthy: the
RNG is preserved)."""
import sys
import time

from _setup import nn, te, torch  # the tree under test: GS_ROOT

import torch_exec.executor as ex

profiled = []
_orig = ex.profile_dict


def _counted(*a, **k):
    data = _orig(*a, **k)
    profiled.append(1)  # a profile was completed
    return data


ex.profile_dict = _counted
torch.manual_seed(0)
x = torch.randn(8, 32)
late = 0
for name, kw in (("schedule_fn=3", dict(schedule_fn=3)), ("profile_passes=0", dict(profile_passes=0)),
                 ("profile_passes=2.5", dict(profile_passes=2.5)), ("profile_passes='3'", dict(profile_passes="3")),
                 ("budget='0.5'", dict(budget="0.5")), ("budget=1.5", dict(budget=1.5)),
                 ("preserve_rng_state='no'", dict(preserve_rng_state="no"))):
    kw.setdefault("budget", "90%")
    seq = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(32, 32), nn.Tanh())], nn.Linear(32, 10))
    try:
        w = te.CheckpointedSequential(seq, backend="cpu", **kw)
    except (TypeError, ValueError) as exc:
        print(f"{name}: refused at construction: {str(exc)[:150]}")
        continue
    late += 1
    profiled.clear()
    t = time.perf_counter()
    try:
        w(x).sum().backward()
        print(f"{name}: accepted; stored as {dict(budget=w.budget, schedule_fn=w.schedule_fn, profile_passes=w.profile_passes, preserve_rng_state=w.preserve_rng_state)[name.split('=')[0]]!r}; first step ran")
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: accepted at construction; first call raised {type(exc).__name__} after "
              f"{'profiling' if profiled else 'no profiling'} ({time.perf_counter() - t:.2f} s): {str(exc)[:150]}")
sys.exit(1 if late else 0)
