"""Memories named by templates: two different ids never render to one key."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from compozy_memory._io.translate import RedisClient
from integration.engines import EngineSpec
from integration.memories import COUNTER

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


COLLIDING_USERS = [
    ("张伟", "李娜"),
    ("Иван", "Олег"),
    ("José", "Josù"),
    ("alice@example.com", "alice_example.com"),
    ("user 1", "user/1"),
    ("a_x41", "aA"),
    ("", " "),
]


async def test_users_whose_ids_differ_never_share_a_memory(
    client: RedisClient, engine: EngineSpec, record: Any
) -> None:
    from compozy_memory import MemoryManager, MemoryRegistry, MemoryResource, TemplateError

    project = f"t{uuid.uuid4().hex[:10]}"
    registry = MemoryRegistry(
        project,
        [
            MemoryResource(
                id="support",
                max_tokens=4_000,
                default_key_template="user:{{ .workflow.input.user }}",
            )
        ],
    )
    manager = MemoryManager(registry, client, counter=COUNTER, flushing=False)
    users = [u for pair in COLLIDING_USERS for u in pair]
    written = 0
    for user in users:
        try:
            handle = await manager.get("support", {"workflow": {"input": {"user": user}}})
        except TemplateError:
            assert not user.strip()  # a blank id is refused, never mapped onto another
            continue
        await handle.append({"role": "user", "content": f"secret of {user!r}", "tokens": 5})
        written += 1
    cross = 0
    for user in users:
        if not user.strip():
            continue
        handle = await manager.get("support", {"workflow": {"input": {"user": user}}})
        texts = [m.text for m in await handle.read()]
        cross += sum(1 for t in texts if t != f"secret of {user!r}")
        assert texts == [f"secret of {user!r}"]
    record(
        group="adversarial",
        fault="users whose ids differ only in characters outside the key alphabet "
        "(CJK, Cyrillic, accents, @ vs _, space vs /, an escape look-alike)",
        engine=engine.name,
        promise="two different rendered keys never share a memory",
        operations=2 * written,
        acknowledged=written,
        lost=0,
        duplicated=0,
        observed=f"{written} users, {written} memories, {cross} cross-tenant reads; "
        "blank ids refused",
    )
