"""rv20r: a scalar attribute the training loop anneals re-profiles CheckpointedSequential at every step.

Setup: CheckpointedSequential(budget="80%") over six blocks ``tanh(lin(x) / self.temp)``; the training loop
anneals ``block.temp = 1.0 + 0.1 * step`` before each step (a softmax/Gumbel temperature schedule, a
warm-up factor), which the blocks read but never write. Plain autograd and the wrapper before 0ef5aa7 profiled
once (the modules are called as themselves and read the attribute live: nothing captured fixes it).

Observed (CPU, 8 steps): the profiler's memory pass ran 8 times and the wrapper held 8 cached entries (one per
temperature); at 0ddb3ab: 1 profile, 1 entry.  Each step pays a whole profile (warm-up, memory pass, timing
passes, solve) and the entries (each with its profile and plan) grow without bound over a run.

Also (same cause): six stages that set a cache at their first call only (``self.seq_len_cached = x.shape[0]``
when None: rotary embeddings, a data-dependent init flag) profile twice over 4 steps and keep 2 entries (the
first keyed before the profile wrote the cache, never matched again); 1 and 1 at 0ddb3ab.

Cause: torch_exec/_util.py ``_state_key`` (via ``module_state_key`` -> CheckpointedSequential._key) now keys
every submodule's scalar attributes (``scalar_attributes``), for a dropout's ``p`` switched on after profiling
(rv20b); every float the loop writes is a new input signature, so a new entry is profiled and solved.

Expected: one profile across the steps (the attributes a CheckpointedSequential's stages read live change
neither the memory nor the RNG use of a stage); key only what a profile depends on (training mode, the
RNG-drawing modules' ``p``...) or re-use the plan of the same shapes/params and re-check the RNG facts only.
Exits 1 while more than one profile runs.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec
import torch_exec.profiler as P
from torch_exec import CheckpointedSequential

calls = {"n": 0}
_orig = P._Passes.memory_pass


def counting(self, *a, **k):
    calls["n"] += 1
    return _orig(self, *a, **k)


P._Passes.memory_pass = counting


class Temp(nn.Module):
    def __init__(s):
        super().__init__()
        s.lin = nn.Linear(32, 32)
        s.temp = 1.0

    def forward(s, x):
        return torch.tanh(s.lin(x) / s.temp)


torch.manual_seed(0)
blocks = [Temp() for _ in range(6)]
w = CheckpointedSequential(nn.Sequential(*blocks), budget="80%")
x = torch.randn(16, 32)
warnings.simplefilter("ignore")
for step in range(8):
    for b in blocks:
        b.temp = 1.0 + 0.1 * step
    w(x).sum().backward()
loop = calls["n"]
print(f"annealed temperature: profiles {loop}, cached entries {len(w._entries)} over 8 steps (expected 1, 1)")


class Rotary(nn.Module):
    """a cache sized at the first call (rotary embeddings' max_seq_len_cached, a data-dependent init flag)"""
    def __init__(s):
        super().__init__()
        s.l, s.seq_len_cached = nn.Linear(32, 32), None

    def forward(s, x):
        if s.seq_len_cached is None or x.shape[0] > s.seq_len_cached:
            s.seq_len_cached = x.shape[0]
        return torch.tanh(s.l(x))


calls["n"] = 0
w = CheckpointedSequential(nn.Sequential(*[Rotary() for _ in range(6)]), budget="80%")
for step in range(4):
    w(x).sum().backward()
lazy = calls["n"]
print(f"first-call cache: profiles {lazy}, cached entries {len(w._entries)} over 4 steps (expected 1, 1)")
sys.exit(1 if loop > 1 or lazy > 1 else 0)
