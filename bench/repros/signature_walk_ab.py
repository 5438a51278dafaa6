"""A/B of Note [The signature's walk of the modules] (torch_exec/_util.py): the input signature's key and the
routed-hooks scan of bench/host_bound_overhead.py's network (489 modules, 364 parameters), ms, min of 7x300; and the
buffer slots a recomputed stage's buffer copies list (torch_exec._util._buffer_slots, twice per recomputed stage), us
per stage, averaged over the 68 stages.

    PYTHONPATH=<worktree>:<worktree>/examples python bench/repros/signature_walk_ab.py
"""
import timeit
import warnings

import torch
import torch_exec as te
import torch_exec._util as U
import torch_exec.executor as ex
from models import TVDenseNet
from torch_exec.split import split_model

warnings.simplefilter("ignore")
torch.set_num_threads(1)
torch.manual_seed(0)
model = TVDenseNet(growth=4, blocks=(6, 12, 24, 16), init=8, bn_size=2, classes=10).train()
stages = split_model(model, targets=torch.randint(0, 10, (2,)))
params = [p for p in stages.parameters() if p.requires_grad]


def t(f, n=300):
    return min(timeit.repeat(f, number=n, repeat=7)) / n * 1e3


box = []
tap = (box, params, None, {})
mods = U.submodules(stages.modules())
groups = [[m] for m in stages]
print(f"key {t(lambda: U.module_state_key(stages, [])):.3f}  routed_init {t(lambda: ex._RoutedHooks(tap, None)):.3f}  "
      f"training_flags {t(lambda: U.training_flags(mods)):.3f} ms  "
      f"buffer_slots {t(lambda: [U._buffer_slots(g) for g in groups], 100) / len(groups) * 1e3:.2f} us per stage")
