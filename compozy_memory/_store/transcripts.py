"""Transcripts: a memory as Markdown to read, or as JSON Lines to move it losslessly.

:func:`export_jsonl` writes one header line, then one line per envelope, exactly as Redis
holds it (its id, server timestamp, token count, priority, and every field and content block
the agent wrote), each tagged with the part it came from::

    {"compozy_transcript":1}
    {"part":"msgs","envelope":{"id":1,"ts":1732250000123,"tokens":12,"priority":2,...}}

The envelope is embedded byte for byte, so export -> :func:`import_transcript` -> export
gives the same text. An export reads each part a page (``MAX_READ`` envelopes) at a time,
each page carrying a stamp of the memory's state, and starts again if a write changed the
memory between two pages: a transcript is one state of the memory, and no call holds the
server longer than a page. Import writes the envelopes with their own ids and times
(``lua/import.lua``) in bounded steps, and refuses a memory that holds any messages,
summaries or archived originals, or that has already given out ids at or past the
transcript's first: ids never repeat within a memory. The first step claims the memory (other
writes are refused until the last step); the indexer then builds the index. Session facts,
recalled messages and dedupe keys are not part of a transcript.

:func:`export_markdown` is for people: speaker and time per message, tool calls and tool
results folded in ``<details>``, summaries marked, archived originals optionally included.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

from compozy_memory._model.limits import MAX_BATCH, MAX_CALL_BYTES, MAX_TOTAL
from compozy_memory._model.messages import Message, head_id
from compozy_memory._model.results import Transcript
from compozy_memory._store.handle import Handle
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import ConcurrentChangeError, InvalidMessageError, UsageError

__all__ = ["Transcript", "export_jsonl", "export_markdown", "import_transcript"]

HEADER = '{"compozy_transcript":1}'
PARTS = ("msgs", "summaries", "archive")


#: Times an export starts again because the memory changed while it read.
EXPORT_ATTEMPTS = 5


def read_transcript(gateway: MemoryGateway, *, include_archived: bool) -> Steps[Transcript]:
    """Every envelope of the memory, page by page, all pages from one state of it."""
    for _ in range(EXPORT_ATTEMPTS):
        stamps: set[str] = set()
        parts: dict[str, list[str]] = {}
        for part in PARTS:
            if part == "archive" and not include_archived:
                parts[part] = []
                continue
            items: list[str] = []
            while True:
                stamp, length, page = yield from gateway.transcript_page(part, len(items))
                stamps.add(stamp)
                items += page
                if not page or len(items) >= length or len(stamps) > 1:
                    break
            parts[part] = items
        if len(stamps) <= 1:
            # The stamp is '<version>|<archived>|<archive_base>' (lua/transcript.lua).
            version = next(iter(stamps)).rsplit("|", 2)[0] if stamps else ""
            return Transcript(
                tuple(parts["msgs"]),
                tuple(parts["summaries"]),
                tuple(parts["archive"]),
                version,
            )
    raise ConcurrentChangeError(
        f"export: the memory changed while it was read, {EXPORT_ATTEMPTS} times", key=gateway.name
    )


def export_jsonl(memory: Handle, *, include_archived: bool = True) -> Steps[str]:
    transcript = yield from read_transcript(memory.gateway, include_archived=include_archived)
    lines = [HEADER]
    for part in PARTS:
        for env in getattr(transcript, part):
            # compozy-memory stores compact JSON, never a raw line break; one written raw
            # would split its line (inside a string, the escape is the same value).
            env = env.replace("\n", "\\n").replace("\r", "\\r")
            lines.append(f'{{"part":"{part}","envelope":{env}}}')
    return "\n".join(lines) + "\n"


def parse_jsonl(text: str) -> Transcript:
    """The envelopes of a JSON Lines transcript; InvalidMessageError naming the bad line."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or _loads(lines[0], 1) != {"compozy_transcript": 1}:
        raise InvalidMessageError('a transcript starts with {"compozy_transcript":1}')
    parts: dict[str, list[str]] = {part: [] for part in PARTS}
    for number, line in enumerate(lines[1:], start=2):
        data = _loads(line, number)
        part, envelope = data.get("part"), data.get("envelope")
        if part not in parts or not isinstance(envelope, dict):
            raise InvalidMessageError(f"transcript line {number}: needs part and envelope")
        prefix = f'{{"part":"{part}","envelope":'
        if line.startswith(prefix) and line.endswith("}"):
            raw = line[len(prefix) : -1]  # byte for byte, as exported
        else:
            raw = json.dumps(envelope, ensure_ascii=False, separators=(",", ":"))
        try:
            message = Message.model_validate_json(raw)
        except ValueError as exc:
            raise InvalidMessageError(f"transcript line {number}: {exc}") from None
        # The id the scripts read (the head's) is the one the message has, and one an index
        # can hold (a second "id" key, or an id past the totals' range, would be stored and
        # then neither found nor indexed).
        if head_id(raw) != message.id or not 1 <= (message.id or 0) < MAX_TOTAL:
            raise InvalidMessageError(
                f"transcript line {number}: an envelope starts with its id, one id from 1 to "
                f"{MAX_TOTAL - 1}"
            )
        parts[str(part)].append(raw)
    return Transcript(tuple(parts["msgs"]), tuple(parts["summaries"]), tuple(parts["archive"]))


