"""solve() at a budget of 0 B on a chain that fits it says the chain's "sizes are all 0" when they are not
(a review, 2026-11-28).

A 3-stage chain whose only non-zero sizes are act_bytes = [5, 5, 5] (and input_bytes 7): no gradient, tape or
workspace, so plain autograd holds nothing and the least budget is 0 B. solve(chain, 0, backend="cpu") returns a
plan with the note "a budget of 0 B fits this chain, whose sizes are all 0: exact DP (no buckets)", and
solve(chain, 0, backend="cpu", bucket=1) (or "50%", which resolves to 0 B) raises "a budget of 0 B fits this
chain (its sizes are all 0), but no bucket (1) divides it". Its activations are 5 B each.

Cause: gpusolve/solve.py _solve_alone and _zero_budget_bucket word the case budget >= min_feasible_bytes(chain) at
a budget of 0 B as "sizes all 0"; it means only that no plan needs memory (here: store-all keeps no checkpoint).
Expected: a note and an error that say what holds (the least budget is 0 B).
Exit 1 while the wording is wrong.
"""
import sys

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain, solve

z = [0, 0, 0]
chain = Chain(t_fwd=[1, 1, 1], t_fwd_nograd=[1, 1, 1], t_bwd=[1, 1, 1], act_bytes=[5, 5, 5], grad_bytes=z, tape_bytes=z,
              fwd_nograd_extra=z, fwd_grad_extra=z, bwd_extra=z, input_bytes=7, input_grad_bytes=0)
sizes_zero = all(int(getattr(chain, f).sum()) == 0 for f in ("act_bytes", "grad_bytes", "tape_bytes"))
print(f"act_bytes {chain.act_bytes.tolist()}: sizes all 0? {sizes_zero}")
bad = False
plan = solve(chain, 0, backend="cpu", progress=False)
for note in plan.notes:
    print(f"solve(chain, 0, backend='cpu') note: {note}")
    bad |= "sizes are all 0" in note and not sizes_zero
try:
    solve(chain, 0, backend="cpu", bucket=1, progress=False)
except ValueError as err:
    print(f"solve(chain, 0, backend='cpu', bucket=1): ValueError: {err}")
    bad |= "sizes are all 0" in str(err) and not sizes_zero
print("BUG: the message says the sizes are all 0" if bad else "ok")
sys.exit(1 if bad else 0)
