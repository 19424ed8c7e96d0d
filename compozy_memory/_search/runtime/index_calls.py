"""The search index's calls: what the indexer stores (segments), what a search and a merge read,
and the steps that keep the segments few (merges, garbage).

The server only stores and returns segment bytes (``lua/search/lib/segments.lua``); the clients
build, merge and score them (:mod:`compozy_memory._search.segments`,
:mod:`compozy_memory._search.scoring`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._model.limits import MAX_TOTAL
from compozy_memory._model.messages import head_id
from compozy_memory._search.segments import Encoded, SegmentEntry
from compozy_memory._wire import replies
from compozy_memory._wire.contracts import ScriptArg
from compozy_memory._wire.gateway_base import GatewayBase
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import CorruptDataError

__all__ = [
    "IndexAdded",
    "IndexCalls",
    "IndexPending",
    "IndexProgress",
    "IndexState",
    "Merge",
    "covered",
    "doc_records",
    "parse_envelope",
    "parse_list",
    "parse_pending",
]


@dataclass(frozen=True, slots=True)
class IndexPending:
    """What ``lua/search/index_pending.lua`` says the indexer has to do next."""

    fmt: int
    analyzer: str
    ix_next: int
    upto: int
    seq_from: int
    seq_upto: int
    last_id: int
    #: Archived envelopes past the archive's cap: a step drops some (the cap may shrink).
    over_cap: int
    #: meta's incarnation ('' for none): the step applies to this memory only, not to one
    #: written again after it expired (whose ids and index cursors start again).
    incarnation: str
    #: (where, seq, envelope as parsed JSON): 'l' live, 's' summary, 'a' archived at seq;
    #: oldest first.
    adds: tuple[tuple[str, int, dict[str, Any]], ...]
    #: Envelopes the archive's cap dropped whose terms still count.
    gones: tuple[dict[str, Any], ...]

    @property
    def idle(self) -> bool:
        """Nothing to index, nothing to take out, nothing past the archive's cap."""
        return (
            not self.adds
            and not self.gones
            and self.seq_from == 0
            and self.ix_next > self.upto
            and self.over_cap == 0
        )


def parse_envelope(raw: bytes | str) -> dict[str, Any]:
    """A stored envelope as parsed JSON (the indexer analyses it as it is: building a model
    of each costs more than the analysis), its id the one it starts with (``{"id":N,``: the
    id the scripts know it by; a second ``"id"`` key, written raw, would be read instead)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past any message's
        raise CorruptDataError(f"a stored envelope is not JSON: {exc!r:.200}") from None
    if not isinstance(data, dict) or type(doc_id := data.get("id")) is not int:
        raise CorruptDataError("a stored envelope is not an object with an id")
    if head_id(raw) != doc_id or doc_id >= MAX_TOTAL:
        raise CorruptDataError(
            f"a stored envelope's id ({str(doc_id)[:24]}) is not the one it starts with, or "
            "past any id: it was written raw, not by compozy-memory"
        )
    return data


def _envelope_bytes(raw: bytes | str) -> bytes:
    return raw.encode() if isinstance(raw, str) else bytes(raw)


def parse_pending(reply: Mapping[str, Any]) -> IndexPending:
    """``lua/search/index_pending.lua``'s reply, decoded."""
    return IndexPending(
        int(reply["fmt"]),
        replies.text(reply["analyzer"]),
        int(reply["ix_next"]),
        int(reply["upto"]),
        int(reply["seq_from"]),
        int(reply["seq_upto"]),
        int(reply["last_id"]),
        int(reply["over_cap"]),
        replies.text(reply["incarnation"]),
        tuple(
            (replies.text(where), int(seq), parse_envelope(env))
            for where, seq, env in reply["adds"]
        ),
        tuple(parse_envelope(env) for env in reply["gones"]),
    )


@dataclass(frozen=True, slots=True)
class Merge:
    """A merge writing its output a step at a time (``R`` in ``ix:s``)."""

    gen: int
    deadline_ms: int
    inputs: tuple[int, ...]
    declared: int
    written: int


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Where an index stands after :meth:`Indexer.catch_up`."""

    #: Steps written by this call.
    steps: int
    #: Documents this call indexed.
    indexed: int
    #: Messages still waiting (0: caught up) when the call stopped.
    unindexed: int


@dataclass(frozen=True, slots=True)
class IndexState:
    """``lua/search/index_read.lua``'s reply: the index as one read saw it."""

    fmt: int
    analyzer: str
    unindexed: int
    n_docs: int
    total_length: int
    #: Merged segments' fields wait to be deleted.
    garbage: bool
    #: A generation asked for is no longer listed: nothing was read.
    stale: bool
    segments: tuple[SegmentEntry, ...]
    merges: tuple[Merge, ...]
    values: dict[str, bytes | None]
    #: meta's incarnation ('' for none): a merge of what was read is stored only in it.
    incarnation: str = ""
    #: The first id the index has not reached.
    ix_next: int = 0
    #: The newest live envelopes from ``ix_next`` on, oldest first, as read (when asked for:
    #: a search's read).
    tail: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class IndexAdded:
    """What one ``lua/search/index_add.lua`` step did, and the segments listed after it."""

    applied: bool
    ix_next: int
    ix_seq: int
    indexed: int
    segments: tuple[SegmentEntry, ...]
    merges: tuple[Merge, ...]
    #: Merged segments' fields wait to be deleted.
    garbage: bool
    #: The incarnation the step was made for (it is applied in that one only): the list is
    #: that memory's, and a merge planned on it is stored in that memory only.
    incarnation: str = ""


