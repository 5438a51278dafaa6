"""The solvers' ``gpu`` tests rehearsed without a GPU (tests/_gpu_standin.py): each runs to its end with
the CPU DPs standing in for the CUDA ones, so that a test whose own logic is wrong fails here, not in a
lent GPU's few minutes. (test_solve_front_end_same_time asked vgg16_b64 for a budget below its least;
it would have failed on the first device it met.) On a machine with a device the real tests run instead."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from _gpu_standin import SOLVER_FILES
from conftest import cuda_device_reason

TESTS = Path(__file__).resolve().parent


@pytest.mark.skipif(cuda_device_reason() is None, reason="a CUDA device is present: the gpu tests run for real")
def test_solver_gpu_tests_run_to_their_end_on_the_stand_in():
    proc = subprocess.run([sys.executable, "-m", "pytest", "--gpu-standin", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                           "-rfEs", *SOLVER_FILES], capture_output=True, text=True, cwd=TESTS, timeout=1200)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    passed = int(re.search(r"(\d+) passed", proc.stdout).group(1))
    skipped = re.findall(r"SKIPPED \[\d+\] (\S+?):\d+: (.*)", proc.stdout)
    assert passed >= 60, tail
    # only the tests that read the device's own state sit out
    assert skipped and all("reads the device's own state" in why for _, why in skipped), skipped
