"""Settings and fixtures shared by tests/ and integration/."""

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings

from integration.faults import Row, Tally, record_row, reproduce

# The machines that run this suite are small and busy: a per-example deadline would fail
# property tests for being slow, not wrong. Examples stay bounded by max_examples.
settings.register_profile("compozy", deadline=None)
settings.load_profile("compozy")


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Save a row of RELIABILITY.md, with the command that reproduces this test."""
    nodeid = request.node.nodeid

    def save(*, tally: Tally | None = None, **fields: Any) -> None:
        if tally is not None:  # the counts of a load, as integration.faults.tally made them
            fields |= {
                "operations": tally.operations,
                "acknowledged": tally.acknowledged,
                "lost": tally.lost,
                "duplicated": tally.duplicated,
            }
        record_row(Row(command=reproduce(nodeid), **fields), nodeid)

    return save
