"""Baseline policies users have today, in the same schedule form as the optimum."""
from __future__ import annotations

from .chain import Chain
from .schedule import Op, policy_to_schedule, tape_chain


def store_all(chain: Chain) -> list[Op]:
    """Plain autograd: record every stage, then run every backward."""
    return policy_to_schedule(tape_chain(0, chain.n), 0, chain.n)
