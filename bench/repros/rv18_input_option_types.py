"""Options of the wrong type that are taken (a truthy string read as True) or fail with a raw Python error from
inside, where the wrappers' own constructors refuse e.g. preserve_rng_state='yes' by name:
- gpusolve.solve(chain, budget, strict="False") -> strict (raises InfeasibleBudgetError); strict=None -> non-strict
- gpusolve.simulate(chain, [1, 2, 3]) -> AttributeError: 'int' object has no attribute 'kind'
- gpusolve.join.solve_join(..., progress=5) -> TypeError: 'int' object is not callable (from join/dp.py)
- torch_exec.CheckpointedSequential(stages, modules=5) -> TypeError: 'int' object is not iterable
- torch_exec.auto_checkpoint(model, join="no") and CheckpointedSequential(profile_isolated="x"): accepted
Expected: one error naming the option, the value and what it takes.
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_option_types.py
Fixed in session 18: gpusolve.units.check_flag and the settings' own checks name each value; exits 0."""
import sys, traceback, warnings
from _rv18 import chain4  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
from torch import nn
import torch_exec
from gpusolve import simulate, solve
from gpusolve.join import solve_join
from gpusolve.join.network import Turn

c = chain4()
stages = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
checks = {
    "solve(strict='False') at an infeasible budget": lambda: solve(c, 10, backend="cpu", strict="False"),
    "simulate(chain, [1, 2, 3])": lambda: simulate(c, [1, 2, 3]),
    "solve_join(progress=5)": lambda: solve_join([c, c], Turn(), "60%", backend="cpu", progress=5),
    "CheckpointedSequential(modules=5)": lambda: torch_exec.CheckpointedSequential(stages, budget="50%", modules=5),
    "auto_checkpoint(join='no')": lambda: torch_exec.auto_checkpoint(stages, "50%", join="no"),
    "CheckpointedSequential(profile_isolated='x')": lambda: torch_exec.CheckpointedSequential(stages, budget="50%",
                                                                                             profile_isolated="x"),
}
bad = False
for label, f in checks.items():
    try:
        f(); print(f"{label}: accepted"); bad = True
    except Exception as e:
        last = traceback.extract_tb(e.__traceback__)[-1]
        msg = " ".join(str(e).split())[:160]
        print(f"{label}: {type(e).__name__}: {msg}  [{last.filename.split('/')[-2]}/{last.filename.split('/')[-1]}:{last.lineno}]")
        if type(e).__name__ in ("AttributeError", "TypeError") and ("object" in msg) or "InfeasibleBudget" in type(e).__name__:
            bad = True
sys.exit(1 if bad else 0)
