"""`gpusolve thesis CASES.json` solves each case with a 1-unit bucket up to its largest budget without the
host-memory check every other solve makes (gpusolve.dp.buckets.table_fits_host): a case with budgets
["5GiB"] ends in numpy's "Unable to allocate 120. GiB ..." naming neither the file, the case nor the fix.
(Not run here, to spare the machine: budgets between about half and all of free memory would be allocated
and filled instead of refused.)"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # the tree under test: GS_ROOT

case = {"name": "big", "alpha_f": [1, 1, 1], "alpha_b": [1, 1, 1], "beta_f": [1, 1, 1], "beta_b": [1, 1, 1],
        "budgets": ["5GiB"]}
d = tempfile.mkdtemp()
path = os.path.join(d, "cases.json")
Path(path).write_text(json.dumps({"format": "thesis-reference/1", "cases": [case]}))
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "thesis", path], capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=ROOT), cwd=d)
print(f"gpusolve thesis cases.json (budgets ['5GiB']): exit {r.returncode}: {r.stderr.strip()}")
sys.exit(1 if "Unable to allocate" in r.stderr or "case 1" not in r.stderr else 0)
