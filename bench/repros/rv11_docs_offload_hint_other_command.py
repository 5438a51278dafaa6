"""`gpusolve curve|compare PROFILE --offload` without --bandwidth (and --bandwidth/--latency without --offload) names
as the fix a `gpusolve solve resnet50_b128 --budget 35% ...` command: another subcommand, another profile and a
budget that curve does not take (a review of the README's bad-input errors, 2026-11-28).

Observed:
  gpusolve curve vgg16_b64 --offload --out c.png
  -> exit 2, "gpusolve: error: --offload needs --bandwidth (the device-host copy rate, e.g. 12GB/s; measure it with
     torch_exec.offload.measure_link()): gpusolve solve resnet50_b128 --budget 35% --offload --bandwidth 12GB/s
     --latency 0.01ms"
Pasting that runs a solve of resnet50_b128, not the curve of vgg16_b64 (and `gpusolve curve ... --budget 35%` is
"unrecognized arguments: --budget"). compare, and `curve vgg16_b64 --latency 1ms` ("add --offload (e.g. gpusolve
solve resnet50_b128 --budget 35% ...)") do the same.
Cause: gpusolve/cli.py offload_link appends the fixed OFFLOAD_EXAMPLE. Expected: the example is the user's own
command and profile with the missing flag added (e.g. "gpusolve curve vgg16_b64 --offload --bandwidth 12GB/s"),
and never carries --budget for curve. Exit 1 while a hint names another command or profile.
"""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)

d = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPATH=ROOT)
bad = 0
for args, command in ((["curve", "vgg16_b64", "--offload", "--out", "c.png"], "curve"),
                      (["compare", "vgg16_b64", "--budget", "90%", "--offload"], "compare"),
                      (["curve", "vgg16_b64", "--latency", "1ms", "--out", "c.png"], "curve")):
    r = subprocess.run([sys.executable, "-m", "gpusolve", *args], capture_output=True, text=True, env=env, cwd=d)
    err = r.stderr.strip()
    hint = err[err.find("gpusolve ", len("gpusolve: error:")):] if "gpusolve " in err[16:] else ""
    wrong = r.returncode != 2 or "Traceback" in err or (hint and (f"gpusolve {command} vgg16_b64" not in hint
                                                                  or (command == "curve" and "--budget" in hint)))
    bad += bool(wrong)
    print(f"gpusolve {' '.join(args)}: exit {r.returncode}; {err[-260:]}{'   <-- hint for another command' if wrong else ''}")
print(f"BUG: {bad} hint(s) name another command or profile" if bad else "ok")
sys.exit(1 if bad else 0)
