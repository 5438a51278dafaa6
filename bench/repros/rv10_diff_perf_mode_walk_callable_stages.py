"""The per-step cost of Note [Recomputing in the forward's mode] (882b101): a step of plain-callable stages that
use the model (``modules=[model]``, the README's route for closures) takes twice as long as before, and the cost
grows as (recomputed stages) x (modules of the model) (a review of 882b101, 2026-11-28).

Runtime.run_stage calls U.training_modes(entry.group_modules[s - 1]) at the first run of every recomputed stage in
every step, which walks ``m.modules()`` of each group module and builds a tuple of (module, flag) pairs, and each
re-run scans it again. A plain-callable stage's group modules are every module it reaches and every ``modules=``
module (CheckpointedSequential._group_modules): here the whole model, 290 modules, for each recomputed stage:
over 11 000 pairs built per step.

Observed (48 stages ``lambda x, i=i: model.layers[i](x)``, each layer Linear(64)-GELU-Linear(64)-LayerNorm-
Dropout(0); modules=[model]; segments of 8 (40 stages recomputed); batch 8; CPU, 1 thread; median of 100 steps):
- c0f90ad: 12.3-12.4 ms a step; 47a7294: 24.2-25.0 ms (x2.0);
- in this script: the same step with U.training_modes stubbed to return () (no bookkeeping) against as is.
Smaller effects: bench/executor_overhead.py's "checkpoint every 10" (200 one-module stages) 6.7 -> 8.9 us per stage
run; a 200-stage tanh chain 4.6-4.8 -> 5.0 ms a step; auto_checkpoint on the example transformer/GPT-2/ResNet
0.015-0.06 ms of a 4.5-6.4 ms step (fine).
Cause: torch_exec/executor.py Runtime.run_stage + torch_exec/_util.py training_modes: a walk of every module of
the stage's group per recomputed stage per step (m.modules() generator, ~1.2 us a module), where the set of
modules is fixed per entry.
Expected: the mode bookkeeping costs a small part of the step: e.g. the flat, deduplicated module list of each
stage computed once per entry (or one walk of the wrapper's modules per step shared by all stages), flags recorded
as a tuple of bools and compared with one tuple comparison. Exits 1 while the bookkeeping takes more than 25 % of
the step."""
import statistics
import sys
import time

from _setup import nn, te, torch

import torch_exec._util as U
from gpusolve.schedule import segments_policy

L, D = 48, 64
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.LayerNorm(D),
                                                  nn.Dropout(0.0)) for _ in range(L))


model = Net()
stages = [lambda x, i=i: model.layers[i](x) for i in range(L)]
w = te.CheckpointedSequential(stages, budget="1GiB", backend="cpu", modules=[model],
                              schedule_fn=lambda chain: segments_policy(list(range(8, chain.n, 8)), chain.n))
x = torch.randn(8, D, requires_grad=True)


def median_step(repeats=60):
    for _ in range(10):
        w(x).sum().backward()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        w(x).sum().backward()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


if not hasattr(U, "training_modes"):
    print(f"no mode bookkeeping in this tree: {median_step() * 1e3:.2f} ms a step")
    print("ok")
    sys.exit(0)
real = U.training_modes
pairs = []
U.training_modes = lambda modules: pairs.append(len(real(modules))) or real(modules)
w(x).sum().backward()
built, calls = sum(pairs), len(pairs)
U.training_modes = real
recomputed = sum(w._last.recomputed)
timings = {}
for _ in range(2):  # interleaved
    U.training_modes = real
    timings.setdefault("as is", []).append(median_step())
    U.training_modes = lambda modules: ()
    timings.setdefault("stubbed", []).append(median_step())
U.training_modes = real
with_, without = min(timings["as is"]), min(timings["stubbed"])
share = 1 - without / with_
print(f"{w._last.chain.n} stages, {recomputed} recomputed, {sum(1 for _ in model.modules())} modules in the model: "
      f"{built} (module, flag) pairs built per step ({calls} calls of training_modes)")
print(f"step {with_ * 1e3:.2f} ms as is, {without * 1e3:.2f} ms with training_modes stubbed: the mode bookkeeping is "
      f"{share:.0%} of the step")
bad = share > 0.25
print("BUG: the mode bookkeeping dominates the step of callable stages" if bad else "ok")
sys.exit(1 if bad else 0)
