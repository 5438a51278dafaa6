"""solve_budgets (new: the plans behind `gpusolve curve`'s optimal line) gives every plan at a lower budget the
notes of the plan at the top budget: on densenet121_b64 (backend cpu) a plan at the least feasible budget says
"... the plan is store-all" (store-all peaks at the store-all peak, 7.5x that budget). And the top plan's
timings keep growing after it was returned: each lower plan's policy recovery is added to its "recover"."""
import sys

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)
from gpusolve import Chain, solve
from gpusolve.dp.minpeak import min_feasible_bytes
from gpusolve.simulate import store_all_peak_bytes
from gpusolve.solve import solve_budgets

chain = Chain.load("densenet121_b64")
top, low = store_all_peak_bytes(chain), min_feasible_bytes(chain)
grid = [low + k * (top - low) // 8 for k in range(8)]
plan, lower = solve_budgets(chain, top, grid, backend="cpu", progress=False)
wrong = 0
for p in lower:
    own = solve(chain, p.budget_bytes, backend="cpu", progress=False)  # what solve() says at that budget alone
    foreign = [n for n in p.notes if n in plan.notes]
    if foreign:
        wrong += 1
        print(f"plan at {p.budget_bytes} B (peak {p.predicted_peak_bytes} B): note {foreign[0][:90]!r}... "
              f"is the top plan's (solve() alone at that budget notes {len(own.notes)}: {[n[:40] for n in own.notes]})")
alone = solve(chain, top, backend="cpu", progress=False)
recover_alone, recover_top = alone.timings.get("recover", 0.0), plan.timings.get("recover", 0.0)
print(f"top plan timings['recover']: {recover_top:.3f} s from solve_budgets, {recover_alone:.3f} s from solve() alone; "
      f"solve_seconds {plan.solve_seconds:.3f} s")
grown = recover_top > plan.solve_seconds  # a phase longer than the whole solve it is a part of
print(f"{wrong} of {len(lower)} lower plans carry the top plan's notes; top plan's recover > its solve_seconds: {grown}")
sys.exit(1 if wrong or grown else 0)
