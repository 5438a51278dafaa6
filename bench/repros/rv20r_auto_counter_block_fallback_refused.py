"""rv20r: a forward counter that keeps changing the output is refused by the block fallback too, so auto_checkpoint
cannot train the model at all (the fix of rv20a holds only for a counter whose effect saturated before the check).

Setup: ``Counting``: ``self.calls += 1; x = x * (0.5 + 0.5 * min(1, self.calls / SAT))`` then 4 residual
``tanh(Linear(16, 16))`` blocks in a ModuleList (tests/test_capture_refusals.py's model, a warm-up factor), input
4 x 8 x 16, ``auto_checkpoint(model, "70%")`` (capture="auto"), 4 steps against plain autograd.

Observed (CPU): SAT=3 (the test's): block fallback, losses equal plain autograd's at each step, counters 4 == 4.
SAT=1000 (a warm-up over 1000 steps): CaptureError at the first call "running the blocks of 'l' as one chain
changes the model's outputs (the model uses a block's output for more than the next block, or its code between
the blocks depends on when they run)"; export refused it before ("writes the attribute(s) ... at every call").
Plain autograd trains it.

Cause: torch_exec/auto.py ``_check_blocks`` runs the model twice (the reference run, then the blocks as one chain)
and puts back the RNG state and the buffers between the two runs, not the scalar attributes the forward writes at
every call (``probe.written``, put back only afterwards by ``_put_back_written``): the second run reads
``calls`` one higher, its output differs, and the check blames the blocks.  With SAT=3 the counter is past 3 by
the check, so the factor is 1.0 in both runs and the check passes by accident.

Expected: the check restores the written scalars (``_put_back_scalars(scalars, probe.written)``) before the
second run, as it does buffers; the block fallback trains the model as plain autograd does (Note [Attributes the
forward writes at every call]).  Exits 1 while SAT=1000 is refused or differs from plain autograd.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import copy, sys, warnings
import torch, torch.nn as nn
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")
D = 16


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.Linear(D, D)

    def forward(s, x):
        return torch.tanh(s.l(x)) + x


class Counting(nn.Module):
    def __init__(s, sat):
        super().__init__()
        s.l, s.calls, s.sat = nn.ModuleList(Block() for _ in range(4)), 0, sat

    def forward(s, x):
        s.calls += 1
        x = x * (0.5 + 0.5 * min(1.0, s.calls / s.sat))
        for b in s.l:
            x = b(x)
        return x


bad = 0
for sat in (3.0, 1000.0):
    torch.manual_seed(0)
    model, x = Counting(sat), torch.randn(4, 8, D)
    ref = copy.deepcopy(model)
    w = te.auto_checkpoint(model, "70%")
    try:
        diffs = []
        for step in range(4):
            loss, want = w(x).pow(2).mean(), ref(x).pow(2).mean()
            loss.backward()
            want.backward()
            diffs.append(abs(loss.item() - want.item()))
        ok = max(diffs) < 1e-6 and model.calls == ref.calls
        print(f"SAT={sat:g}: {w.capture.method}, loss diffs {max(diffs):.3g}, counters {model.calls} vs {ref.calls}")
        bad += not ok
    except te.CaptureError as e:
        print(f"SAT={sat:g}: CaptureError: {str(e)[:160]}")
        bad += 1
sys.exit(1 if bad else 0)
