"""gpusolve.join.solve_join with a Turn whose fields are not what they say: Turn(frees_inputs="no") passes
Turn.validate and fails deep in the join DP with a raw NumPy "TypeError: ufunc 'bitwise_and' not supported"
(gpusolve/join/dp.py); Turn(tape_bytes=2**60) is not refused as more than 2^50 bytes, and the error that follows
tells the user to raise the budget to 1152921504606850976 B, which every budget parser refuses.
Expected: one ValueError naming the field (frees_inputs must be true or false; sizes at most 2^50).
Fix: gpusolve/join/network.py Turn.validate / _check_bytes.
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_turn_unvalidated.py
Fixed in session 18: Turn.validate checks frees_inputs and the 2^50 limit; exits 0."""
import sys, traceback, warnings
from _rv18 import chain4  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
from gpusolve.join import solve_join
from gpusolve.join.network import Turn

c = chain4()
bad = False
for turn in (Turn(frees_inputs="no"), Turn(tape_bytes=2 ** 60)):
    try:
        solve_join([c, c], turn, "60%", backend="cpu")
        print(f"{turn}: accepted"); bad = True
    except Exception as e:
        last = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{last.filename.split('gpusolve/')[-1]}:{last.lineno}"
        print(f"{turn}:\n  {type(e).__name__}: {str(e)[:300]}  [{where}]")
        if isinstance(e, TypeError) or "frees_inputs" not in str(e) and "2^50" not in str(e):
            bad = True
sys.exit(1 if bad else 0)
