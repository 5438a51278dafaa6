"""A size written with a lowercase b ("5Gb", gigabits) is read as bytes for budgets, buckets and --turn-bytes, where
the same unit in a rate is refused as bits (a review of the README's units, 2026-11-28).

README: "Rates are bytes per second or per ms (`12GB/s`, `11.5GiB/s`, `0.5B/ms`); a lowercase b (`12Gb/s`, bits)
is refused." and "Budgets and buckets take bytes or KiB/MiB/GiB (KB/MB/GB are powers of 1000)".
Observed:
  gpusolve solve resnet50_b128 --budget 35% --offload --bandwidth 12Gb/s
  -> exit 2, "a lowercase b reads as bits, and rates are in bytes; give '12GB/s' for bytes, or divide by 8 ..."
  gpusolve solve resnet50_b128 --budget 5Gb   -> exit 0, "budget 4.66 GiB" (5e9 bytes; 5 gigabits is 0.625e9 B)
gpusolve.units.parse_bytes("5Gb") == 5_000_000_000 (units are matched case-insensitively: "5gb", "5mIb" too).
Cause: gpusolve/units.py _number_and_scale lowercases the unit (_UNITS has "gb"); only Link.parse checks the b.
Expected: one rule for both: a size unit ending in a lowercase b refused with the rate's hint (or, if sizes are meant
to be case-insensitive, the README saying so and the rate rule explained). Exit 1 while "5Gb" is a budget of 5e9 B.
"""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)
rate = subprocess.run([sys.executable, "-m", "gpusolve", "solve", "resnet50_b128", "--budget", "35%", "--offload",
                       "--bandwidth", "12Gb/s"], capture_output=True, text=True, env=env, cwd=d)
print(f"--bandwidth 12Gb/s: exit {rate.returncode}; {rate.stderr.strip().splitlines()[-1][:160]}")
size = subprocess.run([sys.executable, "-m", "gpusolve", "solve", "resnet50_b128", "--budget", "5Gb", "--json"],
                      capture_output=True, text=True, env=env, cwd=d)
if size.returncode == 0:
    import json
    print(f"--budget 5Gb: exit 0, budget_bytes {json.loads(size.stdout)['budget_bytes']}")
else:
    print(f"--budget 5Gb: exit {size.returncode}; {size.stderr.strip()[-200:]}")
bad = rate.returncode == 2 and size.returncode == 0
print("BUG: 'Gb' is bits for a rate but bytes for a budget" if bad else "ok")
sys.exit(1 if bad else 0)
