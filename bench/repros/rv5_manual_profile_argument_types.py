"""prepare(x, profile=...) takes only the measured-chain/1 dict. What the README's "Profile once, save
it" shows making (torch_exec.profile(stages, x, path=...) returns a gpusolve Chain and writes a JSON
file), passed as the file's path, a Path or that Chain (or load_profile's Chain), fails with Python's
bare TypeError ("string indices must be integers", "'Chain' object is not subscriptable") that says
neither what is expected nor how to get it (json.load(open(path)) or torch_exec.profile_dict)."""
import json
import sys
import tempfile
from pathlib import Path

from _setup import nn, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
seq = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
x = torch.randn(8, 16)
path = Path(tempfile.mkdtemp()) / "my_profile.json"
chain = te.profile(seq, x, path=str(path))
unclear = 0
for what, given in (("the path (str)", str(path)), ("a Path", path), ("torch_exec.profile's Chain", chain),
                    ("load_profile's Chain", te.load_profile(path)), ("json.load of the file", json.loads(path.read_text()))):
    w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
    try:
        plan = w.prepare(x, profile=given)
        print(f"{what}: planned, budget {plan.budget_bytes} B")
    except Exception as exc:  # noqa: BLE001
        message = str(exc)
        clear = "profile" in message
        unclear += not clear
        print(f"{what}: {type(exc).__name__}: {message[:120]}{'' if clear else '   <- names neither the argument nor the fix'}")
sys.exit(1 if unclear else 0)
