"""The stored results' script calls, typed: the only code that builds their KEYS and ARGV.

A result lives under one key outside any memory's slot
(:func:`compozy_memory._results.store.result_key`); ``lua/results/result_put.lua`` stores it
(pinned or not) and ``lua/results/result_release.lua`` drops a pin. Loading is a plain ``HMGET``.
"""

from __future__ import annotations

from typing import Any

from compozy_memory._wire.effects import Call, Command
from compozy_memory._wire.gateway_base import script_call
from compozy_memory._wire.scripts import script
from compozy_memory._wire.steps import Steps, op

__all__ = ["ResultGateway"]


class ResultGateway:
    """The result scripts' calls, typed (the only code that builds their KEYS/ARGV)."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport

    @op
    def put(
        self,
        key: str,
        *,
        data: bytes,
        size: int,
        enc: str,
        kind: str,
        ttl_ms: int,
        pin: bool,
        pin_ttl_ms: int,
    ) -> Steps[tuple[int, bool]]:
        code = script("result_put")
        args = code.contract.argv_for(
            {
                "ttl_ms": ttl_ms,
                "pin": int(pin),
                "pin_ttl_ms": pin_ttl_ms,
                "size": size,
                "enc": enc.encode(),
                "kind": kind.encode(),
                "data": data,
            }
        )
        return (yield from script_call(code.name, [key], args, key, _stored, write=True))

    @op
    def release(self, key: str) -> Steps[int]:
        return (yield from script_call("result_release", [key], [], key, int, write=True))

    @op
    def touch(self, key: str, ttl_ms: int) -> Steps[int]:
        """Give a pinned result the pinning memory's TTL again; returns its TTL (ms)."""
        code = script("result_touch")
        args = code.contract.argv_for({"ttl_ms": ttl_ms})
        return (yield from script_call(code.name, [key], args, key, int, write=True))

    @op
    def fetch(self, key: str) -> Steps[list[Any]]:
        """``[data, enc, size, kind]`` (a plain HMGET, never decoded: the payload is bytes
        whatever the client's ``decode_responses``); data None when there is no result."""
        return (
            yield from Call(
                "load_result",
                key,
                Command(
                    "execute_command", ("HMGET", key, "data", "enc", "size", "kind"), binary=True
                ),
                list,
            )
        )


def _stored(reply: Any) -> tuple[int, bool]:
    return int(reply[0]), bool(int(reply[1]))
