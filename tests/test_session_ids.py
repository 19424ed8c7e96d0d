"""UUIDv7 session ids: version, variant, time order."""

from __future__ import annotations

import time
import uuid

from compozy_memory._sessions.index import uuid7


def test_uuid7_has_version_7_the_rfc_variant_and_the_time() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid.UUID(uuid7())
    after = time.time_ns() // 1_000_000
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after


def test_uuid7_ids_sort_by_creation_time_and_differ() -> None:
    ids = []
    for _ in range(5):
        ids.append(uuid7())
        time.sleep(0.002)
    assert ids == sorted(ids)
    assert len({uuid7() for _ in range(10_000)}) == 10_000
