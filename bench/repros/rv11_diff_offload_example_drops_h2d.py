"""The offload-flag errors' example "completes the user's own command" (3a24b36) but drops the user's
--h2d-bandwidth, even where that flag is the one the error is about, and pastes the profile path unquoted: the
command it suggests, run as printed, solves over another link, or for another profile (a review of 3a24b36,
2026-11-28).

Observed (this script; vgg16_b64 saved as "<tmp>/my profiles/vgg.json"):
  gpusolve solve vgg16_b64 --budget 50% --h2d-bandwidth 5GB/s
  -> "--h2d-bandwidth describes the host link: add --offload (e.g. gpusolve solve vgg16_b64 --budget 50% --offload
     --bandwidth 12GB/s --latency 0.01ms)": no --h2d-bandwidth in it (both directions at 12GB/s);
  gpusolve solve "<tmp>/my profiles/vgg.json" --budget 50% --latency 1ms
  -> "... (e.g. gpusolve solve <tmp>/my profiles/vgg.json --budget 50% ...)": split as a shell splits it, the
     profile argument is "<tmp>/my" and "profiles/vgg.json" an extra argument.
Cause: gpusolve/cli.py offload_example joins ``args.profile`` and the flags with " " and leaves out
``args.h2d_bandwidth``.
Expected: the example keeps every host-link flag the user gave (--h2d-bandwidth too) and quotes its words
(``shlex.join``). Exits 1 while the example drops --h2d-bandwidth or splits the profile path."""
import json
import os
import shlex
import subprocess
import sys
import tempfile

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

from gpusolve import Chain


def example(argv, cwd):
    r = subprocess.run([sys.executable, "-m", "gpusolve", *argv], capture_output=True, text=True, cwd=cwd,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    start = err.find("(e.g. ")
    return err, (err[start + 6:err.rindex(")")] if start >= 0 else "")


d = tempfile.mkdtemp()
os.makedirs(os.path.join(d, "my profiles"))
path = os.path.join(d, "my profiles", "vgg.json")
with open(path, "w") as f:
    json.dump(Chain.load("vgg16_b64").to_dict(), f)

bad = 0
err, cmd = example(["solve", "vgg16_b64", "--budget", "50%", "--h2d-bandwidth", "5GB/s"], d)
print(f"solve vgg16_b64 --budget 50% --h2d-bandwidth 5GB/s -> {err}")
if "--h2d-bandwidth" not in shlex.split(cmd):
    bad += 1
    print("  the example has no --h2d-bandwidth")
err, cmd = example(["solve", path, "--budget", "50%", "--latency", "1ms"], d)
print(f"solve '{path}' --budget 50% --latency 1ms -> {err}")
words = shlex.split(cmd)
if len(words) < 3 or words[2] != path:
    bad += 1
    print(f"  the example's profile argument, split as a shell splits it: {words[2:4]}")
print(f"BUG: {bad} example(s) that are not the user's command" if bad else "ok")
sys.exit(1 if bad else 0)
