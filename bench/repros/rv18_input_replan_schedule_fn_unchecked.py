"""CheckpointedSequential(..., schedule_fn=5) is refused when the wrapper is made ("schedule_fn must be a function
chain -> schedule"), but replan(schedule_fn=5) is not checked: before the first call it is accepted and the first
call profiles the stages and then raises a raw "TypeError: 'int' object is not callable" from _plan_grouping;
after a call replan raises the same raw TypeError. Expected: replan refuses it at once with the constructor's error.
Fix: torch_exec/executor.py _PlannedModule.replan (check schedule_fn as _set_solver does).
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_replan_schedule_fn_unchecked.py
Fixed in session 18: replan checks schedule_fn as the constructor does (check_schedule_fn); exits 0."""
import sys, traceback, warnings
from _rv18 import mlp  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
import torch
import torch_exec

m = mlp()
x = torch.randn(8, 16)
bad = False
try:
    torch_exec.CheckpointedSequential(m, budget="70%", backend="cpu", schedule_fn=5)
except TypeError as e:
    print("constructor:", e)
w = torch_exec.CheckpointedSequential(m, budget="70%", backend="cpu")
try:
    w.replan(schedule_fn=5)
    print("replan(schedule_fn=5) before any call: accepted"); bad = True
except Exception as e:
    print("replan refused:", type(e).__name__, e)
try:
    w(x).sum().backward()
except Exception as e:
    last = traceback.extract_tb(e.__traceback__)[-1]
    print(f"first call: {type(e).__name__}: {e}  [{last.filename.split('/')[-1]}:{last.lineno} {last.name}]")
    bad = bad or "not callable" in str(e)
sys.exit(1 if bad else 0)
