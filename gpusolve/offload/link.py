"""The device-host link of the offloading model (spec ``offload.md`` B.4.1, "New chain inputs").

A :class:`Link` is a property of the machine, not of the model: the same chain (profile) is solved
for different links, so the link is an argument of :func:`gpusolve.offload.solve_offload` and of
:func:`gpusolve.simulate.simulate` (``link=``), never a field of :class:`gpusolve.Chain` (whose JSON
format ``gpusolve-chain/1`` stays as it is).

tau_d2h(x) = latency + x / d2h_bytes_per_ms, tau_h2d(x) = latency + x / h2d_bytes_per_ms (ms). A
bandwidth of 0 is a *useless* link: every transfer takes forever (tau = inf), so no plan offloads
and the combined DP is the recompute DP. An infinite bandwidth leaves only the latency.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

from ..units import bytes_spelling, parse_amount, parse_duration_ms, split_size

_RATE = re.compile(r"^\s*(.+?)\s*/\s*(s|sec|ms)\s*$", re.IGNORECASE | re.ASCII)  # ASCII: no 'ſ' for 's'


def parse_rate(value, what: str = "bandwidth") -> float:
    """Bytes per millisecond from a number (already bytes/ms) or a string such as ``"12GB/s"``,
    ``"11.5GiB/s"`` or ``"4MB/ms"`` (sizes as :func:`gpusolve.units.parse_amount` reads them: GB = 1e9,
    GiB = 2^30, fractions kept; a lowercase b, bits, is refused). ``"inf"`` is an unlimited link, 0 a
    useless one. Raises ``ValueError`` naming ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be bytes/ms or a string like '12GB/s', got {value!r}")
    if isinstance(value, numbers.Real):  # NumPy's numbers too (bools refused above)
        rate = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if text.lower() in ("inf", "infinity"):
            return math.inf
        match = _RATE.match(text)
        if not match:
            if _is_zero(text):
                return 0.0  # a zero rate needs no unit: a useless link
            raise ValueError(f"{what} {value!r} is not a rate: give a size per second or per ms such as '12GB/s' "
                             f"or '12e6/ms' (a bare number is bytes/ms only from Python)")
        size, unit = match.group(1), match.group(2).lower()
        if size.startswith("-"):
            raise ValueError(f"{what} {value!r} is negative: give a rate >= 0 such as {text.lstrip('-')!r} (0 means "
                             f"a useless link)")
        digits, size_unit = split_size(size) or ("", "")
        meant = bytes_spelling(size_unit)
        if meant:  # Gb/s: a lowercase b reads as bits (the rule of sizes)
            raise ValueError(f"{what} {value!r}: a lowercase b reads as bits, and rates are in bytes; give "
                             f"'{digits}{meant}/{match.group(2)}' for bytes, or divide by 8 for bits")
        try:
            number = parse_amount(size, what)  # fractions kept: 0.5B/ms is no useless link
        except ValueError:  # name the whole value, not the part before the last '/': '12GB/s/s'
            raise ValueError(f"{what} {value!r} is not a rate: give a size per second or per ms such as '12GB/s' "
                             f"or '12e6/ms'") from None
        if math.isinf(number):  # '1e400GB/s': not the unlimited link, which is spelled 'inf'
            raise ValueError(f"{what} {value!r} is beyond any number: check its unit, or give 'inf' for an "
                             f"unlimited link")
        rate = number / 1000.0 if unit in ("s", "sec") else number
        if rate == 0.0 and re.search(r"[1-9]", re.split(r"[eE]", size)[0]):  # '1e-400GB/s' is no useless link
            raise ValueError(f"{what} {value!r} is below any number (it reads as 0): check its exponent, or give "
                             f"0 for a useless link")
    else:
        raise ValueError(f"{what} must be bytes/ms or a string like '12GB/s', got {value!r}")
    if math.isnan(rate) or rate < 0:
        raise ValueError(f"{what} {value!r} must be a rate >= 0 (0 means a useless link)")
    return rate


