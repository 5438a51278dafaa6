"""Two calls of an auto_checkpoint wrapper before one backward whose inputs differ in shape (multi-crop: global
and local views of different sizes; a batch of another length): Note [Calls before one backward]
(torch_exec/report.py, commit 2b4a812) makes such calls one measured step (``StepRecord.calls``), held to the
budget, with a warning that names the calls. But the calls are counted per input signature: each signature has
its own executor and StepMeter (auto.py ``_call_scheduled``: ``_finalize_meters(keep_pending=True)`` keeps the
first signature's pending measurement, the second signature's executor begins a step of its own meter), so the
second call does not join: the record says 1 call, its peak holds both calls, and it reads over budget with the
warning's remedy "re-profile ... or lower the budget by the excess", which no re-profiling cures.

M(D=256, L=8) at "45%", x of 256 rows and a second input of 240 rows; each step measured with measure_memory(1).
Observed (torch 2.13 CPU, commit 2b4a812): one call per step: 1049608 B beyond the gradients against a budget of
1180112 B, within. Two calls of different shapes (256 + 240 rows): 1534988 B (1.30x the budget), over, calls=1,
and its MemoryBudgetWarning blames the profile and does not name the calls. Two calls of one shape (256 + 256):
1584140 B (1.34x), calls=2 (joined, as the Note says; the wrapper's warning was given already).
Expected: the step's record counts both calls (calls=2) and its warning names them, as for calls of one shape.
Exits 1 while the different-shape step reads calls=1 or its warning leaves the calls out."""
import sys
import warnings

from _setup import M, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
w = te.auto_checkpoint(M(D=256, L=8), "45%", backend="cpu")
g = torch.Generator().manual_seed(0)
xa, ya = torch.randn(256, 256, generator=g), torch.randint(0, 10, (256,), generator=g)
xb, yb = torch.randn(240, 256, generator=g), torch.randint(0, 10, (240,), generator=g)
w.prepare(xa, ya)
w.prepare(xb, yb)


results = {}
# the different shapes first: a wrapper's budget warning is given once
for name, calls in (("one call", [(xa, ya)]), ("256 + 240 rows", [(xa, ya), (xb, yb)]),
                    ("same shape x2", [(xa, ya), (xa, ya)])):
    before = list(w.memory_report())
    w.measure_memory(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = sum(w(x, y) for x, y in calls)
        loss.backward()
        after = list(w.memory_report())
    w.zero_grad()
    new = [r for r in after if not any(r is b for b in before)]
    msgs = [str(c.message) for c in caught]
    for r in new:
        print(f"{name}: budget {r.budget} B, beyond gradients {r.beyond_param_grads} B "
              f"({r.beyond_param_grads / r.budget:.2f}x), within {r.within_budget}, calls {r.calls}")
    over = [m for m in msgs if "re-profile" in m]
    named = any("calls of the model before one backward" in m for m in over)
    print(f"  budget warnings {len(over)}, one names the calls: {named}")
    results[name] = (new, named)

new, named = results["256 + 240 rows"]
bad = len(new) != 1 or new[0].calls != 2 or (not new[0].within_budget and not named)
print("BUG: calls of another input signature before one backward are not counted in the step's record"
      if bad else "ok")
sys.exit(1 if bad else 0)
