"""Fault injection for the reliability tests: a TCP proxy that delays, stalls, cuts and loses
replies, the loads that run through it and the counts they leave (a test saves those as a row
of RELIABILITY.md with the ``record`` fixture, see ``reliability_rows.py``)."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory import BackendUnavailableError, MemoryInstance
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.keys import InstanceKeys

#: What a write holds: the replies ``lose_replies`` drops unless told otherwise (a script
#: call, or a transaction's EXEC: the usual append goes as one).
SCRIPT_CALLS = (b"EVAL", b"FCALL", b"EXEC")


class FaultProxy:
    """A loopback TCP proxy in front of one server, run on its own thread and event loop.

    Bytes are forwarded in order, chunk by chunk, in both directions, with these faults:

    * ``delay``: every chunk waits that many seconds before it is forwarded;
    * ``stall()``/``resume()``: nothing is forwarded until resumed (a hung network);
    * ``cut()``: every open connection is reset (a dropped link, a restarted load balancer);
    * ``lose_replies(n)``: the next ``n`` replies to a script call (FCALL, EVAL/EVALSHA) or a
      transaction (EXEC) are dropped and their connection reset: the server ran it, the client
      never hears of it
      (``lose_replies(n, to=(b"FUNCTION",))``: replies to other commands, by a word they hold);
    * ``reply_loss``: the same for each script reply with that probability (seeded).

    A command is recognised by a word in the client's bytes since the last reply, so one sent
    in several chunks (a FUNCTION LOAD of the whole library) is recognised too.
    """

    def __init__(self, target_port: int, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self.delay = 0.0
        self.cuts = 0
        self.lost_replies = 0
        self._lose = 0
        self._lose_to: tuple[bytes, ...] = SCRIPT_CALLS
        self.reply_loss = 0.0
        self._rng = random.Random(7)
        self._loop = asyncio.new_event_loop()
        self._connections: set[asyncio.StreamWriter] = set()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)
        assert self._server is not None
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def stall(self) -> None:
        self._call(self._set_flowing, False)

    def resume(self) -> None:
        self._call(self._set_flowing, True)

    def cut(self) -> None:
        self._call(self._cut)

    def lose_replies(self, n: int = 1, *, to: tuple[bytes, ...] = ()) -> None:
        self._call(self._set_lose, n, to or SCRIPT_CALLS)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- on the proxy's loop ----------------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._flowing = asyncio.Event()
            self._flowing.set()
            self._server = await asyncio.start_server(self._accept, self.host, 0)

        self._loop.run_until_complete(serve())
        started.set()
        self._loop.run_forever()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        if self._server is not None:
            self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn(*args)
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    def _set_flowing(self, on: bool) -> None:
        assert self._flowing is not None
        if on:
            self._flowing.set()
        else:
            self._flowing.clear()

    def _set_lose(self, n: int, to: tuple[bytes, ...]) -> None:
        self._lose, self._lose_to = n, to

    def _cut(self) -> None:
        self.cuts += 1
        for writer in list(self._connections):
            writer.transport.abort()
        self._connections.clear()

    def _close(self) -> None:
        self._cut()
        if self._server is not None:
            self._server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        pair = {writer, up_writer}
        self._connections |= pair
        script_sent = [False]  # the client called a script (or _lose_to) since the last reply
        await asyncio.gather(
            self._pump(reader, up_writer, pair, script_sent, from_server=False),
            self._pump(up_reader, writer, pair, script_sent, from_server=True),
            return_exceptions=True,
        )
        for w in pair:
            w.transport.abort()
        self._connections -= pair

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        pair: set[asyncio.StreamWriter],
        script_sent: list[bool],
        *,
        from_server: bool,
    ) -> None:
        assert self._flowing is not None
        while True:
            chunk = await source.read(65536)
            if not chunk:
                break
            await self._flowing.wait()
            if self.delay:
                await asyncio.sleep(self.delay)
                await self._flowing.wait()
            if not from_server:
                upper = chunk.upper()
                words = self._lose_to if self._lose else SCRIPT_CALLS
                script_sent[0] = script_sent[0] or any(w in upper for w in words)
            elif script_sent[0] and (
                self._lose > 0 or (self.reply_loss and self._rng.random() < self.reply_loss)
            ):
                self._lose = max(0, self._lose - 1)
                self.lost_replies += 1
                for w in pair:
                    w.transport.abort()
                return
            elif from_server:
                script_sent[0] = False
            sink.write(chunk)
            await sink.drain()
        for w in pair:
            w.transport.abort()


class Load:
    """Writers appending numbered messages (``w<writer>:s<seq>``), each to the memory
    ``pick(writer, seq)`` chooses, until ``stop`` is set or ``per_writer`` calls are made.
    Records what was attempted, what failed (BackendUnavailableError, after the handle's
    retries) and when each acknowledged message came back."""

    def __init__(
        self,
        pick: Callable[[int, int], MemoryInstance],
        *,
        stop: asyncio.Event | None = None,
        per_writer: int | None = None,
    ) -> None:
        self.pick = pick
        self.stop = stop
        self.per_writer = per_writer
        self.attempted = 0
        self.failed = 0
        self.acked_at: dict[str, float] = {}

    @property
    def acknowledged(self) -> set[str]:
        return set(self.acked_at)

    async def writer(self, w: int) -> None:
        s = 0
        while (self.stop is None or not self.stop.is_set()) and (
            self.per_writer is None or s < self.per_writer
        ):
            content = f"w{w}:s{s}"
            mem = self.pick(w, s)
            s += 1
            self.attempted += 1
            try:
                await mem.append({"role": "user", "content": content})
            except BackendUnavailableError:
                self.failed += 1
            else:
                self.acked_at[content] = time.monotonic()

    def start(self, writers: int) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(self.writer(w)) for w in range(writers)]


@dataclass
class Tally:
    """What a load saw against what Redis holds afterwards, by message content."""

    operations: int
    acknowledged: int
    lost: int
    duplicated: int
    #: Stored although the caller got an error (the outcome of a failed call is unknown).
    stored_unacknowledged: int


async def tally(
    client: RedisClient, keys: Sequence[InstanceKeys], attempted: int, acknowledged: set[str]
) -> Tally:
    """Count acknowledged contents missing from, or repeated in, the instances' lists."""
    stored: Counter[str] = Counter()
    for k in keys:
        for envelope in await client.lrange(k.msgs, 0, -1):
            stored[json.loads(envelope)["content"]] += 1
    return Tally(
        operations=attempted,
        acknowledged=len(acknowledged),
        lost=len(acknowledged - set(stored)),
        duplicated=sum(n - 1 for n in stored.values() if n > 1),
        stored_unacknowledged=len(set(stored) - acknowledged),
    )


