"""units._whole_budget (new: "a fraction of a byte refused everywhere", the wrapper's rule moved into
parse_budget) tests ``isinstance(bare, float)``: Python floats and np.float64 (a float subclass) are refused,
but np.float32 / np.float16 (NumPy's other floats, which gpusolve's parsers otherwise accept as numbers) pass
and are rounded down: np.float32(0.5) -> 0 B, np.float32(1000.5) -> 1000 B, in solve() as in auto_checkpoint().
Expected: every real non-integral number refused (numbers.Real and float(x) != int(x))."""
import sys

import numpy as np

from _setup import ROOT, nn, te  # noqa: F401  (the tree under test: GS_ROOT)
from gpusolve.units import parse_budget

bad = False
for value in (1000.5, np.float64(1000.5), np.float32(1000.5), np.float16(2.5)):
    try:
        got = parse_budget(value, 10_000)
        print(f"parse_budget({value!r}) -> {got} B")
        bad = True
    except ValueError as err:
        print(f"parse_budget({value!r}): refused: {str(err)[:60]}...")
try:
    te.CheckpointedSequential(nn.Sequential(nn.Linear(2, 2)), budget=np.float32(0.5))
    print("CheckpointedSequential(budget=np.float32(0.5)): accepted (0 B)")
except ValueError as err:
    print(f"CheckpointedSequential(budget=np.float32(0.5)): refused: {str(err)[:60]}...")
print("BUG: NumPy float32/float16 fractions of a byte are rounded down, not refused" if bad else "ok")
sys.exit(1 if bad else 0)
