"""fbe36e3 refuses "a fraction of a byte everywhere" (gpusolve.units.parse_budget / _whole_budget: a bare
"0.5" is most likely a share meant as a percentage), and the wrapper now shares that rule, but
examples/train.py's --budget parser (budget_arg) still calls parse_bytes, which rounds "0.5" down to 0 B: the
example builds the model, captures and profiles it (seconds to minutes) and then fails with "budget 0 B is
below the N B the step reaches outside the stages ...", naming neither the fraction nor the percentage the user
meant. Expected: budget_arg("0.5") refused at once, as the CLI and auto_checkpoint(model, "0.5") refuse it."""
import importlib.util
import sys
from pathlib import Path

from _setup import ROOT, nn, te  # the tree under test: GS_ROOT

sys.path.insert(0, str(Path(ROOT) / "examples"))
spec = importlib.util.spec_from_file_location("train_example", Path(ROOT) / "examples" / "train.py")
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
bad = False
for text in ("0.5", "1000.5"):
    try:
        got = train.budget_arg(text)
        print(f"examples/train.py budget_arg({text!r}) -> {got!r}")
        bad = True
    except Exception as err:  # noqa: BLE001 - argparse.ArgumentTypeError
        print(f"examples/train.py budget_arg({text!r}): refused: {err}")
    try:
        te.auto_checkpoint(nn.Linear(2, 2), text)
        print(f"auto_checkpoint(model, {text!r}): accepted")
    except ValueError as err:
        print(f"auto_checkpoint(model, {text!r}): refused: {err}")
print("BUG: examples/train.py takes a fraction of a byte as a budget" if bad else "ok")
sys.exit(1 if bad else 0)
