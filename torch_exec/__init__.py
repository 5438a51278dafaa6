"""PyTorch side of gpusolve: profile a chain of stages, run a solved plan with autograd.

``profile(stages, sample_input) -> gpusolve.Chain`` measures a chain (CUDA events and allocator
counters on a GPU; exact sizes and CPU times otherwise) and reads/writes ``measured-chain/1``.
``CheckpointedSequential(stages, budget="6GiB")`` is an ``nn.Module`` that trains the stages under
the memory budget with the optimal schedule. torch is imported here, never in ``gpusolve``.
"""
from .executor import CheckpointedSequential, interpret, plan_from_schedule, split_schedule
from .profiler import (CPUTimingWarning, InputMutationWarning, chain_from_profile, load_profile, profile,
                       profile_dict, save_profile)

__all__ = ["CheckpointedSequential", "interpret", "plan_from_schedule", "split_schedule", "CPUTimingWarning",
           "InputMutationWarning", "chain_from_profile", "load_profile", "profile", "profile_dict", "save_profile"]
