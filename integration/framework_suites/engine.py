"""The one server a framework's test run talks to, and the memories the swapped classes open.

Each swapped constructor opens a fresh ``redis.asyncio`` client (a client belongs to the loop
its connections were opened on, and the frameworks' tests run each test on its own loop) and a
memory whose key names the store the replaced class would have used: the same database and
session id meet the same memory, anything else gets its own.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import uuid
import weakref
from pathlib import Path
from typing import Any

from compozy_memory import MemoryInstance
from compozy_memory._io.connection import connect
from compozy_memory.embedded import EmbeddedServer, start_server

__all__ = ["exercised", "finish", "memory", "store_name", "url"]

PROJECT = "framework-suites"

_lock = threading.Lock()
_server: EmbeddedServer | None = None
_names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_exercised: set[str] = set()


def url() -> str:
    """The server's URL, starting it on first use."""
    global _server
    with _lock:
        if _server is None:
            _server = start_server()
            atexit.register(_server.stop)
        return _server.url


def store_name(owner: object) -> str:
    """A name for a client or engine object, stable for its lifetime and never reused."""
    if isinstance(owner, str):
        return owner
    with _lock:
        try:
            return _names[owner]
        except KeyError:
            name = _names[owner] = uuid.uuid4().hex
            return name


def memory(*parts: str, **options: Any) -> MemoryInstance:
    """A handle on the memory named by ``parts``, on a client of its own."""
    _note_exercised()
    key = "|".join(parts)
    return MemoryInstance.open(connect(url()), project=PROJECT, key=key, **options)


def exercised() -> set[str]:
    """The tests (node ids) in which a swapped constructor ran."""
    return set(_exercised)


def finish(config: object) -> None:
    """Write the exercised tests where the runner asked (``COMPOZY_SUITE_REPORT``)."""
    del config
    target = os.environ.get("COMPOZY_SUITE_REPORT")
    if target:
        Path(target).write_text(json.dumps(sorted(_exercised)))


def _note_exercised() -> None:
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if current:
        _exercised.add(current.rsplit(" (", 1)[0])
