"""A gpusolve-chain/1 file whose "t_fwd" is empty (every other field full) is reported as "the chain is empty", not as
t_fwd being the field of another length (a review of 3a24b36, 2026-11-28).

3a24b36 makes Chain.validate name the odd field out (the stage count is what most fields say), but the emptiness
check before it still takes the stage count from len(t_fwd) alone.
Observed (resnet50_b128 saved with Chain.to_dict(), 21 stages; this script):
  t_fwd = []     -> "the chain is empty: it needs at least one stage"
  act_bytes = [] -> "field 'act_bytes' has 0 values but the chain has 21 stages (the length of the other fields)"
  t_bwd = []     -> "field 't_bwd' has 0 values but the chain has 21 stages (the length of the other fields)"
Cause: gpusolve/chain.py Chain.validate: ``n = len(self.t_fwd); if n == 0: raise ValueError("the chain is empty ...")``
runs before the length rule.
Expected: the chain is empty only when every field is (check the lengths first, or ``if not any(lengths.values())``);
t_fwd = [] is named like any other field. Exits 1 while t_fwd = [] is reported as an empty chain."""
import sys

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain

data = Chain.load("resnet50_b128").to_dict()
bad = False
for name in ("t_fwd", "act_bytes", "t_bwd"):
    edited = dict(data, **{name: []})
    try:
        Chain.from_dict(edited)
        message = "accepted"
    except ValueError as err:
        message = str(err)
    print(f"{name} = [] ({len(data['t_fwd'])} values in every other field): {message}")
    bad |= name == "t_fwd" and "'t_fwd'" not in message
print("BUG: an empty t_fwd is reported as an empty chain" if bad else "ok")
sys.exit(1 if bad else 0)
