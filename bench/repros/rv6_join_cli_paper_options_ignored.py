"""`gpusolve join resnet50_b128 resnet50_b128 --budget 50% --method equiv-chain --ut 100` runs the byte-model join
DP and prints its plan ("decided_by": "join DP"), exit 0, ignoring --method, --uf, --ub and --ut without a word:
the --json output is that of the command without them (the solve's timings aside), so a user asking for the EQUIV-CHAIN baseline, or
a costlier turn, gets the optimum at turn 0 ms and cannot tell. The other direction is refused:
`gpusolve join --paper ... --budget 5` says "--budget belong to the byte-model join on branch profiles", and
`gpusolve join --lengths 2,2 --slots 3` says "--lengths/--slots describe the paper's slot model: add --paper".
gpusolve/cli.py, cmd_join_profiles checks args.lengths/args.slots only; --uf/--ub/--ut default to 1.0 and
--method to "optimal", so they cannot be told given. Expected: an error naming them (--method, --uf/--ub/--ut
belong to --paper; the turn's time is --turn-ms; the baselines are --compare), as for --lengths/--slots."""
import json
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT

d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)


def gpusolve(*args):
    r = subprocess.run([sys.executable, "-m", "gpusolve.cli", *args], capture_output=True, text=True, env=env, cwd=d)
    return r.returncode, r.stdout, r.stderr.strip()


def untimed(out: str):
    """The --json object without the solve's own timings (they differ from run to run)."""
    obj = json.loads(out)
    for key in ("solve_seconds", "timings"):
        obj["plan"].pop(key, None)
    return obj


base = ["join", "resnet50_b128", "resnet50_b128", "--budget", "50%", "--backend", "cpu", "--json"]
plain = gpusolve(*base)
ignored = {}
for extra in (["--method", "equiv-chain"], ["--ut", "100"], ["--uf", "7", "--ub", "9"]):
    code, out, err = gpusolve(*base, *extra)
    same = code == 0 and untimed(out) == untimed(plain[1])
    ignored[" ".join(extra)] = same
    decided = json.loads(out)["plan"].get("decided_by") if code == 0 else None
    print(f"{' '.join(base + extra)}: exit {code}, decided_by {decided!r}, --json output (timings aside) "
          f"{'identical to the run without ' + ' '.join(extra) if same else 'differs'}{'; stderr: ' + err if err else ''}")
code, _, err = gpusolve("join", "--paper", "--lengths", "2,2", "--slots", "3", "--budget", "5")
print(f"the other way round, join --paper ... --budget 5: exit {code}, {err}")
code, _, err = gpusolve("join", "--lengths", "2,2", "--slots", "3")
print(f"join --lengths 2,2 --slots 3 (no --paper): exit {code}, {err}")
sys.exit(1 if any(ignored.values()) else 0)