@dataclass(frozen=True)
class Link:
    """Device-host copy link: bandwidths (bytes/ms) each way, a latency per transfer (ms) and the
    number of copy channels (only 1: offloads and prefetches share one FIFO channel, assumption
    (A) of [O]). Build from strings with :meth:`parse`."""

    d2h_bytes_per_ms: float
    h2d_bytes_per_ms: float
    latency_ms: float = 0.0
    channels: int = 1

    def __post_init__(self):
        for name in ("d2h_bytes_per_ms", "h2d_bytes_per_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or value < 0:
                raise ValueError(f"{name} = {value!r}: a bandwidth must be a number >= 0 (0 means a useless link)")
            object.__setattr__(self, name, float(value))
        lat = self.latency_ms
        if isinstance(lat, bool) or not isinstance(lat, numbers.Real) or not math.isfinite(lat) or lat < 0:
            raise ValueError(f"latency_ms = {lat!r}: the latency must be a finite number of ms >= 0")
        object.__setattr__(self, "latency_ms", float(lat))
        channels = self.channels
        if isinstance(channels, float) and channels.is_integer():  # 1.0 from a JSON reader
            channels = int(channels)
        if isinstance(channels, bool) or not isinstance(channels, numbers.Integral) or channels != 1:
            raise ValueError(f"channels = {self.channels!r}: only one copy channel (shared by both directions) "
                             f"is modelled; give 1")
        object.__setattr__(self, "channels", int(channels))

    @classmethod
    def parse(cls, d2h, h2d=None, latency_ms=0.0, channels: int = 1) -> "Link":
        """A link from rates such as ``"12GB/s"`` (``h2d`` defaults to ``d2h``) and a latency in ms or
        a string such as ``"0.01ms"`` or ``"10us"``."""
        d2h_rate = parse_rate(d2h, "device-to-host bandwidth")
        h2d_rate = d2h_rate if h2d is None else parse_rate(h2d, "host-to-device bandwidth")
        return cls(d2h_rate, h2d_rate, parse_duration_ms(latency_ms, "latency"), channels)

    @classmethod
    def useless(cls) -> "Link":
        """A link over which nothing can be moved (tau = inf): the recompute-only model."""
        return cls(0.0, 0.0)

    @property
    def is_useless(self) -> bool:
        """Whether some direction has bandwidth 0 (a swap needs both, so none can happen)."""
        return self.d2h_bytes_per_ms == 0.0 or self.h2d_bytes_per_ms == 0.0

    def d2h_ms(self, nbytes) -> float:
        """tau_d2h: ms to copy ``nbytes`` from device to host (inf over a useless link)."""
        return _tau(self.latency_ms, nbytes, self.d2h_bytes_per_ms)

    def h2d_ms(self, nbytes) -> float:
        """tau_h2d: ms to copy ``nbytes`` from host to device (inf over a useless link)."""
        return _tau(self.latency_ms, nbytes, self.h2d_bytes_per_ms)

    def to_dict(self) -> dict:
        """JSON-safe: an unlimited bandwidth is the string ``"inf"`` (:meth:`from_dict` reads it back)."""
        def rate(value: float):
            return "inf" if math.isinf(value) else value
        return {"d2h_bytes_per_ms": rate(self.d2h_bytes_per_ms), "h2d_bytes_per_ms": rate(self.h2d_bytes_per_ms),
                "latency_ms": self.latency_ms, "channels": self.channels}

    @classmethod
    def from_dict(cls, data: dict) -> "Link":
        missing = [key for key in ("d2h_bytes_per_ms", "h2d_bytes_per_ms") if key not in data]
        if missing:
            raise ValueError(f"a link's dict needs 'd2h_bytes_per_ms' and 'h2d_bytes_per_ms' (bytes per ms, as "
                             f"Link.to_dict() and torch_exec.offload.measure_link() give), and {missing} "
                             f"{'is' if len(missing) == 1 else 'are'} missing from {sorted(data)}; or give a rate "
                             f"string such as '12GB/s'")
        return cls(parse_rate(data["d2h_bytes_per_ms"], "d2h_bytes_per_ms"),
                   parse_rate(data["h2d_bytes_per_ms"], "h2d_bytes_per_ms"),
                   parse_duration_ms(data.get("latency_ms", 0.0), "latency_ms"), data.get("channels", 1))


def _is_zero(text: str) -> bool:
    try:
        return float(text) == 0.0
    except ValueError:
        return False


def _tau(latency: float, nbytes, rate: float) -> float:
    if rate == 0.0:
        return math.inf
    return latency + float(nbytes) / rate  # rate = inf: latency only
