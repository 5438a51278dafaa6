"""DP backends. Each exposes ``run(problem, m_top, progress) -> (curve, policy)``."""
from .problem import BYTES_PER_STATE, Problem

__all__ = ["BYTES_PER_STATE", "Problem"]
