"""A lowercase b means bits in a rate (`--bandwidth 12Gb/s` is refused: "a lowercase b reads as bits, and rates
are in bytes") but bytes in a budget or bucket: `--budget 5Gb` is read as 5 GB (5e9 B), eight times what
the rate rule says it means, without a word. units._UNITS lower-cases the suffix."""
import json
import os
import subprocess
import sys

from _setup import ROOT  # the tree under test: GS_ROOT

env = dict(os.environ, PYTHONPATH=ROOT)
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", "resnet50_b128", "--budget", "5Gb", "--json"],
                   capture_output=True, text=True, env=env)
budget = json.loads(r.stdout)["budget_bytes"] if r.returncode == 0 else None
print(f"--budget 5Gb: exit {r.returncode}, budget_bytes {budget} {r.stderr.strip()}")
r2 = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", "resnet50_b128", "--budget", "35%", "--offload",
                     "--bandwidth", "12Gb/s"], capture_output=True, text=True, env=env)
print(f"--bandwidth 12Gb/s: exit {r2.returncode}: {r2.stderr.strip()}")
sys.exit(1 if r.returncode == 0 and r2.returncode != 0 else 0)