def _loads(line: str, number: int) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise InvalidMessageError(f"transcript line {number} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidMessageError(f"transcript line {number} is not a JSON object")
    return data


def import_transcript(memory: Handle, text: str) -> Steps[int]:
    """Write a JSON Lines transcript into ``memory``, which must hold nothing; returns the
    number of live messages. ConflictError if it is not empty."""
    if not isinstance(text, str):
        raise UsageError("a transcript is text (what export_transcript('jsonl') returned)")
    transcript = parse_jsonl(text)
    envelopes = [*transcript.msgs, *transcript.summaries, *transcript.archive]
    last_id = max((Message.model_validate_json(e).id or 0 for e in envelopes), default=0)
    token = "import:" + secrets.token_hex(12)
    count = 0
    for part in PARTS:
        at = 0
        for chunk in _chunks(getattr(transcript, part)):
            count, _ = yield from memory.gateway.import_step(token, part, at, last_id, chunk)
            at += len(chunk)
    count, _ = yield from memory.gateway.import_step(token, "done", 0, last_id, [])
    return count


def _chunks(envelopes: tuple[str, ...]) -> list[list[str]]:
    """``envelopes`` in runs that fit one import step."""
    out: list[list[str]] = []
    size = 0
    for env in envelopes:
        if not out or len(out[-1]) >= MAX_BATCH or size + len(env) > MAX_CALL_BYTES:
            out.append([])
            size = 0
        out[-1].append(env)
        size += len(env.encode())
    return out


def export_markdown(memory: Handle, *, include_archived: bool = False) -> Steps[str]:
    transcript = yield from read_transcript(memory.gateway, include_archived=include_archived)
    out = [f"# Transcript of `{memory.keys.key}`", ""]
    summaries = [Message.model_validate_json(e) for e in transcript.summaries]
    if summaries:
        out += ["## Summaries", ""]
        for summary in summaries:
            out += _summary(summary)
    if include_archived and transcript.archive:
        out += ["## Archived originals", ""]
        for env in transcript.archive:
            out += _markdown(Message.model_validate_json(env))
    out += ["## Conversation", ""]
    for env in transcript.msgs:
        out += _markdown(Message.model_validate_json(env))
    return "\n".join(out).rstrip() + "\n"


def _when(message: Message) -> str:
    if message.ts is None:
        return ""
    return datetime.fromtimestamp(message.ts / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _summary(message: Message) -> list[str]:
    covers = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in message.covers or ())
    head = f"> **Summary** #{message.id} · {_when(message)}" + (
        f" · covers {covers}" if covers else ""
    )
    return [head, ">", *(f"> {line}" for line in message.text.splitlines()), ""]


def _fold(title: str, body: str, language: str = "") -> list[str]:
    fence = "````" if "```" in body else "```"
    return [
        "<details>",
        f"<summary>{title}</summary>",
        "",
        f"{fence}{language}",
        body,
        fence,
        "",
        "</details>",
        "",
    ]


def _markdown(message: Message) -> list[str]:
    if message.content_type == "summary":
        return _summary(message)
    speaker = message.role + (f" ({message.name})" if message.name else "")
    out = [f"### {speaker} · {_when(message)} · #{message.id}", ""]
    if message.text.strip() and message.role != "tool":
        out += [message.text, ""]
    if message.role == "tool":
        out += _fold(f"tool result for {message.tool_call_id}", message.text)
    for call in message.tool_calls or ():
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        out += _fold(f"tool call {name or 'tool'} ({call.get('id')})", _json(call), "json")
    if isinstance(message.content, list):
        for block in message.content:
            kind = block.get("type")
            if kind == "tool_use":
                out += _fold(
                    f"tool call {block.get('name')} ({block.get('id')})",
                    _json(block.get("input")),
                    "json",
                )
            elif kind == "tool_result":
                content = block.get("content")
                body = content if isinstance(content, str) else _json(content)
                out += _fold(f"tool result for {block.get('tool_use_id')}", body)
    ref = (message.metadata or {}).get("result_ref")
    if isinstance(ref, dict):
        out += [
            f"_Stored result: `{ref.get('ns')}/{ref.get('sha256')}`, {ref.get('size')} bytes._",
            "",
        ]
    return out


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)
