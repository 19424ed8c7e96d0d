"""How an ``INFO server`` reply is judged (the real Redis 6.2 is refused in
integration/test_old_servers.py; these are the forms no server here can give)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from compozy_memory import UnsupportedServerError
from compozy_memory._wire.server_version import MINIMUM, check_server, server_version


def info(**fields: str) -> str:
    return "# Server\r\n" + "".join(f"{k}:{v}\r\n" for k, v in fields.items())


@pytest.mark.parametrize(
    ("reply", "name", "supported"),
    [
        (info(redis_version="6.2.14"), "redis", False),
        (info(redis_version="6.0.20"), "redis", False),
        (info(redis_version="5.0.14"), "redis", False),
        (info(redis_version="7.0.0"), "redis", True),
        (info(redis_version="7.0.15"), "redis", True),
        (info(redis_version="8.2.1"), "redis", True),
        # Valkey says its own version beside the Redis release it is compatible with.
        (info(redis_version="7.2.4", server_name="valkey", valkey_version="8.1.8"), "valkey", True),
        (info(redis_version="7.2.4", server_name="valkey", valkey_version="7.2.5"), "valkey", True),
        (
            info(redis_version="7.2.4", server_name="valkey", valkey_version="7.0.1"),
            "valkey",
            False,
        ),
        # A Valkey that names itself but no version of its own: its Redis release decides.
        (info(redis_version="7.2.4", server_name="valkey"), "redis", True),
        # Another server speaking the protocol is judged by the release it claims.
        (info(redis_version="6.2.5", server_name="keydb"), "redis", False),
        ({b"redis_version": b"6.2.14"}, "redis", False),  # as redis-py parses it
        ({"redis_version": "7.0.15", "redis_mode": "standalone"}, "redis", True),
    ],
)
def test_info_server_is_judged_by_the_servers_own_version(
    reply: Mapping[Any, Any] | str, name: str, supported: bool
) -> None:
    found = server_version(reply)
    assert found is not None
    assert found.name == name
    assert found.supported is supported
    if supported:
        check_server(reply, where="h:1", key="k")
    else:
        with pytest.raises(UnsupportedServerError, match=r"needs Redis 7\.0") as raised:
            check_server(reply, where="h:1", key="k")
        assert raised.value.minimum == MINIMUM
        assert f"at h:1 is {found}" in str(raised.value)


@pytest.mark.parametrize("reply", [info(), info(redis_version="unstable"), "", {}])
def test_a_reply_without_a_version_is_not_refused(reply: Mapping[Any, Any] | str) -> None:
    check_server(reply, where="h:1", key="k")
