"""`--latency 10μs` written with the Greek small letter mu (U+03BC, what most keyboards and input methods give for
"micro") ends `gpusolve solve --offload` with a traceback (22 lines of stderr), KeyError: 'μs' (exit 1), and
Link.parse(..., latency_ms="10μs") raises KeyError instead of ValueError. The micro sign (U+00B5, "10µs") works.
Cause: gpusolve/units.py _TIME matches the unit with re.IGNORECASE, under which U+03BC matches the pattern's
U+00B5 (both fold to U+039C), but parse_duration_ms then looks up match.group(2).lower() = 'μs' in _TIME_UNITS,
which only has 'µs'. Same for a capital Greek MU ('10ΜS'). The rate regex of gpusolve/offload/link.py has the same
flaw, silently: '12GB/\u017f' (LATIN SMALL LETTER LONG S, which IGNORECASE matches as 's') is read as 12 GB per *ms*
(1000x the rate), because its unit then is neither 's' nor 'sec'.
Expected: 0.01 ms for both spellings of micro (or one line naming the value and the fix, exit 2).
Exits nonzero while the bug shows."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT  # the tree under test: GS_ROOT
from gpusolve.offload import Link

bad = 0
for text in ("10µs", "10μs", "10ΜS"):
    try:
        print(f"Link.parse('12GB/s', latency_ms={text!r}) ({ascii(text)}): latency "
              f"{Link.parse('12GB/s', latency_ms=text).latency_ms} ms")
    except ValueError as err:
        print(f"Link.parse latency {ascii(text)}: ValueError: {err}")
    except Exception as err:  # noqa: BLE001
        print(f"Link.parse latency {ascii(text)}: {type(err).__name__}: {err}")
        bad += 1
r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", "resnet50_b128", "--budget", "35%", "--offload",
                    "--bandwidth", "12GB/s", "--latency", "10μs", "--backend", "cpu"], capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=ROOT), cwd=tempfile.mkdtemp())
lines = r.stderr.strip().splitlines()
print(f"gpusolve solve ... --latency 10μs: exit {r.returncode}, {len(lines)} stderr line(s), last: {lines[-1] if lines else ''}")
bad += "Traceback" in r.stderr
from gpusolve.offload.link import parse_rate  # noqa: E402
try:
    rate = parse_rate("12GB/\u017f")
    print(f"parse_rate('12GB/\\u017f'): {rate:g} B/ms (12GB/s is {parse_rate('12GB/s'):g} B/ms)")
    bad += rate != parse_rate("12GB/s")
except ValueError as err:
    print(f"parse_rate('12GB/\\u017f'): ValueError: {err}")
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
