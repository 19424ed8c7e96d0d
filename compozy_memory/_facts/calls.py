"""The session facts' script calls (``lua/facts/``), mixed into the memory's gateway: a fact
lives in the memory's slot, so its calls are the memory's, built with the gateway's keys, TTL
and read-only check."""

from __future__ import annotations

from collections.abc import Sequence

from compozy_memory._facts.lines import EncodedFact, parse_stored
from compozy_memory._wire import replies
from compozy_memory._wire.effects import raw
from compozy_memory._wire.gateway_base import GatewayBase
from compozy_memory._wire.scripts import ScriptArg
from compozy_memory._wire.steps import Steps, op

__all__ = ["FactsCalls"]


class FactsCalls(GatewayBase):
    """Setting, deleting and reading a memory's facts."""

    @op
    def facts_set(self, facts: Sequence[EncodedFact], cap: int) -> Steps[tuple[int, list[str]]]:
        """Set ``facts``; returns the number of facts kept and the keys the cap evicted."""
        reply = yield from self._writing(
            "facts_set",
            {"ttl_ms": self.ttl_ms, "cap": cap, "n": len(facts)},
            self._fields("facts_set"),
            [value for fact in facts for value in fact],
        )
        return int(reply["count"]), [replies.text(k) for k in reply["evicted"]]

    @op
    def facts_delete(self, keys: Sequence[ScriptArg]) -> Steps[int]:
        return (yield from self._writing("facts_delete", {"ttl_ms": self.ttl_ms}, int, keys))

    @op
    def facts_items(self) -> Steps[list[tuple[str, int, str]]]:
        """Every fact as (key, tokens, value), least recently set first."""
        reply = yield from self._reading("facts_items", {}, self._fields("facts_items"))
        out = []
        pairs = reply["facts"]
        for i in range(0, len(pairs), 2):
            tokens, value = parse_stored(pairs[i + 1])
            out.append((replies.text(pairs[i]), tokens, value))
        return out

    @op
    def fact(self, key: bytes) -> Steps[str | None]:
        """One fact's value (a plain HGET), or None."""
        stored = yield from self._command("facts_get", raw, "hget", self.keys.facts, key)
        return None if stored is None else parse_stored(stored)[1]
