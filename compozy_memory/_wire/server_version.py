"""The servers compozy-memory runs on, and how a server's ``INFO server`` is judged.

The scripts are a Redis Functions library whose read functions are called with ``FCALL_RO``
(and, by EVALSHA, ``EVALSHA_RO``): Redis 7.0 and later. Valkey's first release is 7.2. An
older server (Redis 6.2 answers FCALL with "unknown command", then fails to compile the
scripts) is refused with :class:`~compozy_memory.UnsupportedServerError` naming the minimum.

``INFO server`` says ``redis_version``; Valkey adds ``server_name:valkey`` and
``valkey_version`` (its ``redis_version`` is the Redis release it is compatible with). Other
servers that speak the protocol are judged by ``redis_version``, the release they claim to be.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compozy_memory.errors import UnsupportedServerError

__all__ = ["MINIMUM", "ServerVersion", "check_server", "server_version"]

#: The oldest release of each server compozy-memory runs on.
_OLDEST = {"redis": (7, 0), "valkey": (7, 2)}
MINIMUM = "Redis 7.0+ or Valkey 7.2+"
_NUMBERS = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """What a server says it is: its name (``redis``, ``valkey``...) and version."""

    name: str
    version: str

    @property
    def release(self) -> tuple[int, int] | None:
        """(major, minor), or None when the version is not ``major.minor...``."""
        found = _NUMBERS.match(self.version)
        return (int(found[1]), int(found[2])) if found else None

    @property
    def supported(self) -> bool:
        release = self.release
        oldest = _OLDEST.get(self.name, _OLDEST["redis"])
        return release is None or release >= oldest

    def __str__(self) -> str:
        return f"{self.name.capitalize()} {self.version}"


def server_version(info: Mapping[Any, Any] | bytes | str) -> ServerVersion | None:
    """The version in an ``INFO server`` reply (parsed by redis-py, or its raw text); None
    when it names none."""
    fields = _fields(info)
    name = fields.get("server_name", "").strip().lower() or "redis"
    version = fields.get(f"{name}_version") or fields.get("redis_version")
    if not version:
        return None
    if f"{name}_version" not in fields:
        name = "redis"  # judged by the Redis release it claims to be
    return ServerVersion(name, version.strip())


def check_server(info: Mapping[Any, Any] | bytes | str, *, where: str, key: str) -> None:
    """Raise UnsupportedServerError when the ``INFO server`` reply of the server at ``where``
    (its address) names a release older than :data:`MINIMUM`."""
    found = server_version(info)
    if found is None or found.supported:
        return
    raise UnsupportedServerError(
        f"compozy-memory needs {MINIMUM}; the server at {where} is {found} (it has no "
        "Functions or EVALSHA_RO, so no script of this library can run there): upgrade it",
        key=key,
        server=found.name,
        version=found.version,
        minimum=MINIMUM,
    )


def _fields(info: Mapping[Any, Any] | bytes | str) -> dict[str, str]:
    if isinstance(info, Mapping):
        return {_text(k): _text(v) for k, v in info.items()}
    text = info.decode(errors="replace") if isinstance(info, bytes) else info
    fields = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            fields[name.strip()] = value.strip()
    return fields


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
