"""What a summarizer summarises: attributed lines, with previous summaries opened up.

A summary is written as a header line and then one line per fact or message::

    Key points from 382 earlier messages:
    [2023-05-08] Caroline: We adopted a beagle last weekend! We named it Rex.
    lookup_order result: Order 1042: status shipped; carrier UPS.

so that folding it into the next summary can take its lines back as material and drop its
header: a rolling summary never nests "Earlier conversation (N messages)" inside another, and
its count is the number of messages it really covers (``len(covers)`` of each folded summary
plus the new messages).

The rule-based summary is the Compozy spec's, a row per part::

    CONVERSATION_SUMMARY: Initial context: user: My order #1042 arrived damaged.
    ... [27 messages exchanged] ...
    Recent context: user: A refund, please.
    assistant: Done.

and unfolds to its three message lines. The spec's own one-line form ("CONVERSATION_SUMMARY:
Initial context: ... ... [27 messages exchanged] ... Recent context: user: ... assistant:
...") unfolds too, its recent messages as one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

from compozy_memory._model.messages import Message

__all__ = [
    "Line",
    "Part",
    "covered_count",
    "is_header",
    "is_summary",
    "message_date",
    "message_parts",
    "render_line",
    "speaker_of",
    "summary_lines",
    "transcript",
]

# Headers of every summary format this library has written, the legacy one-line rule-based
# form included ("Earlier conversation (12 messages). It began with ...").
_HEADER = re.compile(
    r"^\s*(?:Key points from (\d+) earlier messages:|Earlier conversation \((\d+) messages\)\.?"
    r"|CONVERSATION_SUMMARY:)"
)
_RULE_PREFIX = re.compile(
    r"^(?:It began with |Then |Initial context: |Key facts: |Recent context: )"
)
_MIDDLE = re.compile(
    r"^(?:\d+ (?:earlier )?messages? followed\.|\.\.\. \[\d+ messages? exchanged\] \.\.\.)$"
)
_EXCHANGED = re.compile(r"\[(\d+) messages? exchanged\]")
# The spec's one-line rule-based summary: split around its middle count and recent context.
_SPEC_ROLES = re.compile(r"\s+(?=(?:user|assistant|system|tool): )")
_SPEC_PARTS = re.compile(
    r"\s*(\.\.\. \[\d+ messages? exchanged\] \.\.\.)\s*|\s*(?=Recent context: )"
)
# A summary line: an optional [date], an optional "speaker: " and the text.
_LINE = re.compile(r"^(?:\[(\d{4}-\d{2}-\d{2})\] )?(?:([^:\n\[\]]{1,60}?): )?(.*)$")
_EMPTY = re.compile(r"^[^:\s]{1,60}:$")  # "system:" left over from a legacy nested header
# Legacy one-line rule-based summaries: split before each of their parts.
_LEGACY_PARTS = re.compile(
    r"\s*(?=It began with |Then |\b\d+ messages followed\.)|"
    r"\s*Earlier conversation \(\d+ messages\)\.\s*"
)


@dataclass(frozen=True, slots=True)
class Line:
    """One attributed piece of material, in conversation order."""

    speaker: str | None
    text: str
    day: str | None = None
    #: Taken from a previous summary (already chosen once), not from a live message.
    folded: bool = False


def is_summary(message: Message) -> bool:
    return message.content_type == "summary"


def covered_count(message: Message) -> int:
    """How many original messages ``message`` stands for: 1, or what a summary covers."""
    if not is_summary(message):
        return 1
    if message.covers:
        return message.covered_count
    found = _HEADER.match(message.text)
    if found and (found.group(1) or found.group(2)):
        return int(found.group(1) or found.group(2))
    if found:  # CONVERSATION_SUMMARY: its message lines and the count between them
        middle = _EXCHANGED.search(message.text)
        return len(summary_lines(message)) + (int(middle.group(1)) if middle else 0)
    return 1


def speaker_of(message: Message) -> str:
    """Who said it: the ``name`` field, else the role."""
    return message.name or message.role


def message_date(message: Message) -> str | None:
    """The message's day (ISO): its ISO ``metadata.date`` when it has one (the day it was
    said, for a conversation imported or replayed later), else its ``ts`` (milliseconds,
    UTC: when it was appended)."""
    raw = (message.metadata or {}).get("date")
    if isinstance(raw, str):
        try:
            return date.fromisoformat(raw[:10]).isoformat()
        except ValueError:
            pass
    if message.ts is not None:
        return datetime.fromtimestamp(message.ts / 1000, UTC).date().isoformat()
    return None


def render_line(line: Line, with_day: bool) -> str:
    day = f"[{line.day}] " if with_day and line.day else ""
    who = f"{line.speaker}: " if line.speaker else ""
    return f"{day}{who}{line.text}"


def summary_lines(message: Message) -> list[Line]:
    """The content of a previous summary as lines, its header (and any nested legacy
    headers) and rule-based framing ("It began with", "Then", "N messages followed") gone."""
    raw = message.text
    pieces: list[str] = []
    one_line = len(raw.strip().splitlines()) == 1
    for row in raw.splitlines():
        row = row.strip()
        if not row:
            continue
        if _HEADER.match(row) and "It began with" in row:
            pieces += [p for p in _LEGACY_PARTS.split(row) if p and p.strip()]
        elif one_line and row.startswith("CONVERSATION_SUMMARY:"):
            for part in _SPEC_PARTS.split(row):
                if part and part.strip():  # the recent messages: "user: a assistant: b"
                    if part.startswith("Recent context: "):
                        pieces += _SPEC_ROLES.split(part.removeprefix("Recent context: "))
                    else:
                        pieces.append(part)
        else:
            pieces.append(row)
    lines: list[Line] = []
    day: str | None = None
    for piece in pieces:
        piece = piece.strip()
        while True:  # legacy nesting: "It began with system: Earlier conversation (...)..."
            stripped = _RULE_PREFIX.sub("", piece)
            stripped = re.sub(r"^system: (?=Earlier conversation)", "", stripped)
            header = _HEADER.match(stripped)
            if header:
                stripped = stripped[header.end() :].strip()
            if stripped == piece:
                break
            piece = stripped
        if not piece or _MIDDLE.match(piece) or _HEADER.match(piece) or _EMPTY.match(piece):
            continue
        found = _LINE.match(piece)
        assert found is not None  # the pattern matches any single line
        day = found.group(1) or day
        text = found.group(3).strip()
        if text:
            lines.append(Line(found.group(2), text, day, folded=True))
    return lines


@dataclass(frozen=True, slots=True)
class Part:
    """A readable part of a message: its text, who it is attributed to, and what it is."""

    speaker: str
    text: str
    kind: str = "text"  # "text", "call" (a tool call) or "result" (a tool's output)
    call_id: str = ""


def message_parts(message: Message, tool_names: dict[str, str]) -> list[Part]:
    """A message's readable parts, in order.

    Text is attributed to the speaker; a tool call to the speaker too ("called lookup_order
    order_id=1042"); a tool's result to the tool ("lookup_order result"), whose name comes
    from ``tool_names`` (call id to tool name, filled in as calls are seen)."""
    speaker = speaker_of(message)
    parts: list[Part] = []
    if isinstance(message.content, str):
        parts.append(Part(speaker, message.content))
    if message.role == "tool":
        tool = tool_names.get(message.tool_call_id or "", message.name or "tool")
        return [Part(f"{tool} result", message.text, "result", message.tool_call_id or "")]
    if isinstance(message.content, list):
        for block in message.content:
            kind = block.get("type")
            if kind == "text":
                parts.append(Part(speaker, str(block.get("text", ""))))
            elif kind == "tool_use":
                name = str(block.get("name") or "tool")
                call_id = str(block.get("id"))
                tool_names[call_id] = name
                text = f"called {name} {_arguments(block.get('input'))}".strip()
                parts.append(Part(speaker, text, "call", call_id))
            elif kind == "tool_result":
                call_id = str(block.get("tool_use_id"))
                tool = tool_names.get(call_id, "tool")
                text = _result_text(block.get("content"))
                parts.append(Part(f"{tool} result", text, "result", call_id))
    for call in message.tool_calls or ():
        function = call.get("function")
        name, arguments = "tool", ""
        if isinstance(function, dict):
            name = str(function.get("name") or "tool")
            arguments = _arguments(function.get("arguments"))
        tool_names[str(call["id"])] = name
        parts.append(Part(speaker, f"called {name} {arguments}".strip(), "call", str(call["id"])))
    return [p for p in parts if p.text.strip()]


def _arguments(raw: object) -> str:
    if isinstance(raw, str):
        text = raw
        try:
            raw = json.loads(text)
        except ValueError:
            return " ".join(text.split())
    if isinstance(raw, dict):
        return " ".join(f"{k}={v}" for k, v in raw.items())
    return "" if raw is None else json.dumps(raw)


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            str(item.get("text", "")) if isinstance(item, dict) else str(item) for item in content
        ]
        return "\n".join(t for t in texts if t)
    return "" if content is None else json.dumps(content)


def transcript(messages: Sequence[Message], limit: int = 2000) -> str:
    """New messages as a dated transcript with speaker names, one line a part."""
    tool_names: dict[str, str] = {}
    rows: list[str] = []
    last_day: str | None = None
    for message in messages:
        day = message_date(message)
        for part in message_parts(message, tool_names):
            speaker, flat = part.speaker, " ".join(part.text.split())
            if len(flat) > limit:
                flat = flat[:limit] + "..."
            with_day = day is not None and day != last_day
            rows.append(render_line(Line(speaker, flat, day), with_day))
            last_day = day or last_day
    return "\n".join(rows)


def is_header(row: str) -> bool:
    """Whether ``row`` is a summary header line (of any format this library writes)."""
    return _HEADER.match(row) is not None and _HEADER.sub("", row).strip() == ""
