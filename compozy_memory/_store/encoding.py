"""What a handle sends: messages validated, counted and serialised, and dedupe keys."""

from __future__ import annotations

import itertools
import math
import operator
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from compozy_memory._model.limits import MAX_BATCH, MAX_DEDUPE_KEY, MAX_MESSAGE_TOKENS
from compozy_memory._model.messages import EncodedMessage, Message, encode_body
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, message_texts
from compozy_memory._wire.effects import Count
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import InvalidMessageError, MessageTooLargeError, UsageError

__all__ = ["MessageInput", "dedupe_token", "encode_messages", "ttl_millis"]

MessageInput = Message | Mapping[str, Any]


def encode_messages(
    messages: Iterable[MessageInput], policy: MemoryPolicy, counter: TokenCounter, key: str
) -> Steps[list[EncodedMessage]]:
    """Validate, count and serialise every message before anything is sent, as the append
    and replace scripts take them. Texts
    are counted with the rest of the event loop's iteration, off the loop, or at once in a
    sync caller's thread (:mod:`compozy_memory._io.counting`)."""
    prepared = _prepare(messages, key)
    texts = [text for item in prepared for text in item.texts]
    counted = iter((yield from Count(counter, texts)) if texts else ())
    encoded: list[EncodedMessage] = []
    for position, item in enumerate(prepared, start=1):
        tokens = item.message.tokens
        if tokens is None:
            tokens = MESSAGE_OVERHEAD_TOKENS
            for _ in item.texts:
                value = next(counted)
                if isinstance(value, InvalidMessageError):
                    raise type(value)(f"message {position}: {value}", key=key) from None
                if isinstance(value, Exception):
                    raise value
                tokens += _whole(value, position, key)
        _check_size(tokens, position, policy, key)
        message = item.message
        priority = (
            message.priority
            if message.priority is not None
            else policy.priority_of(message.content_type)
        )
        encoded.append(EncodedMessage(tokens, priority, item.body))
    return encoded


@dataclass(frozen=True, slots=True)
class _Prepared:
    message: Message
    body: bytes
    texts: list[str]  # what the counter counts; none when the message carries its count


def _prepare(messages: Iterable[MessageInput], key: str) -> list[_Prepared]:
    if isinstance(messages, (Message, Mapping, str, bytes)):
        raise InvalidMessageError(
            "append_many and replace take a list of messages, not a single message",
            key=key,
        )
    out = []
    for position, raw in enumerate(messages, start=1):
        if position > MAX_BATCH:
            raise InvalidMessageError(f"at most {MAX_BATCH} messages go in one call", key=key)
        try:
            message = Message.parse(dict(raw) if isinstance(raw, Mapping) else raw)
            body = encode_body(message)
        except InvalidMessageError as exc:
            raise type(exc)(f"message {position}: {exc}", key=key) from None
        texts = message_texts(message) if message.tokens is None else []
        out.append(_Prepared(message, body, texts))
    return out


def _whole(value: Any, position: int, key: str) -> int:
    """A counter's count as an int: the scripts take tokens in decimal digits alone, so an
    integral float (``7.0``) or an integer type of another library (numpy's) is sent as the
    int it is, and anything else is refused here, naming the counter."""
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, float):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise InvalidMessageError(
        f"message {position}: the token counter returned {value!r}, not a whole number",
        key=key,
    )


def _check_size(tokens: int, position: int, policy: MemoryPolicy, key: str) -> None:
    if tokens > MAX_MESSAGE_TOKENS:
        raise InvalidMessageError(
            f"message {position} claims {tokens} tokens; a message counts at most "
            f"{MAX_MESSAGE_TOKENS}",
            key=key,
        )
    limit = policy.max_tokens
    if limit is not None and tokens > limit:
        raise MessageTooLargeError(
            f"message {position} has {tokens} tokens, more than the memory's max_tokens of {limit}",
            key=key,
        )


def dedupe_token(dedupe_key: str | None, key: str) -> str:
    """The caller's dedupe key, checked, or a fresh one for a call that passes none."""
    if dedupe_key is None:
        return _next_token()
    if (
        not isinstance(dedupe_key, str)
        or not dedupe_key
        or len(dedupe_key.encode("utf-8", "surrogatepass")) > MAX_DEDUPE_KEY
    ):
        raise InvalidMessageError(
            f"dedupe_key must be a non-empty string of at most {MAX_DEDUPE_KEY} bytes, "
            f"got {dedupe_key!r:.80}",
            key=key,
        )
    try:
        dedupe_key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessageError(
            "dedupe_key is not valid UTF-8 text (lone surrogate)", key=key
        ) from None
    return dedupe_key


class _Tokens:
    """Dedupe keys for calls that pass none: ``~<prefix>:<n>``, a random per-process prefix
    (96 bits, drawn again in a forked child) and a counter, cheaper than fresh randomness per
    call. The scripts know this form and keep one compact record per prefix
    (``dedupe_record`` in ``lua/lib/dedupe.lua``)."""

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        self.prefix = "~" + secrets.token_urlsafe(12) + ":"
        self.counter = itertools.count()

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.counter)}"


_next_token = _Tokens()


# Redis takes PEXPIRE values up to 2**63 ms, but a TTL past a century is a mistake, not a plan.
_MAX_TTL_SECONDS = 100 * 365 * 86400


def ttl_millis(ttl: timedelta | float | None, key: str) -> int:
    """A TTL (seconds or a timedelta; None for none) as the scripts take it: ms, 0 for none."""
    if ttl is None:
        return 0
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise UsageError(f"ttl must be seconds or a timedelta, got {ttl!r}", key=key)
    if not math.isfinite(seconds) or seconds <= 0 or seconds > _MAX_TTL_SECONDS:
        raise UsageError(
            f"ttl must be positive and at most {_MAX_TTL_SECONDS // 86400 // 365} years, "
            f"got {ttl!r}",
            key=key,
        )
    return max(1, int(seconds * 1000))
