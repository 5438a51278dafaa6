"""Exceptions and warnings of gpusolve (a module of its own so every backend can import them)."""


class InfeasibleBudgetError(ValueError):
    """The budget is too small for any policy (or for any at this bucket size)."""

    def __init__(self, message: str, min_bytes: int):
        super().__init__(message)
        self.min_bytes = min_bytes


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run here (no CuPy, no device, kernel build failure, no memory)."""


class FallbackWarning(UserWarning):
    """``backend="auto"`` could not use CUDA and solved on the CPU."""


class ProfileWarning(UserWarning):
    """A profile was read with an estimate in place of a missing measurement (the warning says which)."""
