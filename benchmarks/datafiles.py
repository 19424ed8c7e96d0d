"""The benchmarks' data files: JSON beside the modules that generate from them.

What a generator draws from (names, cities, fact templates, a held-out bank) is data, so it
lives in ``benchmarks/<name>.json`` rather than in Python literals; the generator modules keep
their names and load their data here. JSON has no tuples: :func:`tuples` makes a loaded
value's lists tuples again where the generators expect them (immutable, hashable).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["HERE", "load", "tuples"]

HERE = Path(__file__).resolve().parent


@cache
def load(name: str) -> Any:
    """``benchmarks/<name>.json``, parsed (once a process)."""
    return json.loads((HERE / f"{name}.json").read_text(encoding="utf-8"))


def tuples(value: Any) -> Any:
    """``value`` with every list, at any depth, made a tuple (mappings' values too)."""
    if isinstance(value, list):
        return tuple(tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: tuples(v) for k, v in value.items()}
    return value
