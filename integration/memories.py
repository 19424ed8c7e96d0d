"""Handles on memories for the server tests: one factory whose keyword options cover what each
test needs, and the counter they share."""

from __future__ import annotations

import uuid
from dataclasses import fields
from typing import Any

from compozy_memory import HeuristicCounter, MemoryInstance, MemoryPolicy, TokenCounter
from compozy_memory._io.translate import RedisClient

#: The counter of every test memory unless a test says otherwise: deterministic, no encoder.
COUNTER = HeuristicCounter()
POLICY_FIELDS = frozenset(f.name for f in fields(MemoryPolicy))


def memory(
    client: RedisClient,
    key: str | None = None,
    *,
    project: str = "itest",
    counter: TokenCounter | None = COUNTER,
    **options: Any,
) -> MemoryInstance:
    """A handle on ``key`` (a fresh one when None) in ``project``, counted by ``COUNTER``
    (``counter=None``: the library's default counter).

    Options named like a :class:`MemoryPolicy` field build the handle's policy
    (``memory(client, key, max_tokens=300, ttl=...)``); the others go to
    :meth:`MemoryInstance.open` (``read_only=True``, ``retry=...``, ``policy=...``).
    """
    policy = {name: options.pop(name) for name in POLICY_FIELDS & options.keys()}
    if policy:
        if "policy" in options:
            raise TypeError(f"give policy= or its fields ({sorted(policy)}), not both")
        options["policy"] = MemoryPolicy(**policy)
    return MemoryInstance.open(
        client,
        project=project,
        key=key if key is not None else f"conv:{uuid.uuid4().hex}",
        counter=counter,
        **options,
    )


def turn(n: int, tokens: int = 20, priority: int | None = None) -> dict[str, Any]:
    """Message ``n`` of a conversation (user and assistant in turn) with its token count."""
    message: dict[str, Any] = {
        "role": "user" if n % 2 else "assistant",
        "content": f"turn {n} mentions order #{1000 + n}",
        "tokens": tokens,
    }
    if priority is not None:
        message["priority"] = priority
    return message
