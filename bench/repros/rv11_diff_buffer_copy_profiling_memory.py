"""Profiling now holds a copy of EVERY buffer of the model on its device through the no-grad pass, and compares all
of them after each stage: a model with large read-only buffers (rotary cos/sin caches, a causal mask, a lookup
table) needs twice their memory to be profiled, also with ``profile_isolated=True`` ("needs about one stage's
memory"), and profiles slower (a review of 6adbcd3, 2026-11-28).

6adbcd3 (Note [Buffers written behind their versions], torch_exec/profiler.py _Passes.nograd_memory) takes
``values = [b.detach().clone() for b in self.buffers]`` (self.buffers: the buffers of every stage's modules) before
the first stage and keeps it to the end of the pass; _buffers_changed compares each buffer after each stage
(n stages x all buffers). A stage's own buffers are all that matter to its flag's use: executor_chain reserves, and
Runtime.buffers restores, the buffers of the stage's own modules (Note [Recomputing from the step's buffers]).
Observed (32 stages, each Linear(256, 256) + tanh times a 4 MiB read-only non-persistent buffer; batch 64; CPU;
budget "1GiB"; this script): the profile's memory_pass_peak_bytes (what profiling allocated at its peak) 4654080 B at
d97ccc3, 134419392 B at 6514efb (+128 MiB, the buffers' size); with profile_isolated=True 656384 B at d97ccc3,
134419392 B at 6514efb.
prepare() took 0.48-0.50 s at d97ccc3, 1.18-1.24 s at 6514efb (after a first warm-up call; a shared 2-core machine).
Cause: the copy of all buffers and the all-buffer comparison in _Passes.nograd_memory / _buffers_changed.
Expected: profiling needs no copy of buffers no stage writes beyond what it needed before: e.g. copy (to the host,
or just before the stage) and compare only the buffers of the stage about to run (what its flag is used for), and
skip a buffer whose version counter moved already. Exits 1 while the profiling peak holds a copy of all buffers."""
import sys
import warnings

from _setup import nn, te, torch  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")
CACHE = 2 ** 20  # floats: 4 MiB per stage


class Rotary(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.register_buffer("cos_cached", torch.randn(CACHE), persistent=False)  # read, never written

    def forward(self, x):
        return torch.tanh(self.lin(x)) * self.cos_cached[:x.shape[-1]]


torch.manual_seed(0)
x = torch.randn(64, 256)
n = 32
buffers = n * CACHE * 4
bad = False
for isolated in (None, True):
    w = te.CheckpointedSequential([Rotary() for _ in range(n)], budget="1GiB", backend="cpu",
                                  profile_isolated=isolated)
    w.prepare(x)
    profile = w._last.profile
    peak = profile.get("reference", profile).get("memory_pass_peak_bytes")
    print(f"profile_isolated={isolated}: memory_pass_peak_bytes {peak} B (the model's buffers: {buffers} B)")
    bad |= peak is not None and peak >= buffers
print("BUG: profiling holds a copy of every buffer" if bad else "ok")
sys.exit(1 if bad else 0)
