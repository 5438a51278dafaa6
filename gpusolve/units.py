"""Byte quantities: parsing user strings ("6GiB", "512MB", "1e9") and printing them."""
from __future__ import annotations

import math
import re

_UNITS = {
    "": 1, "b": 1,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(value: int | float | str, what: str = "size") -> int:
    """Return a byte count from an int, a float or a string such as ``"6GiB"``.

    Binary suffixes (KiB, MiB, GiB, TiB, and the short K/M/G/T) are powers of 1024,
    decimal ones (KB, MB, GB, TB) powers of 1000. Fractions are rounded down to whole bytes.
    Raises ``ValueError`` naming ``what`` for anything else, negative or non-finite values.
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number of bytes or a string like '6GiB', got {value!r}")
    if isinstance(value, (int, float)):
        number, scale = float(value), 1
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(
                f"{what} {value!r} is not a size: use bytes or a number with KiB/MiB/GiB/TiB (or KB/MB/GB)")
        number, scale = float(match.group(1)), _UNITS[match.group(2).lower()]
    else:
        raise ValueError(f"{what} must be a number of bytes or a string like '6GiB', got {value!r}")
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what} must be a finite, non-negative size, got {value!r}")
    return int(number * scale)


def format_bytes(num_bytes: float) -> str:
    """Human-readable binary size, e.g. ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} GiB"  # pragma: no cover