def _number(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CorruptDataError(f"the index's {what} holds {text[:40]!r}") from None


def parse_list(text: str) -> tuple[SegmentEntry, ...]:
    """``ix:s``'s ``L`` field: the segments listed."""
    out = []
    for item in filter(None, text.split(";")):
        f = [_number(x, "segment list") for x in item.split(",")]
        if len(f) != 8 or f[1] not in (1, -1):
            raise CorruptDataError(f"the index's segment list holds {item[:60]!r}")
        out.append(SegmentEntry(*f))
    return tuple(out)


def _parse_merges(text: str) -> tuple[Merge, ...]:
    out = []
    for item in filter(None, text.split(";")):
        f = item.split(",")
        if len(f) != 12:
            raise CorruptDataError(f"the index's merges hold {item[:60]!r}")
        inputs = tuple(_number(g, "merges") for g in f[2].split("|"))
        out.append(
            Merge(
                _number(f[0], "merges"),
                _number(f[1], "merges"),
                inputs,
                _number(f[3], "merges"),
                _number(f[4], "merges"),
            )
        )
    return tuple(out)


def _raw(value: Any) -> bytes | None:
    # Segment fields are ASCII and UTF-8 (compozy_memory._search.segments): a client that
    # decodes replies gives them back whole as text.
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def _shape(enc: Encoded | None) -> str:
    if enc is None:
        return ""
    return f"{enc.sign},{enc.docs},{enc.first},{enc.last},{enc.buckets},{enc.blocks}"


def doc_records(documents: Sequence[tuple[int, int, int, int]]) -> bytes:
    """``documents`` (id, kind, length, seq) as ``index_add``'s ``docs``: DOC_ARG bytes each,
    big-endian id (7), kind (1), length (2), seq (6). An id or seq past what the records
    hold came from an envelope written raw: CorruptDataError."""
    for i, _, _, s in documents:
        if not (0 < i <= 2**52 and 0 <= s < 2**48):
            raise CorruptDataError(
                f"message {i} (archived at {s}) has an id or place no compozy-memory write "
                "gives: it was written raw"
            )
    return b"".join(
        i.to_bytes(7, "big") + k.to_bytes(1, "big") + n.to_bytes(2, "big") + s.to_bytes(6, "big")
        for i, k, n, s in documents
    )


def _pairs(fields: Mapping[str, bytes], tag: str = "") -> list[ScriptArg]:
    out: list[ScriptArg] = []
    for name, value in fields.items():
        out += (tag + name, value)
    return out


class IndexCalls(GatewayBase):
    """The index calls of one memory."""

    @op
    def index_pending(self, max_docs: int, max_bytes: int) -> Steps[IndexPending]:
        """What the indexer has to do next (``lua/search/index_pending.lua``)."""
        reply = yield from self._reading(
            "index_pending",
            {
                "max_docs": max_docs,
                "max_bytes": max_bytes,
                "archive_max": self.policy.archive_max,
            },
            self._fields("index_pending"),
        )
        return parse_pending(reply)

    @op
    def index_reset(self, *, force: bool, off: bool = False) -> Steps[bool]:
        """Drop the index so the indexer builds it again (``off``: and keep none, search
        turned off); False if it was as asked already."""
        reply = yield from self._writing(
            "index_reset",
            {"ttl_ms": self.ttl_ms, "force": int(force), "off": int(off)},
            self._fields("index_reset"),
        )
        return bool(int(reply["reset"]))

    @op
    def index_read(
        self, gens: Sequence[int] = (), fields: Sequence[str] = (), *, tail: int = 0
    ) -> Steps[IndexState]:
        """The segment list and BM25's counts, ``fields`` of segments ``gens``, and at most
        ``tail`` live messages past the index (``lua/search/index_read.lua``)."""
        reply = yield from self._reading(
            "index_read",
            {"tail": tail, "gens": "|".join(str(g) for g in gens)},
            self._fields("index_read"),
            list(fields),
        )
        stale = bool(int(reply["stale"]))
        values = [] if stale else [_raw(v) for v in reply["values"]]
        return IndexState(
            int(reply["fmt"]),
            replies.text(reply["analyzer"]),
            int(reply["unindexed"]),
            int(reply["n_docs"]),
            int(reply["total_length"]),
            bool(int(reply["garbage"])),
            stale,
            parse_list(replies.text(reply["list"])),
            _parse_merges(replies.text(reply["reservations"])),
            dict(zip(fields, values, strict=True)) if not stale else {},
            replies.text(reply["incarnation"]),
            int(reply["ix_next"]),
            tuple(_envelope_bytes(env) for env in reply["tail"]),
        )

    @op
    def index_add(
        self,
        pending: IndexPending,
        *,
        analyzer: str,
        upto: int,
        seq_upto: int,
        documents: Sequence[tuple[int, int, int, int]],
        positive: Encoded | None,
        negative: Encoded | None,
        gone: int,
        gone_first: int,
    ) -> Steps[IndexAdded]:
        """One step of the indexer (``lua/search/index_add.lua``): ``documents`` (id, kind, length,
        seq) and their segment, and the negative segment of ``gone`` removed documents."""
        rest: list[ScriptArg] = []
        if positive is not None:
            rest += _pairs(positive.fields, "p")
        if negative is not None:
            rest += _pairs(negative.fields, "n")
        n_fields = len(rest) // 2
        reply = yield from self._writing(
            "index_add",
            {
                "ttl_ms": self.ttl_ms,
                "archive_max": self.policy.archive_max,
                "analyzer": analyzer,
                "incarnation": pending.incarnation,
                "ix_next": pending.ix_next,
                "upto": upto,
                "seq_from": pending.seq_from,
                "seq_upto": seq_upto,
                "n_gone": gone,
                "gone_first": gone_first,
                "n_docs": len(documents),
                "docs": doc_records(documents),
                "positive": _shape(positive),
                "negative": _shape(negative),
                "n_fields": n_fields,
            },
            self._fields("index_add"),
            rest,
        )
        return IndexAdded(
            bool(int(reply["applied"])),
            int(reply["ix_next"]),
            int(reply["ix_seq"]),
            int(reply["indexed"]),
            # Passed on as stored (the step parses neither): text written raw is refused here.
            parse_list(replies.stored_text(reply["list"], "the index's segment list")),
            _parse_merges(replies.stored_text(reply["reservations"], "the index's merges")),
            bool(int(reply["garbage"])),
            pending.incarnation,
        )

    @op
    def index_merge(
        self,
        inputs: Sequence[int],
        output: Encoded | None,
        fields: Mapping[str, bytes],
        *,
        incarnation: str,
        reservation: int = 0,
    ) -> Steps[tuple[bool, int]]:
        """Begin (``reservation`` 0) or publish a merge of ``inputs`` into ``output``, with
        ``fields`` of it (``lua/search/index_merge.lua``): (published, the output's generation).
        ``incarnation``: the memory's when the inputs were read (:attr:`IndexState.incarnation`);
        ConflictError in any other."""
        reply = yield from self._writing(
            "index_merge",
            {
                "ttl_ms": self.ttl_ms,
                "incarnation": incarnation,
                "reservation": reservation,
                "inputs": "|".join(str(g) for g in inputs),
                "shape": _shape(output),
                "declared": len(output.fields) if output is not None else 0,
                "n_fields": len(fields),
            },
            self._fields("index_merge"),
            _pairs(fields),
        )
        return bool(int(reply["done"])), int(reply["gen"])

    @op
    def index_put(
        self, reservation: int, fields: Mapping[str, bytes], *, incarnation: str
    ) -> Steps[int]:
        """A step of an open merge (``lua/search/index_put.lua``): its fields written so far."""
        reply = yield from self._writing(
            "index_put",
            {
                "ttl_ms": self.ttl_ms,
                "incarnation": incarnation,
                "reservation": reservation,
                "n_fields": len(fields),
            },
            self._fields("index_put"),
            _pairs(fields),
        )
        return int(reply["written"])

    @op
    def index_gc(self) -> Steps[int]:
        """One step deleting merged segments' fields (``lua/search/index_gc.lua``): fields left."""
        reply = yield from self._writing(
            "index_gc", {"ttl_ms": self.ttl_ms}, self._fields("index_gc")
        )
        return int(reply["left"])


def covered(pending: IndexPending, items: list[tuple[str, int, dict[str, Any]]]) -> tuple[int, int]:
    """(upto, seq_upto) a step of ``items`` (a prefix of ``pending.adds``) covers."""
    if len(items) == len(pending.adds):
        return pending.upto, pending.seq_upto
    where, seq, message = pending.adds[len(items)]
    if where == "a":
        return pending.upto, seq - 1
    return int(message["id"]) - 1, max(0, pending.seq_from - 1)
