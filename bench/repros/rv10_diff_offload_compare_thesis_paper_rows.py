"""`gpusolve compare --offload` and `gpusolve curve --offload` (gpusolve.offload.compare: offload_records,
offload_curve_data) on a chain in the thesis's model (multi_tape=False, Chain.from_thesis) report the paper's
offload-only algorithms (GREEDY [O], DYNPROG S=500 [O], VDNN [O]: "store-all plus offloaded tapes") as fitting
below the least budget and faster than the combined optimum (a review of 14dbf02, 2026-11-28).

14dbf02 made compare's store-all and segment rows in such a chain "outside the thesis model's class" (store-all
there is priced at 8 B under a least budget of 13 B); the [O] rows are store-all with tapes moved, priced by the
same wrong encoding, and were left as they were.

Observed (bundled thesis case random_seed1_N3, least budget 13 B, --bandwidth 1GB/s, --backend cpu):
- `gpusolve compare thesis.json --budget 13 --offload --bandwidth 1GB/s`: combined (gpusolve) 20.76 ms at 13 B,
  recompute only 23.64 ms; store-all "no ... outside the thesis model's class"; GREEDY [O], DYNPROG S=500 [O], VDNN [O]
  each 14.15 ms, peak 8 B, fits: yes;
- uniform_N20 at --budget 3: combined 41.00 ms at 3 B; the [O] rows 21.00 ms at 2 B, fits: yes;
- `gpusolve curve thesis.json --offload --bandwidth 1GB/s --json`: the offload-only line at 14.15 ms at every
  budget (13-18 B), the combined line at 20.76 ms: the "offload only" curve under the combined one.
Cause: gpusolve/offload/compare.py offload_records and offload_curve_data add paper_results(chain, ...) (the paper's
OffloadChain built from the chain's store-all) whatever chain.multi_tape is.
Expected: as for the recompute baselines (gpusolve/baselines.py OUTSIDE_THESIS_CLASS): for a chain with
multi_tape=False the [O] rows are not reported as fitting (feasible=False with that reason, or left out) and the
curve draws no offload-only line below the class's optimum. Exits 1 while the bug shows."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain

cases = json.loads((Path(ROOT) / "gpusolve" / "data" / "thesis_dp_cases.json").read_text())["cases"]
bad = False
for name, budget in (("random_seed1_N3", 13), ("uniform_N20", 3)):
    case = next(c for c in cases if c["name"] == name)
    chain = Chain.from_thesis(case["alpha_f"], case["alpha_b"], case["beta_f"], case["beta_b"], name=name)
    d = tempfile.mkdtemp()
    path = os.path.join(d, "thesis.json")
    Path(path).write_text(json.dumps(chain.to_dict()))
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "compare", path, "--budget", str(budget), "--offload",
                        "--bandwidth", "1GB/s", "--backend", "cpu", "--json"], capture_output=True, text=True,
                       env=env, cwd=d)
    if r.returncode:
        print(f"{name}: gpusolve compare --offload exit {r.returncode}: {r.stderr.strip()[-300:]}")
        bad = True
        continue
    out = json.loads(r.stdout)
    rows = out["records"] if isinstance(out, dict) and "records" in out else out
    combined = next(row for row in rows if row["name"].startswith("combined"))
    print(f"{name} at {budget} B: combined {combined['time_ms']:.2f} ms, peak {combined['peak_bytes']} B")
    for row in rows:
        if "[O]" in row["name"] and row["feasible"] and row["time_ms"] < combined["time_ms"] * (1 - 1e-9):
            print(f"  {row['name']!r}: {row['time_ms']:.2f} ms, peak {row['peak_bytes']} B, feasible "
                  f"(below the combined plan's peak, the least budget here: {row['peak_bytes'] < combined['peak_bytes']})")
            bad = True
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "curve", path, "--offload", "--bandwidth", "1GB/s",
                        "--backend", "cpu", "--json", "--out", os.path.join(d, "c.png")], capture_output=True,
                       text=True, env=env, cwd=d)
    if r.returncode:
        print(f"{name}: gpusolve curve --offload exit {r.returncode}: {r.stderr.strip()[-300:]}")
        bad = True
        continue
    data = json.loads(r.stdout)
    best_combined = min(data["combined"]["time_ms"])
    offload_only = [t for t in data["offload_only"]["best"] if t is not None]
    if offload_only and min(offload_only) < best_combined * (1 - 1e-9):
        print(f"  curve --offload: offload-only line down to {min(offload_only):.2f} ms, the combined line's best "
              f"{best_combined:.2f} ms (grid {data['grid_bytes'][0]}-{data['grid_bytes'][-1]} B)")
        bad = True
print("BUG: the paper's offload rows (store-all based) reported in a thesis-model chain" if bad else "ok")
sys.exit(1 if bad else 0)
