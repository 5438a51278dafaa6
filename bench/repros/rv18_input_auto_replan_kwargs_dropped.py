"""auto_checkpoint(...).replan(**kwargs) before any input signature is captured accepts anything and applies
nothing: replan(foo=1) and replan(profile_passes=0) pass silently, and replan(schedule_fn=f) is dropped (f is
never called; the wrapper made with schedule_fn=f calls it). After a capture the same replan(foo=1) raises
"CheckpointedSequential.replan() got an unexpected keyword argument". Expected: the same check in both cases
(an unknown or invalid keyword refused, a valid one kept for the signatures captured later, as offload= is).
Fix: torch_exec/auto.py AutoCheckpointed.replan (validate kwargs; update self._executor_kwargs).
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_auto_replan_kwargs_dropped.py
Fixed in session 18: AutoCheckpointed.replan checks its keywords and keeps schedule_fn for later captures; exits 0."""
import sys, warnings
from _rv18 import mlp  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
import torch
import torch_exec
from gpusolve.baselines import store_all

def model():
    return mlp()
x = torch.randn(8, 16)
bad = False
a = torch_exec.auto_checkpoint(model(), "100%", backend="cpu")
for kw in ({"foo": 1}, {"profile_passes": 0}):
    try:
        a.replan(**kw); print(f"replan({kw}) before any call: accepted silently"); bad = True
    except Exception as e:
        print(f"replan({kw}) refused: {type(e).__name__}: {e}")
calls = []
def fn(chain):
    calls.append(1)
    return store_all(chain)
a = torch_exec.auto_checkpoint(model(), "100%", backend="cpu")
a.replan(schedule_fn=fn)
a(x).sum().backward()
print("schedule_fn calls after replan(schedule_fn=fn) then a step:", len(calls))
bad = bad or not calls
b = torch_exec.auto_checkpoint(model(), "100%", backend="cpu", schedule_fn=fn)
b(x).sum().backward()
print("schedule_fn calls with auto_checkpoint(..., schedule_fn=fn):", len(calls))
sys.exit(1 if bad else 0)
