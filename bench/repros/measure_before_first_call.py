"""auto_checkpoint: measure_memory(n) called before the first call (no prepare) is silently dropped:
no step is ever measured, memory_report() stays empty (AutoCheckpointed.measure_memory arms only
executors of captures that exist). With prepare() first, or with CheckpointedSequential, it works."""
from _setup import M, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
x = torch.randn(32, 64); y = torch.randint(0, 10, (32,))
for prepare in (False, True):
    w = te.auto_checkpoint(M(), "75%", backend="cpu")
    if prepare: w.prepare(x, y)
    w.measure_memory(3)
    for _ in range(3):
        w(x, y).backward()
    print(f"prepare={prepare}: measure_memory(3) + 3 steps -> {len(w.memory_report())} measured steps")
# a second input signature after arming: its executor is not armed either
w = te.auto_checkpoint(M(), "95%", backend="cpu"); w.prepare(x, y); w.measure_memory(2)
w(x[:16], y[:16]).backward(); w(x, y).backward()
print("armed 2, then a new batch size and the old one ->", [r.step for r in w.memory_report()], "(report shows the latest executor only)")
