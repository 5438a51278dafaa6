"""`solve(..., backend="exact")` (and cpu at bucket 1) is not the least predicted time that fits the budget:
a valid schedule the project's own simulator accepts is faster.

README: solve "returns the schedule of forwards, recomputations and backwards with the least predicted step
time that fits the budget"; the exact backend is "the true optimum". The DP (gpusolve/dp/problem.py) only
searches the persistent class (Tape / Checkpoint k, each checkpoint kept until its right part is done). A
schedule that uses the checkpoint a_1 once to rebuild a_2 (dropping a_1: fwd_nograd(2) without keep) and
later recomputes a_1 from a_0 is outside that class, and on this 4-stage chain it is 4 ms (9 %) faster at the
same budget, with every checkpoint that is the input of a live tape still held (no trick of the byte model).

Expected: the plan at budget 26 B takes at most 41 ms (or the docs say "optimal among persistent schedules").
Observed: exact and cpu (bucket 1) both give 45 ms; gpusolve.simulate gives the schedule below 41 ms, peak 26 B.

Left as it is (it exits 1): the DPs are optimal among persistent schedules, which the README and
docs/cost-model.md ("The class of schedules") now say; a DP over a wider class is research, not a fix.
Run: GS_ROOT=<tree> python bench/repros/rv19c_exact_misses_nonpersistent_schedule.py
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("GS_ROOT", str(Path(__file__).resolve().parents[2])))

from gpusolve import Chain, simulate, solve  # noqa: E402
from gpusolve.schedule import Op, OpKind as K  # noqa: E402

chain = Chain(t_fwd=[2.0, 2.0, 3.0, 1.0], t_fwd_nograd=[4.0, 3.0, 4.0, 3.0], t_bwd=[9.0, 4.0, 5.0, 1.0],
              act_bytes=[1, 5, 3, 3], grad_bytes=[8, 3, 5, 4], tape_bytes=[6, 6, 11, 12], bwd_tape_bytes=[3, 1, 9, 6],
              fwd_nograd_extra=[2, 0, 2, 3], fwd_grad_extra=[1, 0, 1, 3], bwd_extra=[1, 2, 1, 1],
              input_bytes=6, input_grad_bytes=9, reserved_bytes=3)
BUDGET = 26
ops = [Op(K.FWD_NOGRAD, 1, True), Op(K.FWD_NOGRAD, 2, True), Op(K.FWD_NOGRAD, 3), Op(K.FWD_TAPE, 4), Op(K.BWD, 4),
       Op(K.FREE, 3), Op(K.FWD_NOGRAD, 2), Op(K.FWD_TAPE, 3), Op(K.BWD, 3), Op(K.FREE, 2),
       Op(K.FWD_TAPE, 1), Op(K.FWD_TAPE, 2), Op(K.BWD, 2), Op(K.BWD, 1)]
sim = simulate(chain, ops)
exact = solve(chain, BUDGET, backend="exact")
cpu = solve(chain, BUDGET, backend="cpu", bucket=1)
print(f"hand schedule: {sim.time_ms} ms, peak {sim.peak_bytes} B (budget {BUDGET} B)")
print(f"solve exact:   {exact.predicted_time_ms} ms, peak {exact.predicted_peak_bytes} B")
print(f"solve cpu/1B:  {cpu.predicted_time_ms} ms, peak {cpu.predicted_peak_bytes} B")
bad = sim.peak_bytes <= BUDGET and min(exact.predicted_time_ms, cpu.predicted_time_ms) > sim.time_ms + 1e-9
print("BUG: the solver's 'optimum' is slower than a valid schedule within the budget" if bad else "ok")
sys.exit(1 if bad else 0)
