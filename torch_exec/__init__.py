"""PyTorch side of gpusolve: profile a chain of stages, run a solved plan with autograd.

``auto_checkpoint(model, budget="8GiB")`` wraps any model (its graph captured with torch.export and
cut into a chain) and is called exactly like it. ``profile(stages, sample_input) -> gpusolve.Chain``
measures a chain (CUDA events and allocator counters on a GPU; exact sizes and CPU times otherwise)
and reads/writes ``measured-chain/1``. ``CheckpointedSequential(stages, budget="6GiB")`` is an
``nn.Module`` that trains a given list of stages under the memory budget with the optimal schedule;
``CheckpointedJoin(branches, head, budget)`` does the same for k chains meeting at a head (join DP).
torch is imported here, never in ``gpusolve``.
"""
from ._util import DrawsFoundWarning
from .auto import AutoCheckpointed, CaptureError, auto_checkpoint
from .executor import CheckpointedSequential, interpret, plan_from_schedule, split_schedule
from .join import CheckpointedJoin
from .meter import ProfilerBusyError
from .profiler import (
    AttributeWriteError,
    CPUTimingWarning,
    DataDependentShapeError,
    InputMutationWarning,
    ParameterWriteError,
    chain_from_profile,
    load_profile,
    profile,
    profile_dict,
    save_profile,
)

__all__ = ["AttributeWriteError", "AutoCheckpointed", "CPUTimingWarning", "CaptureError", "CheckpointedJoin", "CheckpointedSequential",
           "DataDependentShapeError", "DrawsFoundWarning", "InputMutationWarning", "ParameterWriteError", "ProfilerBusyError", "auto_checkpoint",
           "chain_from_profile", "interpret", "load_profile", "plan_from_schedule", "profile", "profile_dict", "save_profile",
           "split_schedule"]
