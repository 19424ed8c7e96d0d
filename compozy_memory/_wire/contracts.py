"""A script's contract, as its header declares it: KEYS, ARGV and the shape of its reply.

::

    -- KEYS: msgs meta
    -- ARGV: start stop
    -- REPLY: {total_tokens total_count last_id incarnation version envelope...}

``REPLY`` is either one name (the script returns one value) or a list in braces of:

* ``name``: one value;
* ``name[]``: a count, then that many values (a list);
* ``name[k]``: a count, then that many groups of ``k`` values (a list of k-tuples);
* ``name...``: every value left (last only).

:meth:`Reply.decode` turns a raw reply into a mapping by those names, and refuses a reply of
another shape with :class:`~compozy_memory.errors.ScriptError`, so a reply's layout is written
once, in the script's header, and the gateway reads it by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from compozy_memory.errors import ScriptError

__all__ = ["KEY_ORDER", "Contract", "Reply", "ScriptArg", "parse_contract"]

ScriptArg: TypeAlias = "str | bytes | int"

#: Every script declares the keys it touches in this order.
KEY_ORDER = (
    "msgs",
    "meta",
    "archive",
    "summaries",
    "dedupe",
    "recalled",
    "ixseg",
    "ixdocs",
    "ixgone",
    "ixvec",
    "facts",
    "factord",
    "respins",
    "lock",
    # The index keys of data formats 1 and 2, deleted when an index is rebuilt
    # (index_reset.lua).
    "legacy_ixpost",
    "legacy_ixdocs",
    "legacy_ixp",
    # Keys outside a memory's slot, each script touching one of them alone: a stored result
    # (compozy_memory._results.store).
    "result",
    # A project's session index, in a slot of its own (compozy_memory._sessions.index).
    "sessions",
    "agent_sessions",
    "session_info",
)

_HEADER_LINE = re.compile(r"^-- (KEYS|ARGV|REPLY):(.*)$", re.MULTILINE)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_ITEM = re.compile(r"^([a-z][a-z0-9_]*)(\[(\d*)\]|\.\.\.)?$")


@dataclass(frozen=True, slots=True)
class Reply:
    """The shape of a script's reply: one value (``scalar``) or a list of ``items``."""

    #: (name, group) per item: group 0 for one value, k >= 1 for a counted list of k-tuples
    #: (1: of values), -1 for the rest of the reply.
    items: tuple[tuple[str, int], ...]
    scalar: bool = False

    def decode(self, reply: Any, script: str = "script") -> dict[str, Any]:
        """The reply by name; ScriptError if it does not have this shape."""
        if self.scalar:
            return {self.items[0][0]: reply}
        if not isinstance(reply, list):
            raise ScriptError(f"{script} replied {type(reply).__name__}, not a list")
        out: dict[str, Any] = {}
        at = 0
        try:
            for name, group in self.items:
                if group == 0:
                    out[name] = reply[at]
                    at += 1
                elif group < 0:
                    out[name] = reply[at:]
                    at = len(reply)
                else:
                    n = int(reply[at])
                    values = reply[at + 1 : at + 1 + n * group]
                    if len(values) != n * group:
                        raise IndexError(name)
                    out[name] = (
                        values
                        if group == 1
                        else [tuple(values[i : i + group]) for i in range(0, len(values), group)]
                    )
                    at += 1 + n * group
        except (IndexError, ValueError, TypeError) as exc:
            raise ScriptError(
                f"{script}'s reply does not have the shape its header declares"
            ) from exc
        if at != len(reply):
            raise ScriptError(f"{script} replied {len(reply) - at} values more than it declares")
        return out


