"""Building blocks of the YAML schema: the strict model base, durations, identifiers."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "MAX_DURATION",
    "Delay",
    "Duration",
    "Identifier",
    "StrictModel",
    "format_duration",
    "parse_delay",
    "parse_duration",
]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The longest duration a setting may have: anything longer is a typo (Redis itself would
#: take a TTL of up to 2**63 ms, but Python's timedelta overflows far sooner).
MAX_DURATION = timedelta(days=3650)
_MAX_SECONDS = MAX_DURATION.total_seconds()


def parse_duration(value: object) -> timedelta:
    """``24h``, ``1h30m``, ``500ms``, ``10s`` or a number of seconds, as a timedelta from 1ms
    to 10 years (:data:`MAX_DURATION`); ValueError, saying why, for anything else."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError("a duration is text like '24h' or '30s', or a number of seconds")
    elif isinstance(value, int | float):
        seconds = _seconds(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(
                f"'{value}' is not a duration: write e.g. '24h', '30m', '1h30m', '500ms'"
            )
        seconds = sum(_seconds(float(n)) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is text like '24h' or '30s', or a number of seconds")
    if math.isnan(seconds):
        raise ValueError("a duration is not a number (NaN): write e.g. '24h' or '30s'")
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    if seconds > _MAX_SECONDS:  # inf too; timedelta itself overflows past 999999999 days
        raise ValueError(f"{value!r} is too long: a duration is at most 10 years (3650d)")
    if seconds < 0.001:
        raise ValueError(f"{value!r} is too short: a duration is at least 1ms")
    return timedelta(seconds=seconds)


def _seconds(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int past float's range
        return math.inf


def format_duration(value: timedelta) -> str:
    """The shortest way to write ``value`` as a duration: ``24h``, ``1h30m``, ``500ms``."""
    millis = round(value.total_seconds() * 1000)
    out = ""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, millis = divmod(millis, size)
        out += f"{count}{unit}" if count else ""
    return out + (f"{millis}ms" if millis else "") or "0s"


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def parse_delay(value: object) -> timedelta:
    """:func:`parse_duration`, or none at all: ``0``, ``0s``, ``0ms``."""
    if isinstance(value, timedelta) and value == timedelta(0):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
        if value < 0:
            raise ValueError("a delay is 0 or a duration, not negative")
        return timedelta(0)
    if isinstance(value, str):
        if value.strip() in ("0", "0.0"):
            return timedelta(0)
        parts = _DURATION_PART.findall(value.strip().lower())
        text = "".join(n + u for n, u in parts)
        if parts and text == value.strip().lower() and all(float(n) == 0 for n, _ in parts):
            return timedelta(0)
    return parse_duration(value)


#: A wait that may be none: a :data:`Duration`, or 0.
Delay = Annotated[timedelta, BeforeValidator(parse_delay)]
# pydantic matches ``pattern`` with Rust's regex, where "$" is the end of the text: "m\n" is
# refused (tests/test_config.py pins it), unlike Python's re.match with "$".
Identifier = Annotated[str, Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,127}$")]


class StrictModel(BaseModel):
    """Unknown keys are errors; a loaded resource never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
