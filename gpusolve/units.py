"""Byte quantities: parsing user strings ("6GiB", "512MB", "1e9") and printing them."""
from __future__ import annotations

import math
import numbers
import re

import numpy as np

# The most bytes a size, a budget or a whole chain (all its sizes together) may be: 2^50 (1 PiB), far
# beyond any device, and small enough that every sum the DP and the simulator form stays within int64.
MAX_BYTES = 1 << 50

_UNITS = {
    "": 1, "b": 1,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
}
_PATTERN = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def check_flag(value, what: str, none: str | None = None) -> None:
    """Raise ``TypeError`` naming ``what`` unless ``value`` is True or False (or None, where ``none`` says what
    None means): a string such as "False" would read as true."""
    if isinstance(value, (bool, np.bool_)) or (none is not None and value is None):
        return
    also = f", or None ({none})" if none is not None else ""
    raise TypeError(f"{what} must be True or False{also}, got {value!r}")


def split_size(text: str) -> tuple[str, str] | None:
    """``"12.5GiB"`` -> ``("12.5", "GiB")``: a size's number and unit as written; None when it is no size."""
    match = _PATTERN.match(text)
    return (match.group(1), match.group(2)) if match else None


def bytes_spelling(unit: str) -> str | None:
    """Where ``unit`` ends in a lowercase b (``Gb``, ``kb``, ``b``), which reads as bits, the bytes unit the
    user likely meant (``GB``, ``KB``, ``B``); else None. Sizes and rates are bytes, and refuse bits alike."""
    if not unit.endswith("b") or unit.lower() not in _UNITS:
        return None
    prefix = unit[:-1]
    return (prefix[:1].upper() + prefix[1:].lower() + "B") if prefix else "B"


def _number_and_scale(value, what: str, fix: str | None = None) -> tuple:
    """(number, bytes per unit) of a size (:func:`parse_bytes`'s forms), refused when negative (``fix``: what
    the error tells the user to give instead; default a size of 0 bytes or more)."""
    if isinstance(value, str):
        match = _PATTERN.match(value)
        meant = bytes_spelling(match.group(2)) if match else None
        if meant:
            raise ValueError(f"{what} {value!r}: a lowercase b reads as bits, and sizes are bytes; give "
                             f"'{match.group(1)}{meant}' for bytes")
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(
                f"{what} {value!r} is not a size: use bytes or a number with KiB/MiB/GiB/TiB (or KB/MB/GB)")
        number, scale = float(match.group(1)), _UNITS[match.group(2).lower()]
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):  # NumPy's numbers too, not bools
        number, scale = (int(value) if isinstance(value, numbers.Integral) else float(value)), 1
    else:
        raise ValueError(f"{what} must be a number of bytes or a string like '6GiB', got {value!r}")
    if number < 0:
        example = value.strip().lstrip("-") if isinstance(value, str) else f"{-number:g}"
        raise ValueError(f"{what} {value!r} is negative: {fix or f'give a size of 0 bytes or more, e.g. {example!r}'}")
    return number, scale


def parse_amount(value, what: str = "size") -> float:
    """Bytes from a size as :func:`parse_bytes` reads it, fractions kept and no upper bound: the
    amount in a rate (``"0.5B/ms"``, ``"12GB/s"``), which is no size a device holds."""
    number, scale = _number_and_scale(value, what)
    return float(number) * scale


def parse_bytes(value: int | float | str, what: str = "size", fix: str | None = None) -> int:
    """Return a byte count from a number (Python's or NumPy's) or a string such as ``"6GiB"``.

    Binary suffixes (KiB, MiB, GiB, TiB, and the short K/M/G/T) are powers of 1024,
    decimal ones (KB, MB, GB, TB) powers of 1000. Fractions are rounded down to whole bytes.
    Raises ``ValueError`` naming ``what`` for anything else, negative or non-finite values, or more
    than :data:`MAX_BYTES`; ``fix`` replaces the remedy a negative value's error names (a size whose least
    is not 0 bytes: a bucket).
    """
    number, scale = _number_and_scale(value, what, fix)
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite, non-negative size, got {value!r}")
    if number * scale > MAX_BYTES:
        raise ValueError(f"{what} {value!r} is more than 2^50 bytes (1 PiB), more than any device holds: check its "
                         f"unit (sizes are bytes, or a number with KiB/MiB/GiB/TiB)")
    return int(number * scale)


def parse_percentage(value, what: str = "budget") -> float | None:
    """The percentage a string such as ``"50%"`` stands for (``50.0``); None when ``value`` is not a
    string ending in ``%`` (bytes, or a size string: see :func:`parse_bytes`).

    The one rule for budgets given as a share of the store-all (plain autograd) peak: a number above
    0 and at most 100; anything else raises ``ValueError`` naming ``what``, the value and the fix.
    """
    if not isinstance(value, str) or not value.strip().endswith("%"):
        return None
    text = value.strip()[:-1].strip()
    try:
        percent = float(text)
    except ValueError:
        percent = None
    if percent is None or not _PATTERN.match(text) or not (0 < percent <= 100):  # NaN fails the range test
        raise ValueError(
            f"{what} {value!r} is not a usable percentage of the store-all (plain autograd) peak: give a number "
            f"above 0 and at most 100 followed by '%' (e.g. '50%'; 100% is the store-all peak itself, which needs no "
            f"checkpointing), or a size in bytes such as '6GiB'")
    return percent


