"""A memory tool's result as JSON text that fits the model's limit and stays valid JSON.

A result longer than the limit is not cut at a character count (which would leave half a
string or an unclosed bracket for the model to choke on): its longest strings are shortened,
each ending in ``…``, as little as still fits; a result that cannot fit even then becomes an
error result asking for less. :func:`fit_slice` cuts the text of a ``load_result`` slice the
same way, at a UTF-8 character boundary, and says where the next slice starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["CUT", "MIN_RESULT_CHARS", "dumps", "fit_json", "fit_slice"]

#: What ends a string that was shortened to fit.
CUT = "\u2026"
#: The smallest limit a result is fitted to (an error result asking for less must fit).
MIN_RESULT_CHARS = 256


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def fit_json(result: Any, limit: int) -> str:
    """``result`` as JSON of at most ``limit`` characters."""
    text = dumps(result)
    if len(text) <= limit:
        return text
    fitted = _largest_fitting(lambda cap: dumps(_cut(result, cap)), _longest(result), limit)
    if fitted is not None:
        return fitted
    return dumps(
        {
            "error": f"the result has {len(text):,} characters, more than the {limit:,} a tool "
            "result may have: ask for less (a smaller limit)"
        }
    )


def fit_slice(chunk: bytes, start: int, limit: int, shown: Callable[[bytes], Any]) -> str:
    """The JSON of ``shown(part)`` for the longest prefix ``part`` of ``chunk`` that fits in
    ``limit`` characters, cut at a UTF-8 character boundary; ``shown`` builds the result."""
    whole = dumps(shown(chunk))
    if len(whole) <= limit:
        return whole

    def cut_at(n: int) -> str:
        while 0 < n < len(chunk) and chunk[n] & 0xC0 == 0x80:  # inside a character
            n -= 1
        part = shown(chunk[:n])
        return dumps({**part, "truncated": True, "next_start": start + n})

    fitted = _largest_fitting(cut_at, len(chunk), limit)
    return fitted if fitted is not None else fit_json(shown(b""), limit)


def _largest_fitting(render: Callable[[int], str], top: int, limit: int) -> str | None:
    """``render(n)`` for the largest ``n`` in ``0..top`` whose text fits (``render`` grows
    with ``n``), or None when even ``render(0)`` does not."""
    best: str | None = None
    low, high = 0, top
    while low <= high:
        middle = (low + high) // 2
        text = render(middle)
        if len(text) <= limit:
            best, low = text, middle + 1
        else:
            high = middle - 1
    return best


def _cut(value: Any, cap: int) -> Any:
    """``value`` with every string longer than ``cap + 1`` cut to ``cap`` characters and
    :data:`CUT` (keys are left whole)."""
    if isinstance(value, str):
        return value[:cap] + CUT if len(value) > cap + 1 else value
    if isinstance(value, dict):
        return {k: _cut(v, cap) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, cap) for v in value]
    return value


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest(v) for v in value), default=0)
    return 0
