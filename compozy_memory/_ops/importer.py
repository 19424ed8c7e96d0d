"""``compozy-memory import``: a conversation history kept by another library, into a memory.

Four layouts are read, as those libraries write them:

========================  ========================================================  ==========
``--from``                where the history is                                      order
========================  ========================================================  ==========
``openai-agents-redis``   the OpenAI Agents SDK's ``RedisSession``: the list         oldest first
                          ``<prefix>:<session>:messages`` (prefix ``agents:session``)
``openai-agents-sqlite``  its ``SQLiteSession``: rows of ``agent_messages`` for the  by row id
                          session, in a SQLite file
``langchain-redis``       LangChain's ``RedisChatMessageHistory``                    newest first
                          (langchain-community): the list ``message_store:<session>``
``llama-index-redis``     LlamaIndex's ``RedisChatStore``: the list named by the     oldest first
                          chat key
``jsonl``                 a file of JSON Lines, one memory message a line            by line
                          (``{"role": ..., "content": ...}``, as ``append`` takes)
========================  ========================================================  ==========

Each item becomes a memory message as the matching adapter would store it
(:func:`~compozy_memory.adapters.openai_agents.from_item`,
:func:`~compozy_memory.adapters.langchain.from_langchain`,
:func:`~compozy_memory.adapters.llama_index.from_llama_index`), so the adapter reads the
history back as the library wrote it; the framework's package must be installed (its extra).

**At most once.** Every imported message carries where it came from in its metadata
(``compozy_import``: the source's id, a hash of the layout, location and session, and the item's
position there). A run first looks for the newest message of that source in the memory (from
its newest live message back, then its archive, a page a call) and starts after it, so a
re-run imports only what the source gained since, and an interrupted run resumes where it
stopped. Each page is one ``append_many`` with a dedupe key derived from the source and the
page's first position, so a page retried after a lost reply, or sent by two runs at once, is
stored once. (The look for the last imported message reads the memory's live messages and
archive back from the newest: a memory that has since dropped every imported message from
both, by its archive's cap, would be imported into again.)

**Bounded steps.** The source is read a page at a time (an ``LRANGE`` of at most ``page``
items, or a ``SELECT`` of a range of ``page`` row ids), and each page is one append of at most
``page`` messages and 1 MiB: no call reads or writes a whole history. Pages lie on a grid of
``page`` positions, so two runs at once with the same ``page`` cut the same appends and their
dedupe keys meet. The source is only read.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "FILE_FORMATS",
    "FORMATS",
    "ImportReport",
    "Source",
    "import_history",
    "last_imported",
    "source_for",
]

Format = Literal[
    "openai-agents-redis", "openai-agents-sqlite", "langchain-redis", "llama-index-redis", "jsonl"
]
FORMATS: tuple[Format, ...] = (
    "openai-agents-redis",
    "openai-agents-sqlite",
    "langchain-redis",
    "llama-index-redis",
    "jsonl",
)
DEFAULT_PREFIX: dict[Format, str] = {
    "openai-agents-redis": "agents:session",
    "openai-agents-sqlite": "",
    "langchain-redis": "message_store:",
    "llama-index-redis": "",
    "jsonl": "",
}
#: The formats read from a file (``--file``) rather than Redis.
FILE_FORMATS = ("openai-agents-sqlite", "jsonl")
#: Where an imported message says where it came from (its metadata).
MARK = "compozy_import"
#: Bytes of message JSON one append carries at most (the library takes 2 MiB a call).
PAGE_BYTES = 1024 * 1024
#: Messages the look for a previous run reads a call.
SCAN_PAGE = 500
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a history is, and how its items become memory messages."""

    format: Format
    #: What to show: the key, or the file and the session.
    location: str
    session: str
    #: The items at positions ``lo`` to ``hi`` (excluded), as (position, item) pairs.
    read: Callable[[int, int], Awaitable[list[tuple[int, Any]]]]
    #: The first position at or after ``at`` that holds an item (None: the source ends).
    next_at: Callable[[int], Awaitable[int | None]]
    convert: Callable[[Any], dict[str, Any]]

    @property
    def id(self) -> str:
        """A stable id of the source: the same layout, location and session, the same id."""
        text = f"{self.format}\n{self.location}\n{self.session}"
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What one run did."""

    source: str
    imported: int
    #: The position in the source the run started after (None: from the first item).
    resumed_after: int | None
    steps: int

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "imported": self.imported,
            "resumed_after": self.resumed_after,
            "steps": self.steps,
        }


# -- sources ----------------------------------------------------------------------------------


def source_for(
    format: Format,
    session: str,
    *,
    client: Any = None,
    prefix: str | None = None,
    file: str | None = None,
    messages_table: str = "agent_messages",
) -> Source:
    """The source of ``session`` in ``format`` (a Redis ``client`` for the Redis layouts, a
    ``file`` for ``openai-agents-sqlite`` and ``jsonl``, which has no session). Raises
    ValueError for what cannot work, and ModuleNotFoundError when the framework that reads
    the items is not installed."""
    if format == "jsonl":
        if not file:
            raise ValueError("jsonl reads a file: give --file PATH")
        path = os.path.abspath(file)
        read, next_at = _lines_reader(path)
        return Source(format, path, "", read, next_at, _as_message)
    if not session:
        raise ValueError("the session (its id, or the chat key) is empty: give --session")
    prefix = DEFAULT_PREFIX[format] if prefix is None else prefix
    if format == "openai-agents-sqlite":
        db = file
        if not db:
            raise ValueError("openai-agents-sqlite reads a SQLite file: give --file PATH")
        if not _IDENTIFIER.fullmatch(messages_table):
            raise ValueError(f"table name {messages_table!r} is not a plain SQL identifier")
        read, next_at = _sqlite_reader(db, messages_table, session)
        return Source(format, db, session, read, next_at, _from_item())
    if client is None:
        raise ValueError(f"{format} reads Redis: give the source's client")
    if format == "openai-agents-redis":
        key = f"{prefix}:{session}:messages"
        read, next_at = _list_reader(client, key, newest_first=False)
        return Source(format, key, session, read, next_at, _from_item())
    key = f"{prefix}{session}"
    if format == "langchain-redis":
        read, next_at = _list_reader(client, key, newest_first=True)
        return Source(format, key, session, read, next_at, _from_langchain())
    read, next_at = _list_reader(client, key, newest_first=False)
    return Source(format, key, session, read, next_at, _from_llama())


Reader = tuple[
    Callable[[int, int], Awaitable[list[tuple[int, Any]]]],
    Callable[[int], Awaitable[int | None]],
]


def _list_reader(client: Any, key: str, *, newest_first: bool) -> Reader:
    """A Redis list, its items numbered from the oldest. A list written newest first (LPUSH)
    is read from its tail: negative indexes stay put while items are pushed."""

    async def read(lo: int, hi: int) -> list[tuple[int, Any]]:
        if newest_first:
            raw = list(reversed(await client.lrange(key, -hi, -(lo + 1))))
        else:
            raw = await client.lrange(key, lo, hi - 1)
        return [(lo + n, _json(value, key, lo + n)) for n, value in enumerate(raw)]

    async def next_at(at: int) -> int | None:
        return at if at < int(await client.llen(key)) else None

    return read, next_at


def _sqlite_reader(path: str, table: str, session: str) -> Reader:
    """A session's rows, numbered by row id (the order SQLiteSession reads them in), the file
    opened read-only, each query in a thread."""

    def query(sql: str, *args: Any) -> list[Any]:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return connection.execute(sql, (session, *args)).fetchall()
        finally:
            connection.close()

    async def read(lo: int, hi: int) -> list[tuple[int, Any]]:
        found = await asyncio.to_thread(
            query,
            f"SELECT id, message_data, created_at FROM {table} "  # noqa: S608 - an identifier
            "WHERE session_id = ? AND id >= ? AND id < ? ORDER BY id",
            lo,
            hi,
        )
        where = f"{path}:{table}"
        return [(int(row), (_json(data, where, int(row)), created)) for row, data, created in found]

    async def next_at(at: int) -> int | None:
        ((found,),) = await asyncio.to_thread(
            query,
            f"SELECT MIN(id) FROM {table} WHERE session_id = ? AND id >= ?",  # noqa: S608
            at,
        )
        return None if found is None else int(found)

    return read, next_at


def _lines_reader(path: str) -> Reader:
    """A JSON Lines file, its items numbered by line (from 1; blank lines hold none). Where
    each line starts is found once, in one pass, then each page is read from its offset."""
    starts: list[int] = []

    def index() -> None:
        if starts:
            return
        with open(path, "rb") as file:
            offset = 0
            for line in file:
                starts.append(offset)
                offset += len(line)
            starts.append(offset)

    def lines(lo: int, hi: int) -> list[tuple[int, Any]]:
        index()
        first, last = max(lo, 1), min(hi, len(starts))
        if first >= last:
            return []
        with open(path, "rb") as file:
            file.seek(starts[first - 1])
            segment = file.read(starts[last - 1] - starts[first - 1])
        parts = segment.split(b"\n")  # the lines the index counted (JSON has no raw newline)
        if segment.endswith(b"\n"):
            parts.pop()
        return [
            (first + n, _json(line, path, first + n))
            for n, line in enumerate(parts)
            if line.strip()
        ]

    async def read(lo: int, hi: int) -> list[tuple[int, Any]]:
        return await asyncio.to_thread(lines, lo, hi)

    async def next_at(at: int) -> int | None:
        await asyncio.to_thread(index)
        return max(at, 1) if max(at, 1) < len(starts) else None

    return read, next_at


def _as_message(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ValueError(f"a line holds one message, a JSON object; got {type(item).__name__}")
    message = dict(item)
    if message.get("metadata") is not None and not isinstance(message["metadata"], dict):
        raise ValueError("a message's metadata is a JSON object")
    message["metadata"] = dict(message.get("metadata") or {})
    return message


def _json(raw: Any, where: str, position: int) -> Any:
    text = raw.decode() if isinstance(raw, bytes) else raw
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
        raise ValueError(f"{where}: item {position} is not JSON ({exc})") from None


def _from_item() -> Callable[[Any], dict[str, Any]]:
    from compozy_memory.adapters.openai_agents import from_item

    def convert(item: Any) -> dict[str, Any]:
        created: str | None = None
        if isinstance(item, tuple):  # a SQLite row: (item, created_at)
            item, created = item
        if not isinstance(item, dict):
            raise ValueError(
                f"an OpenAI Agents SDK item is a JSON object, got {type(item).__name__}"
            )
        message = from_item(item)
        if created:  # the day it was said, for summaries and date search
            message["metadata"]["date"] = str(created).replace(" ", "T")
        return message

    return convert


def _from_langchain() -> Callable[[Any], dict[str, Any]]:
    from langchain_core.messages import messages_from_dict

    from compozy_memory.adapters.langchain import from_langchain

    def convert(item: Any) -> dict[str, Any]:
        if not isinstance(item, dict) or "type" not in item:
            raise ValueError("a LangChain message is a JSON object with a type and its data")
        return from_langchain(messages_from_dict([item])[0])

    return convert


def _from_llama() -> Callable[[Any], dict[str, Any]]:
    from llama_index.core.llms import ChatMessage

    from compozy_memory.adapters.llama_index import from_llama_index

    def convert(item: Any) -> dict[str, Any]:
        return from_llama_index(ChatMessage.model_validate(item))

    return convert


# -- the import -------------------------------------------------------------------------------


def _position_of(message: Any, source_id: str) -> int | None:
    mark = (message.metadata or {}).get(MARK)
    if isinstance(mark, dict) and mark.get("source") == source_id:
        at = mark.get("at")
        return at if isinstance(at, int) else None
    return None


async def last_imported(memory: Any, source_id: str) -> int | None:
    """The position of the newest message of source ``source_id`` in ``memory`` (None: none):
    its live messages from the newest back, then its archive, ``SCAN_PAGE`` messages a read.
    The first run into a memory reads all of it; a re-run finds its last page at once."""
    live = await memory.len()
    stop = live - 1
    while stop >= 0:
        start = max(0, stop - SCAN_PAGE + 1)
        for message in reversed(await memory.read(start, stop)):
            position = _position_of(message, source_id)
            if position is not None:
                return position
        stop = start - 1
    archived = (await memory.health()).archive_length
    end = archived
    while end > 0:
        offset = max(0, end - SCAN_PAGE)
        for message in reversed(await memory.recall(offset, end - offset)):
            position = _position_of(message, source_id)
            if position is not None:
                return position
        end = offset
    return None


async def import_history(
    memory: Any,
    source: Source,
    *,
    page: int = 200,
    max_steps: int | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Append what ``source`` holds after the last message imported from it into ``memory``
    (a :class:`~compozy_memory.MemoryInstance`), a page of at most ``page`` items a step, at
    most ``max_steps`` steps (None: until the source ends)."""
    if not 1 <= page <= 1000:
        raise ValueError(f"page must be 1 to 1000 items, got {page}")
    resumed = await last_imported(memory, source.id)
    start = 0 if resumed is None else resumed + 1
    imported = steps = 0
    while max_steps is None or steps < max_steps:
        at = await source.next_at(start)
        if at is None:
            break
        # Pages lie on a grid of `page` positions, whatever the run resumed after, so two runs
        # with the same page size cut the same batches and their dedupe keys meet.
        lo = at - at % page
        items = [(p, item) for p, item in await source.read(lo, lo + page) if p >= start]
        for batch, first in _batches(source, items):
            if max_steps is not None and steps >= max_steps:
                break
            await memory.append_many(batch, dedupe_key=f"import:{source.id}:{page}:{first}")
            steps += 1
            imported += len(batch)
            start = batch[-1]["metadata"][MARK]["at"] + 1
            if progress is not None:
                progress(len(batch))
        else:
            start = lo + page
    return ImportReport(source.id, imported, resumed, steps)


Batch = tuple[list[dict[str, Any]], int]


def _batches(source: Source, items: list[tuple[int, Any]]) -> list[Batch]:
    """``items`` as messages, in appends of at most :data:`PAGE_BYTES` of JSON each, with the
    position each append starts at."""
    batches: list[Batch] = []
    batch: list[dict[str, Any]] = []
    size = 0
    if not items:
        return batches
    first = items[0][0]
    for position, item in items:
        try:
            message = source.convert(item)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{source.location}: item {position} cannot be read: {exc}") from None
        message.setdefault("metadata", {})[MARK] = {"source": source.id, "at": position}
        weight = len(json.dumps(message, ensure_ascii=False).encode())
        if batch and size + weight > PAGE_BYTES:
            batches.append((batch, first))
            batch, size, first = [], 0, position
        batch.append(message)
        size += weight
    if batch:
        batches.append((batch, first))
    return batches
