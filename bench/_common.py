"""Small helpers shared by the benchmark scripts (not part of the package)."""
from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_description() -> str:
    """``<model> (<n> logical CPUs)``: how results files name a CPU machine."""
    return f"{cpu_model()} ({os.cpu_count()} logical CPUs)"
