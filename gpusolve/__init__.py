"""gpusolve: optimal activation checkpointing, with the policy solver on the GPU.

Pure Python + NumPy at import; torch and CuPy are imported only by the parts that need them.
"""
from .chain import Chain
from .schedule import Checkpoint, Op, OpKind, Tape, policy_to_schedule
from .simulate import ScheduleError, SimResult, simulate, store_all_peak_bytes
from .errors import BackendUnavailableError, FallbackWarning, InfeasibleBudgetError, ProfileWarning
from .solve import Curve, Plan, release_device_memory, solve
from .units import format_bytes, parse_bytes

__all__ = ["Chain", "Checkpoint", "Op", "OpKind", "Tape", "policy_to_schedule", "ScheduleError", "SimResult",
           "simulate", "store_all_peak_bytes", "BackendUnavailableError", "FallbackWarning", "InfeasibleBudgetError", "ProfileWarning", "Curve", "Plan", "release_device_memory", "solve",
           "format_bytes", "parse_bytes"]
__version__ = "0.1.0"