#: meta's fields that are text, not counts: the version, the pinned ids, an import's token.
TEXT_FIELDS = frozenset({"ver", "pins", "imp", "rid"})


def meta_counts(raw: Mapping[Any, Any]) -> dict[str, int]:
    """meta's counts by field (not the processes' dedupe records, ``w:<process>``, nor the
    text fields)."""
    return {
        _text(k): int(v)
        for k, v in raw.items()
        if not _text(k).startswith("w:") and _text(k) not in TEXT_FIELDS
    }


async def consistency_problems(client: RedisClient, keys: InstanceKeys) -> list[str]:
    """Every invariant the scripts keep about one instance that does not hold, as text."""
    problems = []
    envelopes = [json.loads(e) for e in await client.lrange(keys.msgs, 0, -1)]
    meta = meta_counts(await client.hgetall(keys.meta))
    ids = [e["id"] for e in envelopes]
    if ids != sorted(set(ids)):
        problems.append(f"ids not strictly increasing: {ids[:20]}")
    if ids and ids[-1] > meta.get("last_id", 0):
        problems.append(f"id {ids[-1]} beyond last_id {meta.get('last_id')}")
    if meta.get("count", 0) != len(envelopes):
        problems.append(f"meta count {meta.get('count')} != {len(envelopes)} stored")
    token_sum = sum(e["tokens"] for e in envelopes)
    if meta.get("tokens", 0) != token_sum:
        problems.append(f"meta tokens {meta.get('tokens')} != envelope sum {token_sum}")
    for priority in {e["priority"] for e in envelopes}:
        mine = [e for e in envelopes if e["priority"] == priority]
        if meta.get(f"p:{priority}:count", 0) != len(mine):
            problems.append(f"priority {priority} count wrong")
        if meta.get(f"p:{priority}:tokens", 0) != sum(e["tokens"] for e in mine):
            problems.append(f"priority {priority} tokens wrong")
    return problems


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