@dataclass(frozen=True, slots=True)
class Contract:
    """The KEYS, ARGV and reply a script declares in its header."""

    name: str
    keys: tuple[str, ...]
    argv: tuple[str, ...]
    #: The name of the trailing variadic argument (declared ``name...``), or None.
    variadic: str | None = None
    reply: Reply = Reply((("reply", 0),), scalar=True)

    def argv_for(
        self, values: Mapping[str, ScriptArg], rest: Sequence[ScriptArg] = ()
    ) -> list[ScriptArg]:
        """ARGV in the declared order; raises ScriptError if the names differ from the header."""
        if len(values) != len(self.argv) or (rest and self.variadic is None):
            raise self._mismatch(sorted(values), rest)
        try:
            args = [values[name] for name in self.argv]
        except KeyError:
            raise self._mismatch(sorted(values), rest) from None
        args += rest
        return args

    def check_keys(self, keys: Sequence[str]) -> None:
        if len(keys) != len(self.keys):
            raise ScriptError(
                f"{self.name}: {len(keys)} keys sent, the script declares {len(self.keys)} "
                f"({' '.join(self.keys)})"
            )

    def decode(self, reply: Any) -> dict[str, Any]:
        """The script's reply by the names its header gives (:class:`Reply`)."""
        return self.reply.decode(reply, self.name)

    def _mismatch(self, names: list[str], rest: Sequence[ScriptArg]) -> ScriptError:
        declared = " ".join(self.argv) + (f" {self.variadic}..." if self.variadic else "")
        sent = " ".join(names) + (f" +{len(rest)} more" if rest else "")
        return ScriptError(f"{self.name}: arguments {sent} do not match the header: {declared}")


def parse_reply(name: str, text: str) -> Reply:
    """A ``-- REPLY:`` declaration; raises ValueError describing what is wrong."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        if not _NAME.match(text):
            raise ValueError(f"lua/{name}.lua: REPLY is one name or a list in braces: {text!r}")
        return Reply(((text, 0),), scalar=True)
    items: list[tuple[str, int]] = []
    words = text[1:-1].split()
    for position, word in enumerate(words):
        match = _ITEM.match(word)
        if match is None:
            raise ValueError(f"lua/{name}.lua: {word!r} is not name, name[], name[k] or name...")
        item, suffix, group = match.groups()
        if suffix == "...":
            if position != len(words) - 1:
                raise ValueError(f"lua/{name}.lua: only the last REPLY item may be {word}")
            items.append((item, -1))
        elif suffix is None:
            items.append((item, 0))
        else:
            items.append((item, int(group) if group else 1))
    if not items or len({item for item, _ in items}) != len(items):
        raise ValueError(f"lua/{name}.lua: REPLY names nothing, or a name twice")
    return Reply(tuple(items))


def parse_contract(name: str, body: str) -> Contract:
    """The contract in a script's header; raises ValueError describing what is wrong."""
    declared: dict[str, str] = {}
    for kind, text in _HEADER_LINE.findall(body):
        if kind in declared:
            raise ValueError(f"lua/{name}.lua declares {kind} twice")
        declared[kind] = text
    if set(declared) != {"KEYS", "ARGV", "REPLY"}:
        raise ValueError(f"lua/{name}.lua needs '-- KEYS:', '-- ARGV:' and '-- REPLY:' lines")
    words = declared["KEYS"].split()
    keys = [] if words == ["(none)"] else words
    unknown = [k for k in keys if k not in KEY_ORDER]
    if unknown:
        raise ValueError(f"lua/{name}.lua declares unknown keys {unknown}; known: {KEY_ORDER}")
    if keys != sorted(keys, key=KEY_ORDER.index) or len(set(keys)) != len(keys):
        raise ValueError(f"lua/{name}.lua must declare its keys in the order {KEY_ORDER}")
    words = declared["ARGV"].split()
    argv = [] if words == ["(none)"] else words
    variadic = None
    if argv and argv[-1].endswith("..."):
        variadic = argv.pop()[:-3]
    for arg in [*argv, *([variadic] if variadic else [])]:
        if not _NAME.match(arg):
            raise ValueError(f"lua/{name}.lua: {arg!r} is not a lowercase argument name")
    if len(set(argv)) != len(argv):
        raise ValueError(f"lua/{name}.lua names an argument twice")
    return Contract(name, tuple(keys), tuple(argv), variadic, parse_reply(name, declared["REPLY"]))
