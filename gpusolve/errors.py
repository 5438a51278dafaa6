"""Exceptions and warnings of gpusolve (a module of its own so every backend can import them)."""
import warnings

# Note [Warnings once per process]
# Python shows a "default" warning once per code location, but forgets what it showed whenever a
# filter changes: every ``warnings.catch_warnings()`` (torch.export and the capture use several per
# input signature) clears the registries. So a fact about the machine (CPU timings, no CUDA backend)
# was repeated for every new input shape of a training run. ``warn_once`` shows a given (category,
# text) once per process; the plan's notes still say it every time.
_SHOWN: set = set()


def warn_once(message: str, category=UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn`` the first time this ``(category, message)`` is seen in the process (Note
    [Warnings once per process]); later calls are silent."""
    if (category, message) in _SHOWN:
        return
    _SHOWN.add((category, message))
    warnings.warn(message, category, stacklevel=stacklevel + 1)


class InfeasibleBudgetError(ValueError):
    """The budget is too small for any policy (or for any at this bucket size)."""

    def __init__(self, message: str, min_bytes: int):
        super().__init__(message)
        self.min_bytes = min_bytes


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run here (no CuPy, no device, kernel build failure, no memory)."""


class FallbackWarning(UserWarning):
    """A documented fallback was taken, said in one line: ``backend="auto"`` could not use CUDA and solved on
    the CPU, profiling went stage by stage, a percentage budget ran within another signature's budget, a
    call ran as plain autograd (the message says which)."""


class ProfileWarning(UserWarning):
    """A profile was read with an estimate in place of a missing measurement (the warning says which)."""
