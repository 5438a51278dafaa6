"""Join networks: k branches (chains) that meet at one loss node.

:mod:`gpusolve.join.paper` is the seed paper's model and DP, exactly (Beaumont, Herrmann, Pallez,
Shilova, Inria RR-9273, 2019: unit-size slots, homogeneous costs u_f, u_b, u_t); the byte-model join
DP for real networks (spec A.2.5) is :mod:`.network` (model), :mod:`.dp` (J by hyperplanes),
:mod:`.bytesim` (exact-byte simulator), :mod:`.baselines` and :mod:`.solve` (:func:`solve_join`).
:mod:`gpusolve.join.exhaustive` searches every schedule of the slot model on tiny instances (the
tests' reference).
"""
from .paper import (EquivChain, JoinDP, Replay, ScheduleError, c_min, lower_bound, makespan_curve, opt0, opt0_table,
                    opt_bm, opt_bm_eq5, simulate, solver, store_all_slots)

__all__ = ["EquivChain", "JoinDP", "Replay", "ScheduleError", "c_min", "lower_bound", "makespan_curve", "opt0",
           "opt0_table", "opt_bm", "opt_bm_eq5", "simulate", "solver", "store_all_slots"]

# The byte-model join (real networks; spec A.2.5): problem type, DP, simulator, baselines, front end.
from .network import BranchCheckpoint, BranchTape, EmptyBranch, JoinNet, Turn, join_policy_to_schedule  # noqa: E402
from .bytesim import simulate_join  # noqa: E402
from .dp import JoinProblem, fill_join, min_feasible_bytes_join, min_peak_join  # noqa: E402
from .baselines import compare_join, equiv_chain, split_budget, store_all  # noqa: E402
from .solve import JoinPlan, solve_join  # noqa: E402

__all__ += ["BranchCheckpoint", "BranchTape", "EmptyBranch", "JoinNet", "Turn", "join_policy_to_schedule",
            "simulate_join", "JoinProblem", "fill_join", "min_feasible_bytes_join", "min_peak_join", "compare_join",
            "equiv_chain", "split_budget", "store_all", "JoinPlan", "solve_join"]
