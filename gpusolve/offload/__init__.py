"""Offloading activations to host memory, alone (the seed paper's model) and combined with recomputation.

The combined recompute + offload DP (spec ``offload.md`` B.4.1, the ``Swap k`` action with a one-bit
state): :mod:`.link` (the device-host :class:`Link`), :mod:`.dp` (C(i, j, m, sigma) on the CPU),
:mod:`.cuda` (the same table on the device, bit for bit), :mod:`.solver` (:func:`solve_offload`).
Schedules use the IR's ``OFFLOAD``/``RELEASE``/``PREFETCH``/``ACQUIRE`` ops and are simulated on two
timelines by :func:`gpusolve.simulate.simulate` (``link=``).
"""
from .link import Link, parse_rate
from .dp import min_offload_bytes
from .solver import OffloadPlan, solve_offload

__all__ = ["Link", "parse_rate", "min_offload_bytes", "OffloadPlan", "solve_offload"]

# [O]'s own model and algorithms, exactly (Beaumont, Eyraud-Dubois, Shilova 2019; spec B.1-B.3): baselines.
from .paper import (OffloadChain, dynprog, fractional_optimum, greedy, lower_bound, m_peak,  # noqa: E402
                    relaxed_makespan, vdnn)
from .paper import simulate as simulate_paper  # noqa: E402

__all__ += ["OffloadChain", "dynprog", "fractional_optimum", "greedy", "lower_bound", "m_peak", "relaxed_makespan",
            "simulate_paper", "vdnn"]
