"""bench/offload_executor.py exits 0 when a network fails: bench_network's exception is caught, appended to
``errors`` and the report written, and ``main()`` returns None (``if __name__ == "__main__": main()``).

bench/gpu_session.py records a step as done when its exit code is 0, so ``offload-executor-densenet121-again``
or ``offload-executor-resnet50-paper`` whose network raised on the GPU is marked done and never rerun.

Without a GPU the script is run as ``__main__`` with torch.cuda faked just enough to get past its CUDA check
and link measurement (as tests/_gpu_standin.py fakes CuPy), and bench/executor.py's ``build`` (which
offload_executor imports) raising RuntimeError as a device-side failure would (an OOM, say). Exits 1 while
the exit code is 0, 0 once it is nonzero.
"""
import runpy
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import torch_exec.offload as offload  # noqa: E402

if torch.cuda.is_available():
    print("a CUDA device is present: this repro fakes one; run it on a CPU machine")
    sys.exit(0)
torch.cuda.is_available = lambda: True
torch.cuda.get_device_name = lambda *a, **k: "Fake GPU"
offload.measure_link = lambda *a, **k: {"device": "Fake GPU", "d2h_bytes_per_ms": 2.0e7, "h2d_bytes_per_ms": 2.0e7,
                                        "latency_ms": 0.01, "channels": 1, "points": []}

import executor  # noqa: E402  (bench/executor.py: offload_executor's bench_network imports it by this name)


def _fails(*args, **kwargs):
    raise RuntimeError("CUDA out of memory (stand-in for a failure on the device)")


executor.build = _fails

with tempfile.TemporaryDirectory() as out:
    sys.argv = ["bench/offload_executor.py", "--networks", "resnet50", "--no-paper", "--out", out]
    code = 0
    try:
        runpy.run_path(str(ROOT / "bench" / "offload_executor.py"), run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except Exception as err:  # an uncaught failure would give Python's exit code 1
        print(f"raised {type(err).__name__}: {err}")
        code = 1
    report = next(Path(out).glob("offload_executor_*.json"), None)
    failed = report is not None and "resnet50:" in report.read_text()
print(f"network failed: {failed}; exit code {code}")
if code == 0 and failed:
    print("BUG: bench/offload_executor.py exits 0 although its only network failed; gpu_session marks the step done")
    sys.exit(1)
print("ok" if code else "the network did not fail here: cannot tell")
sys.exit(0)
