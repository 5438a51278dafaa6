"""`gpusolve.simulate` accepts FREE(k) of a checkpoint while the tape of stage k+1 (recorded from it) is still
live, and counts its bytes as freed: a schedule then "fits" below the chain's own minimum feasible budget.

The byte model assumes a stage's input stays held while its tape lives: a tape is what the recording forward
*newly* allocated (profile field xbar), not the input the backward reads (Note [Outputs passed through],
gpusolve/chain.py: "its tape does not need them (the group's input holds them while the tape lives)"; every DP
and min_feasible_bytes keep a_k until the right part (k, j) is done). simulate (Holdings.apply, FREE branch,
gpusolve/simulate.py) only checks that a_k is a held checkpoint. So a hand-written or third-party schedule
validated with simulate (docstring: "it doubles as the IR's validator") gets a peak below what the model allows
and below what autograd would hold (it keeps the saved input alive regardless of the executor's reference).

Expected: simulate raises ScheduleError (a_1 is the input of the live tape of stage 2), or at least reports no
peak below min_feasible_bytes. Observed: peak 18 B, while min_feasible_bytes = 21 B and solve() refuses 18 B.

Run: GS_ROOT=<tree> python bench/repros/rv19c_simulate_frees_input_of_live_tape.py
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("GS_ROOT", str(Path(__file__).resolve().parents[2])))

from gpusolve import Chain, simulate  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402
from gpusolve.schedule import Op, OpKind as K  # noqa: E402
from gpusolve.simulate import ScheduleError  # noqa: E402

chain = Chain(t_fwd=[2.0, 5.0], t_fwd_nograd=[2.0, 2.0], t_bwd=[8.0, 5.0], act_bytes=[7, 5], grad_bytes=[7, 4],
              tape_bytes=[8, 6], bwd_tape_bytes=[2, 0], fwd_nograd_extra=[0, 3], fwd_grad_extra=[0, 1],
              bwd_extra=[1, 3], input_bytes=7, input_grad_bytes=1)
ops = [Op(K.FWD_NOGRAD, 1, True), Op(K.FWD_TAPE, 2), Op(K.FREE, 1),  # a_1 freed while stage 2's tape lives
       Op(K.BWD, 2), Op(K.FWD_TAPE, 1), Op(K.BWD, 1)]
least = min_feasible_bytes(chain)
try:
    sim = simulate(chain, ops)
except ScheduleError as err:
    print(f"refused: {err}")
    sys.exit(0)
print(f"simulate: {sim.time_ms} ms, peak {sim.peak_bytes} B; chain's min_feasible_bytes {least} B")
bad = sim.peak_bytes < least
print("BUG: simulate accepts freeing the input of a live tape and reports a peak below the model's minimum"
      if bad else "ok")
sys.exit(1 if bad else 0)
