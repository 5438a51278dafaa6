"""`gpusolve solve` on a profile with a missing backward time (`t_bwd: null`): the README (Cost model) says
it is estimated as 2 x t_fwd "with a ProfileWarning"; the Python API warns, but the CLI prints nothing on
stderr (cli.main records every warning and prints only FallbackWarning), and the note is not in the plan's
notes either, so a CLI user never learns that a time was made up."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import ROOT  # the tree under test: GS_ROOT

profile = json.loads((Path(ROOT) / "gpusolve" / "profiles" / "resnet50_b128.json").read_text())
profile["stages"][2]["t_bwd"] = None
d = tempfile.mkdtemp()
path = os.path.join(d, "missing_bwd.json")
Path(path).write_text(json.dumps(profile))
env = dict(os.environ, PYTHONPATH=ROOT)
shown = []
for extra in ([], ["--json"]):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", path, "--budget", "5GiB", *extra],
                       capture_output=True, text=True, env=env, cwd=d)
    notes = json.loads(r.stdout)["notes"] if extra else r.stdout
    said = "t_bwd is missing" in r.stderr or "t_bwd is missing" in str(notes)
    print(f"gpusolve solve {os.path.basename(path)} --budget 5GiB {' '.join(extra)}: exit {r.returncode}, "
          f"stderr {r.stderr.strip()!r}, mentions the estimate: {said}")
    shown.append(said)
sys.exit(0 if all(shown) else 1)
