"""A fake driver for unit tests of the core: the gateway, a memory's steps, the lock, the flusher.

It answers each script by name from a queue of replies (raw, as Redis would send them) or
exceptions, and records every call. The reply builders below write the wire formats the
scripts' headers describe, so a test states what the server "said" in the terms of the
script's contract; ``tests/test_contracts.py`` checks those contracts against the gateway.
"""

from __future__ import annotations

import inspect
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from compozy_memory import InstanceKeys, MemoryMetrics, MemoryPolicy, Message
from compozy_memory._io.transport import adrive
from compozy_memory._metrics import default_metrics
from compozy_memory._model.limits import DATA_FORMAT
from compozy_memory._model.messages import encode_body
from compozy_memory._wire.effects import Call as CallEffect
from compozy_memory._wire.effects import RunScript
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.scripts import Args, Keys, Script, ScriptArg
from compozy_memory._wire.steps import Op, Steps

if TYPE_CHECKING:
    from compozy_memory._store.core import MemoryCore

Reply = Any | BaseException | Callable[["Call"], Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    script: str
    keys: tuple[str, ...]
    args: tuple[ScriptArg, ...]
    write: bool

    def arg(self, name: str) -> ScriptArg:
        """The argument the script's header calls ``name``."""
        from compozy_memory._wire.scripts import script

        return self.args[script(self.script).contract.argv.index(name)]

    def message(self, name: str) -> Message:
        """The argument ``name``, an envelope body, parsed."""
        body = self.arg(name)
        assert isinstance(body, bytes | str), f"{name} is {body!r}, not a body"
        return Message.model_validate_json(body)


def pending_reply(*, ix_next: int = 1, last_id: int = 0) -> list[Any]:
    """What index_pending.lua returns for an index with nothing to do."""
    return [DATA_FORMAT, b"", ix_next, last_id, 0, 0, last_id, 0, b"1", 0, 0]


@dataclass
class FakeTransport:
    replies: dict[str, deque[Reply]] = field(default_factory=lambda: defaultdict(deque))
    calls: list[Call] = field(default_factory=list)
    #: Replies given when a script's queue is empty: by default, an index with nothing to do.
    defaults: dict[str, Reply] = field(default_factory=lambda: {"index_pending": pending_reply()})
    metrics: MemoryMetrics = field(default_factory=default_metrics)
    #: What a handle reads as its retry policy (the fake retries nothing).
    retry: Any = None

    def on(self, name: str, *replies: Reply) -> FakeTransport:
        self.replies[name].extend(replies)
        return self

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.script == name]

    async def drive(self, steps: Steps[T] | Op[T]) -> T:
        return await adrive(steps, self)

    async def call(self, call: CallEffect[Any]) -> Any:
        send = call.send
        if isinstance(send, RunScript):
            return await self.run(send.script, send.keys, send.args, key=call.key, write=call.write)
        return await self.command(
            call.operation or "", send.method, *send.args, key=call.key, **send.options
        )

    async def run(
        self, code: Script, keys: Keys, args: Args, *, key: str, write: bool = False
    ) -> Any:
        code.contract.check_keys(keys)
        call = Call(code.name, tuple(keys), tuple(args), write)
        self.calls.append(call)
        queue = self.replies[code.name]
        reply = queue.popleft() if queue else self.defaults.get(code.name)
        if reply is None:
            raise AssertionError(f"no reply queued for {code.name}")
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            answer = reply(call)
            return await answer if inspect.isawaitable(answer) else answer
        return reply

    async def command(
        self, operation: str, method: str, *args: Any, key: str, **options: Any
    ) -> Any:
        self.calls.append(Call(method, (), tuple(args), False))
        queue = self.replies[method]
        return queue.popleft() if queue else self.defaults.get(method)


def gateway(
    transport: FakeTransport, *, policy: MemoryPolicy | None = None, read_only: bool = False
) -> MemoryGateway:
    return MemoryGateway(
        transport,
        InstanceKeys.build("units", "conv"),
        policy or MemoryPolicy(max_tokens=1_000),
        read_only=read_only,
    )


def envelope(
    message: Message | dict[str, Any], *, id: int, tokens: int, priority: int = 2
) -> bytes:
    """A stored envelope, as the scripts write it."""
    parsed = Message.parse(dict(message) if isinstance(message, dict) else message)
    head = f'{{"id":{id},"ts":1700000000000,"tokens":{tokens},"priority":{priority},'
    return head.encode() + encode_body(parsed)[1:]


def snapshot_reply(
    messages: Sequence[bytes],
    *,
    summaries: Sequence[bytes] = (),
    epoch: int = 1,
    tokens: int | None = None,
    summary_tokens: int = 0,
    count: int | None = None,
    incarnation: str = "42",
    priority_tokens: dict[int, int] | None = None,
    version: str = "7:v",
    ix_next: int | None = None,
) -> list[Any]:
    """What snapshot.lua returns for these envelopes."""
    parsed = [Message.model_validate_json(m) for m in messages]
    total = sum(m.tokens or 0 for m in parsed) if tokens is None else tokens
    by_priority = priority_tokens
    if by_priority is None:
        by_priority = {}
        for m in parsed:
            by_priority[m.priority or 0] = by_priority.get(m.priority or 0, 0) + (m.tokens or 0)
    last_id = max((m.id or 0 for m in parsed), default=0)
    flat: list[Any] = [p for item in by_priority.items() for p in item]
    return [
        epoch,
        last_id,
        total,
        summary_tokens,
        len(parsed) if count is None else count,
        incarnation.encode(),
        version.encode(),
        last_id + 1 if ix_next is None else ix_next,
        len(by_priority),
        *flat,
        len(summaries),
        *summaries,
        *messages,
    ]


def commit_reply(
    summary_id: int = 0, removed: int = 0, removed_tokens: int = 0, tokens: int = 0
) -> list[int]:
    return [summary_id, removed, removed_tokens, tokens, 0, 0]


def memory(
    transport: FakeTransport, *, policy: MemoryPolicy | None = None, read_only: bool = False
) -> MemoryCore:
    """A memory's parts and steps (``memory.steps``) on the fake driver: no background work,
    every token count supplied (``tokens`` in each message) or counted by the heuristic."""
    from compozy_memory import HeuristicCounter
    from compozy_memory._store.core import MemoryCore

    return MemoryCore(
        None,
        InstanceKeys.build("units", "conv"),
        transport,
        policy=policy or MemoryPolicy(max_tokens=1_000),
        counter=HeuristicCounter(),
        read_only=read_only,
        memory_id="units",
        metrics=None,
        results=None,
        background_index=False,
    )


def append_reply(
    first_id: int,
    last_id: int,
    *,
    tokens: int = 10,
    count: int | None = None,
    duplicate: bool = False,
) -> list[Any]:
    """What append.lua (and replace.lua) return."""
    count = last_id if count is None else count
    return [first_id, last_id, tokens, count, 0, int(duplicate), b"42", f"{last_id}:v".encode()]


def read_reply(envelopes: Sequence[bytes], *, count: int, version: str = "7:v") -> list[Any]:
    """What read.lua returns for a page of ``envelopes`` of a memory of ``count`` messages."""
    return [0, count, count, b"42", version.encode(), *envelopes]
