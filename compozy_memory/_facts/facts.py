"""A memory's session facts: the capped key-value map shown as the kernel layer of a context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from compozy_memory._facts.calls import FactsCalls
from compozy_memory._facts.lines import EncodedFact, check_fact, header_tokens, line_tokens
from compozy_memory._model.limits import MAX_FACTS_PER_CALL
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import InvalidMessageError, ReadOnlyMemoryError, UsageError

__all__ = ["Facts", "FactsOwner"]


class FactsOwner(Protocol):
    """What of a memory handle its facts use (a handle's core is one): its facts live in its
    slot, counted with its counter, capped by its policy, and set through its gateway."""

    @property
    def key(self) -> str: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def counter(self) -> TokenCounter: ...

    @property
    def policy(self) -> MemoryPolicy: ...

    @property
    def gateway(self) -> FactsCalls: ...


class Facts:
    """A memory's session facts: a capped key-value map (``policy.facts_max``, 200 by
    default) in the memory's slot, with its TTL. Setting a key again moves it to the newest
    end; past the cap the least recently set go first. :meth:`MemoryInstance.context` shows
    them after the pinned messages as one system message.

    Its methods are steps: ``await`` them on an async handle's facts; a sync handle's
    (:class:`~compozy_memory.SyncMemoryInstance`) return their results."""

    def __init__(self, memory: FactsOwner) -> None:
        self._memory = memory
        self._header: int | None = None

    @property
    def transport(self) -> Any:
        return self._memory.gateway.transport

    @property
    def header_tokens(self) -> int:
        if self._header is None:
            self._header = header_tokens(self._memory.counter)
        return self._header

    @op
    def set(
        self, key: str | Mapping[str, str] | None = None, value: str | None = None, /, **more: str
    ) -> Steps[list[str]]:
        """Set one fact (``set("name", "Ada")``) or many (a mapping, or keywords), atomically;
        returns the keys the cap evicted."""
        memory = self._memory
        _writable(memory, "facts.set")
        pairs: dict[str, object] = {}
        if isinstance(key, Mapping):
            if value is not None:
                raise UsageError("facts.set takes a mapping or a key and a value", key=memory.key)
            pairs.update(key)
        elif key is not None:
            if value is None:
                raise InvalidMessageError(f"fact {key!r:.80} needs a value", key=memory.key)
            pairs[key] = value
        pairs.update(more)
        if not pairs:
            raise UsageError("facts.set needs at least one fact", key=memory.key)
        if len(pairs) > MAX_FACTS_PER_CALL:
            raise UsageError(f"at most {MAX_FACTS_PER_CALL} facts go in one call", key=memory.key)
        encoded: list[EncodedFact] = []
        for k, v in pairs.items():
            raw_key, raw_value = check_fact(k, v, where=memory.key)
            text_key, text_value = raw_key.decode(), raw_value.decode()
            tokens = line_tokens(text_key, text_value, memory.counter)
            encoded.append(EncodedFact(raw_key, tokens, raw_value))
        _, evicted = yield from memory.gateway.facts_set(encoded, memory.policy.facts_max)
        return evicted

    @op
    def get(self, key: str) -> Steps[str | None]:
        raw_key, _ = check_fact(key, "", where=self._memory.key)
        return (yield from self._memory.gateway.fact(raw_key))

    @op
    def delete(self, *keys: str) -> Steps[int]:
        """Remove facts; returns how many existed."""
        _writable(self._memory, "facts.delete")
        raw = [check_fact(k, "", where=self._memory.key)[0] for k in keys]
        if not raw:
            return 0
        return (yield from self._memory.gateway.facts_delete(raw))

    @op
    def items(self) -> Steps[list[tuple[str, str]]]:
        """Every fact as (key, value), least recently set first."""
        return [(k, v) for k, _, v in (yield from self._memory.gateway.facts_items())]


def _writable(memory: FactsOwner, operation: str) -> None:
    if memory.read_only:
        raise ReadOnlyMemoryError(f"{operation} refused: this handle is read-only", key=memory.key)
