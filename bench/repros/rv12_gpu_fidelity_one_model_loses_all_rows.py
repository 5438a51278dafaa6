"""bench/fidelity.py (GPU step ``fidelity-gpu``) loses every model's rows when one model raises.

run_models catches ImportError only; any other exception of one model (on the H100, 2026-11-26, the first
model's profile gave a negative tape_bytes: ValueError) ends the script before write(), so the models
measured before it are not written either, and the step's GPU time is lost whole. Here two tiny models run
on the CPU, the second raising RuntimeError as a device-side failure would: exits 1 while the first model's
rows are not written, 0 once they are (the failure may still give a nonzero exit code: the step then stays
pending, as it should).
"""
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import fidelity  # noqa: E402
from torch_exec.split import CrossEntropyStage  # noqa: E402


def tiny_ok():
    layers = [nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4),
              CrossEntropyStage(torch.randint(0, 4, (8,)))]
    return nn.Sequential(*layers), torch.randn(8, 16)


def tiny_fails():
    raise RuntimeError("CUDA error: an illegal memory access was encountered (stand-in)")


fidelity.MODELS = {"tiny_ok": tiny_ok, "tiny_fails": tiny_fails}
with tempfile.TemporaryDirectory() as out:
    try:
        fidelity.main(["--device", "cpu", "--models", "tiny_ok,tiny_fails", "--fractions", "1.0", "--steps", "1",
                       "--passes", "1", "--no-sequential", "--out", out, "--name", "fid"])
        raised = None
    except SystemExit as stop:
        raised = f"SystemExit({stop.code})"
    except Exception as err:
        raised = f"{type(err).__name__}: {err}"
    path = Path(out) / "fid.json"
    written = path.exists() and '"tiny_ok"' in path.read_text()
print(f"second model: {raised or 'no exception out of main'}; first model's rows written: {written}")
if not written:
    print("BUG: one failing model discards the rows of the models measured before it")
    sys.exit(1)
sys.exit(0)
