"""`--bucket -1` says "give a size of 0 bytes or more, e.g. '1'", but 0 is refused next ("a bucket must be at
least 1 byte"); `--bucket -1MiB` likewise. The message comes from units.parse_bytes's generic negative-size
text (what='bucket'), not from parse_bucket's rule."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

env = dict(os.environ, PYTHONPATH=ROOT)
said = {}
for b in ("-1", "0"):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", "vgg16_b64", "--budget", "90%", "--bucket", b],
                       capture_output=True, text=True, env=env,
                       cwd=tempfile.gettempdir())  # not this tree: -m puts the working folder first
    said[b] = r.stderr.strip()
    print(f"--bucket {b}: exit {r.returncode}: {said[b]}")
sys.exit(1 if "0 bytes or more" in said["-1"] else 0)
