"""The rows of RELIABILITY.md: each test that measures a fault or fuzzes an input saves one.

Shared by ``tests/`` (no server) and ``integration/`` (real servers), so it depends on
neither; ``integration/reliability_report.py`` turns the saved rows into the table.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

ROWS_DIR = Path(os.environ.get("COMPOZY_RELIABILITY_DIR", "build/reliability"))


@dataclass
class Row:
    """One row of RELIABILITY.md, written by the test that measured it."""

    fault: str
    engine: str
    promise: str
    operations: int
    acknowledged: int
    lost: int
    duplicated: int
    observed: str
    command: str
    group: str = "faults"
    #: The numbered item of the issue its group answers (see ``ISSUES`` in the report), or 0.
    item: int = 0


def record_row(row: Row, nodeid: str) -> None:
    """Save ``row`` for ``scripts/reliability`` (one JSON file per test id)."""
    ROWS_DIR.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() else "_" for c in nodeid)[-150:]
    (ROWS_DIR / f"{name}.json").write_text(json.dumps(asdict(row), indent=1))


def reproduce(nodeid: str) -> str:
    """The command that runs the test ``nodeid`` again."""
    return f"./scripts/test '{nodeid}'"