def parse_budget(value, reference_bytes, what: str = "budget") -> int:
    """A budget in bytes: bytes or a size string (:func:`parse_bytes`), or a percentage of
    ``reference_bytes`` (the store-all peak; an int, or a callable returning it, called only for a
    percentage) such as ``"50%"`` (:func:`parse_percentage`), rounded down to whole bytes."""
    percent = parse_percentage(value, what)
    if percent is None:
        return parse_bytes(whole_bytes(value, what), what)
    reference = reference_bytes() if callable(reference_bytes) else reference_bytes
    return int(int(reference) * (percent / 100.0))


def whole_bytes(value, what: str, percent: bool = True):
    """``value`` unless it is a bare number (no unit) with a fraction of a byte: refused (for a budget, as most
    likely a share meant as a percentage, "0.5"; ``percent``: the error names percentages); a size with a unit
    ("1.5GiB") is whole bytes once scaled, rounded down."""
    bare = value.strip() if isinstance(value, str) else value
    if isinstance(bare, str):
        try:
            bare = float(bare)
        except ValueError:
            return value
    if (isinstance(bare, numbers.Real) and not isinstance(bare, numbers.Integral) and math.isfinite(bare)
            and not float(bare).is_integer()):  # NumPy's float32 and float16 too
        raise ValueError(f"{what} {value!r} is a fraction of a byte: give bytes ('6GiB', 6e9)"
                         + (" or a percentage ('50%')" if percent else "") + "; a bare number is bytes")
    return value


def least_percent(min_bytes: int, reference_bytes: int) -> float:
    """The least percentage of ``reference_bytes``, to 0.1, whose budget as :func:`parse_budget` resolves it
    holds ``min_bytes`` (what an infeasible percentage budget's error names; checked against that rule: a
    percentage from the ratio alone came out 1 B short in 12 of 100000 random cases, a review)."""
    reference, least = int(reference_bytes), int(min_bytes)
    if reference <= 0:
        return math.inf
    def resolved(tenths: int) -> int:  # parse_budget's rule, on the percentage as its error prints it
        return int(reference * ((tenths / 10) / 100.0))

    tenths = math.ceil(1000 * least / reference)
    while resolved(tenths) < least:
        tenths += 1
    while tenths > 1 and resolved(tenths - 1) >= least:
        tenths -= 1
    return tenths / 10


def percent_hint(budget, min_bytes: int, reference_bytes, of: str = "the store-all peak", subject: str = "this") -> str:
    """What the error of an infeasible budget adds when it was a percentage (``""`` otherwise): the bytes it
    is a percentage of (``reference_bytes``: an int, or a callable returning it) and the least percentage
    that fits (:func:`least_percent`), which ``subject`` needs."""
    if parse_percentage(budget) is None:
        return ""
    reference = int(reference_bytes() if callable(reference_bytes) else reference_bytes)
    least = least_percent(min_bytes, reference)
    if least > 100:  # no percentage fits: name the bytes (a review: the percentage named was refused)
        return (f" (budget {str(budget).strip()} of {of} {reference} B; no percentage fits: {subject} needs more "
                f"than all of it, {least:g} %; give the budget in bytes, at least {int(min_bytes)} B)")
    return f" (budget {str(budget).strip()} of {of} {reference} B; {subject} needs at least {least:g}%)"


# microseconds: "us", the micro sign (U+00B5) or the Greek mu (U+03BC, what keyboards type); matched without
# case folding beyond ASCII (re.ASCII) and looked up lower-cased, so every spelling the pattern takes is a key
_TIME_UNITS = {"": 1.0, "ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "\u00b5s": 1e-3, "\u03bcs": 1e-3, "ns": 1e-6}
_TIME = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|sec|s|us|\u00b5s|\u03bcs|\u039cs|ns|)\s*$",
                   re.IGNORECASE | re.ASCII)


def parse_duration_ms(value, what: str = "latency") -> float:
    """Milliseconds from a number (already ms) or a string such as ``"0.01ms"``, ``"10us"``, ``"2e-5s"``.
    Raises ``ValueError`` naming ``what`` for anything else, negative or non-finite values."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be ms or a string like '0.01ms', got {value!r}")
    if isinstance(value, numbers.Real):  # NumPy's numbers too (bools refused above)
        ms = float(value)
    elif isinstance(value, str) and _TIME.match(value):
        match = _TIME.match(value)
        ms = float(match.group(1)) * _TIME_UNITS[match.group(2).lower()]
    else:
        raise ValueError(f"{what} {value!r} is not a duration: use ms or a number with s/ms/us/ns, e.g. '0.01ms'")
    if not math.isfinite(ms) or ms < 0:
        raise ValueError(f"{what} {value!r} must be a finite duration >= 0, e.g. '0.01ms'")
    return ms


def binary_unit(num_bytes: float) -> tuple[str, float]:
    """(name, bytes) of the unit a size is shown in: the largest binary unit, up to GiB, of which it holds at
    least one (sizes below 1 KiB in bytes). The one rule of :func:`format_bytes`, :func:`exact_bytes` and the
    plots' size axes (:func:`gpusolve.plot.axis_unit`)."""
    for name, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(num_bytes) >= scale:
            return name, float(scale)
    return "B", 1.0


def format_bytes(num_bytes: float) -> str:
    """Human-readable binary size, e.g. ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    unit, scale = binary_unit(num_bytes)
    value = float(num_bytes) / scale
    return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"


def exact_bytes(num_bytes: int) -> str:
    """A size with enough digits to tell two budgets apart and the exact count a fix may pass on:
    ``'2.3987 GiB (2575560704 B)'``, ``'670 B'``."""
    unit, scale = binary_unit(num_bytes)
    value = float(num_bytes) / scale
    return f"{int(num_bytes)} B" if unit == "B" else f"{value:.4f} {unit} ({int(num_bytes)} B)"
