"""``append(..., offload=True)``: a message over the budget becomes a stub and a reference to
its content in the result store."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from compozy_memory._model.exchanges import result_text
from compozy_memory._model.limits import MAX_RESULT_PINS
from compozy_memory._model.messages import Message
from compozy_memory._model.tokens import count_message
from compozy_memory._results.store import Namespace
from compozy_memory._store.encoding import MessageInput
from compozy_memory._store.handle import Handle
from compozy_memory._wire.background import Debounced
from compozy_memory._wire.effects import no_retries
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import CompozyMemoryError, InvalidMessageError, MessageTooLargeError

__all__ = ["PinKeeper", "clear_releasing_pins", "offloaded"]

_log = logging.getLogger("compozy_memory")


def offloaded(
    memory: Handle, messages: Iterable[MessageInput], namespace: Namespace
) -> Steps[list[MessageInput]]:
    """``messages`` with each one over the budget replaced by a stub and a reference."""
    if isinstance(messages, (Message, Mapping, str, bytes)):
        return [messages]  # _encode refuses it with the usual error
    limit = memory.policy.max_tokens
    out: list[MessageInput] = []
    for raw in messages:
        try:
            message = Message.parse(dict(raw) if isinstance(raw, Mapping) else raw)
        except InvalidMessageError:
            out.append(raw)  # _encode reports it with its position
            continue
        if limit is None:
            out.append(message)
            continue
        tokens = count_message(message, memory.counter)
        if tokens <= limit:
            # counted here, so the append does not count it again
            out.append(message.model_copy(update={"tokens": tokens}))
            continue
        out.append((yield from _stub(memory, message, namespace)))
    return out


def _stub(memory: Handle, message: Message, namespace: Namespace) -> Steps[Message]:
    if isinstance(message.content, str):
        payload, kind, preview = message.content, "text", message.content
    else:
        payload = json.dumps(message.content, ensure_ascii=False, separators=(",", ":"))
        kind = "json"
        preview = "\n".join(
            result_text(b.get("content"))
            if b.get("type") == "tool_result"
            else str(b.get("text", ""))
            for b in message.content
        )
    ttl = memory.gateway.ttl_ms
    # A memory pins at most MAX_RESULT_PINS results (its clear releases them all at once):
    # past that, a result lives by the memory's TTL alone.
    pin = (yield from memory.gateway.pinned_results()) < MAX_RESULT_PINS
    ref = yield from memory.result_ops.store_result(
        payload,
        namespace=namespace,
        kind=kind,
        pin=pin,
        pin_ttl=timedelta(milliseconds=ttl) if ttl else None,
        ttl=None if pin or not ttl else timedelta(milliseconds=ttl),
    )
    limit = memory.policy.max_tokens
    header = (
        f"[stored result {ref.token}: {kind}, {ref.size} bytes, "
        f"{len(preview.splitlines())} lines; the load_result tool reads it]"
    )
    # The stub must fit the budget it was made for: fewer and shorter preview lines until it
    # does, then the header alone, then a shorter one.
    for lines, width in _STUB_SHAPES:
        shown = [line[:width] for line in preview.splitlines()[:lines]]
        stub = _stub_message(message, "\n".join([header, *shown]), ref.to_json(), memory)
        if limit is None or stub.tokens is None or stub.tokens <= limit:
            break
    else:
        stub = _stub_message(message, f"[stored result {ref.token}]", ref.to_json(), memory)
    if limit is None or stub.tokens is None or stub.tokens <= limit:
        if pin:  # the memory records its pin only for a stub it keeps
            yield from memory.gateway.note_pin(memory.result_ops.key_of(ref))
        return stub
    if pin:
        yield from memory.result_ops.gateway.release(memory.result_ops.key_of(ref))
    raise MessageTooLargeError(
        f"max_tokens {limit} leaves no room for even the stub of an offloaded result "
        f"({stub.tokens} tokens)",
        key=memory.key,
    )


def _stub_message(message: Message, stub: str, ref: object, memory: Handle) -> Message:
    """``message`` with its content replaced by ``stub`` (tool calls kept; each tool result
    becomes the stub), counted once here so the append does not count it again."""
    content: str | list[dict[str, Any]]
    if isinstance(message.content, str):
        content = stub
    else:
        kept: list[dict[str, Any]] = [b for b in message.content if b.get("type") == "tool_use"]
        results = [
            {"type": "tool_result", "tool_use_id": b.get("tool_use_id"), "content": stub}
            for b in message.content
            if b.get("type") == "tool_result"
        ]
        content = [*kept, *results] or [{"type": "text", "text": stub}]
    metadata = {**(message.metadata or {}), "result_ref": ref}
    made = Message.model_validate(
        {
            **message.model_dump(by_alias=True, exclude_none=True),
            "content": content,
            "metadata": metadata,
            "tokens": None,
        }
    )
    return made.model_copy(update={"tokens": count_message(made, memory.counter)})


# A stub shows at most this many lines of its result, each cut to this many characters: the
# first shape that fits the memory's max_tokens.
_STUB_SHAPES = ((5, 160), (3, 120), (2, 80), (1, 60), (0, 0))


def clear_releasing_pins(memory: Handle) -> Steps[int]:
    """Clear ``memory``, then release the results it pinned, each as many times as this
    memory pinned it (the clear script returns them from the memory's own record, so only
    the memory that pinned a result releases it, once per pin). A release that fails is
    logged, never raised: the clear has happened."""
    removed, pins = yield from memory.gateway.clear()
    for key, count in pins:
        for _ in range(count):
            try:
                yield from memory.result_ops.gateway.release(key)
            except CompozyMemoryError as exc:
                _log.warning("result %s not released after clearing %s: %s", key, memory.key, exc)
                break
    return removed


class PinKeeper:
    """Keeps the results a memory pins alive as long as the memory: a pinned result gets the
    memory's TTL when stored, and the memory's writes keep renewing theirs, so at least every
    half TTL a handle that writes gives each pinned result the memory's TTL again
    (``lua/results/result_touch.lua``), in the background (a task of an async handle's loop, a
    background thread for a sync handle). Without it a result expired under a memory still in
    use, and its stub pointed at nothing."""

    def __init__(self, memory: Handle) -> None:
        self._memory = memory
        self._due = 0.0
        self._job = Debounced.of_steps(self._renewing, memory.gateway.transport, 0.0)

    def notice(self) -> None:
        """After a write of this handle: renew the pinned results if half a TTL went by."""
        ttl_ms = self._memory.gateway.ttl_ms
        if not ttl_ms or self._memory.read_only or time.monotonic() < self._due:
            return
        self._due = time.monotonic() + ttl_ms / 2000
        self._job.fire()

    async def renew(self, ttl_ms: int) -> int:
        """Give every result this memory pins its TTL again; returns how many it renewed.
        A failure is logged: the next write's renewal tries again."""
        renewed: int = await self._memory.gateway.transport.drive(self.renewal(ttl_ms))
        return renewed

    def _renewing(self) -> Steps[None]:
        ttl_ms = self._memory.gateway.ttl_ms
        if ttl_ms:
            yield from self.renewal(ttl_ms)

    def renewal(self, ttl_ms: int) -> Steps[int]:
        """:meth:`renew` as steps."""
        renewed = 0
        try:
            with no_retries():
                for key in (yield from self._memory.gateway.pins()):
                    if (yield from self._memory.result_ops.gateway.touch(key, ttl_ms)) >= 0:
                        renewed += 1
        except CompozyMemoryError as exc:
            self._due = 0.0
            _log.warning("pinned results of %s not renewed: %s", self._memory.key, exc)
        return renewed
