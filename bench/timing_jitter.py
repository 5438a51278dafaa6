"""A pytest plugin that makes CPU stage times random: tests whose outcome follows which plan the solver picks from
the profile's measured CPU times (``time.perf_counter``) then fail here, not at random on CI.

    PYTHONPATH=bench JITTER_SEED=7 JITTER_MAX=2e-4 python -m pytest -q -p no:cacheprovider -p timing_jitter tests

Every ``time.perf_counter()`` call adds a random step of 0 to ``JITTER_MAX`` seconds (default 2e-4) to a running
offset, so the clock stays monotonic while every interval it measures grows by a random amount: the profiler's stage
times, and with them the plans, change with ``JITTER_SEED``. A large ``JITTER_MAX`` (5e-3) drowns the real times.
Why it exists: CI ran ``tests/test_exact_peak.py::test_a_python_stage_that_drops_only_on_some_calls`` on a plan that
recomputed the stage it meant to test, a pick the local runs never made (2026-11-29,
bench/results/timing_jitter_cpu.md). Only this process's clock moves: tests that run scripts in a subprocess keep
the real one.
"""
from __future__ import annotations

import os
import random
import time

_RNG = random.Random(int(os.environ.get("JITTER_SEED", "1")))
_MAX = float(os.environ.get("JITTER_MAX", "2e-4"))
_REAL = time.perf_counter
_OFFSET = [0.0]


def _jittered() -> float:
    _OFFSET[0] += _RNG.uniform(0.0, _MAX)
    return _REAL() + _OFFSET[0]


time.perf_counter = _jittered
