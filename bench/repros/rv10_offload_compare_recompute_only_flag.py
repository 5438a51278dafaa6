"""`gpusolve compare --offload`'s combined row says ``is_recompute_only_plan`` false for a plan that IS recompute only's,
depending on the backend rather than on the plan (a review of the offload feature, 2026-11-28).

Observed (vgg16_b64, budget 90%, gpusolve.offload.compare.offload_records, the rows of `compare --offload`): over
a link of 0 B/s (the plan's own note: "nothing can be moved, the plan is recompute only") and over 12GB/s, the
combined row has swaps=0 and the recompute-only row's time (56.1223 ms), yet detail.is_recompute_only_plan is False
with backend "auto" (both links) and with "cpu" over 12GB/s, True with "cpu" over 0 B/s. The same on the command
line (`compare vgg16_b64 --budget 90% --offload --bandwidth 0 --json`: False with --backend auto, True with
--backend cpu), and on resnet50_b128 at 35 % over 12GB/s (policy == plan.recompute_only.policy, same schedule).
Cause: gpusolve/offload/compare.py offload_records computes ``same = other.policy is plan.policy`` (object identity):
the combined table's recovered policy is a different object from gpusolve.solve's even when equal, so the flag only
says which of the two solves handed over the object; where no reference solve ran (a useless link on the same
backend) it falls back to ``link.is_useless``. bench/offload_curves.py counts rows by this flag.
Expected: the flag true exactly when the plan is recompute only's (``==`` on the policies, or no swap), the same
for every backend. Exits 1 while the bug shows."""
import sys

from _setup import ROOT  # noqa: F401  (GS_ROOT selects the tree)

from gpusolve import Chain
from gpusolve.offload import Link
from gpusolve.offload.compare import offload_records

chain = Chain.load("vgg16_b64")
bad = 0
for backend in ("auto", "cpu"):
    for rate in ("0", "12GB/s"):
        rows = offload_records(chain, "90%", Link.parse(rate), backend=backend)
        combined, recompute = rows[0], rows[1]
        flag = combined["detail"]["is_recompute_only_plan"]
        same = combined["detail"]["swaps"] == 0 and combined["time_ms"] == recompute["time_ms"]
        verdict = "ok" if flag == same else "BUG"
        bad += verdict == "BUG"
        print(f"backend={backend:4} link={rate:7}: combined {combined['time_ms']:.4f} ms, swaps {combined['detail']['swaps']}, "
              f"recompute only {recompute['time_ms']:.4f} ms -> is_recompute_only_plan={flag} {verdict}")
print("ok" if not bad else f"BUG: {bad} row(s) whose flag contradicts the plan")
sys.exit(1 if bad else 0)
