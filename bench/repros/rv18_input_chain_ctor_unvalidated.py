"""Chain(...) accepts fields of the wrong type that Chain.from_dict refuses, and fails later or silently:
- multi_tape="no"/"False": kept as the string, which is truthy: the multi-tape model is solved, not the thesis
  model (thesis case 1 at budget 8: 21.0 instead of 55.0), and
  chain.to_json(path) writes a file that Chain.load refuses ("multi_tape = 'no' must be true or false");
- provenance="x": solve() works, then chain.summary() / compare() raise a raw AttributeError
  "'str' object has no attribute 'get'";
- names="abc" on a 3-stage chain: silently split into ['a', 'b', 'c'].
Expected: Chain() refuses each with the ValueError from_dict gives. Fix: gpusolve/chain.py Chain.__post_init__.
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_chain_ctor_unvalidated.py
Fixed in session 18: Chain.__post_init__ checks names, multi_tape and provenance (_check_chain_flags, shared with from_dict); exits 0."""
import os, sys, tempfile, warnings
from _rv18 import ROOT  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
from gpusolve import Chain

n = 3
good = dict(t_fwd=[1.0] * n, t_fwd_nograd=[1.0] * n, t_bwd=[2.0] * n, act_bytes=[100] * n, grad_bytes=[100] * n,
            tape_bytes=[200] * n, fwd_nograd_extra=[0] * n, fwd_grad_extra=[0] * n, bwd_extra=[0] * n)
bad = False
try:
    c = Chain(**good, multi_tape="no")
    print("Chain(multi_tape='no') accepted: multi_tape =", repr(c.multi_tape)); bad = True
    path = os.path.join(tempfile.mkdtemp(), "c.json")
    c.to_json(path)
    try:
        Chain.load(path); print("  its saved file loads")
    except Exception as e:
        print(f"  its saved file does not load: {type(e).__name__}: {e}")
except ValueError as e:
    print("multi_tape refused:", e)
try:
    c = Chain(**good, provenance="x")
    print("Chain(provenance='x') accepted"); bad = True
    try:
        c.summary()
    except Exception as e:
        print(f"  chain.summary(): raw {type(e).__name__}: {e}")
except ValueError as e:
    print("provenance refused:", e)
try:
    c = Chain(**good, names="abc")
    print("Chain(names='abc') accepted: names =", c.names); bad = True
except ValueError as e:
    print("names refused:", e)
# multi_tape="False" (a string) solves the multi-tape model: another optimum, silently
import dataclasses, json
from gpusolve import solve
case = json.load(open(ROOT + "/gpusolve/data/thesis_dp_cases.json"))["cases"][0]
thesis = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"])
for mt in (False, "False"):
    try:
        t = solve(dataclasses.replace(thesis, multi_tape=mt), 8, backend="exact").predicted_time_ms
        print(f"thesis case 1 at budget 8 with multi_tape={mt!r}: optimum {t}")
    except ValueError as e:
        print(f"multi_tape={mt!r} refused: {e}")
sys.exit(1 if bad else 0)
