"""OpenTelemetry spans and metrics for memory operations, after the GenAI semantic
conventions (``pip install 'compozy-memory[otel]'``), beside the Prometheus metrics.

Off until :func:`instrument` is called: then every memory operation is one
``gen_ai.memory.client`` span, kind CLIENT, named by its ``gen_ai.operation.name`` (the
conventions' span name), and one measurement of ``gen_ai.client.operation.duration``
(seconds). A public method of a handle (``search``, ``trim``, ``read``...) is one operation,
however many script calls it makes (a trim moves messages in steps; a long read is paged;
a search of a memory with nothing to search makes none): :func:`operation` opens its span,
and the calls made inside it open none of their own. A call made outside any such method (a
flusher's commit, an adapter's append) is one span, retries included. Until then the transport
reads one module attribute a call and nothing else, and nothing of OpenTelemetry is
imported.

========================  ==========================================================
our operation             ``gen_ai.operation.name``
========================  ==========================================================
append, import            ``create_memory`` (new records)
replace, flush_commit     ``update_memory`` (records rewritten: a swap, a summary)
trim, clear               ``delete_memory`` (no ``gen_ai.memory.record.id``: all of
                          them, for a clear)
read, context, search,    ``search_memory``
recall, recall_messages
========================  ==========================================================

Attributes: ``gen_ai.operation.name``; ``gen_ai.memory.store.id``, the memory's key prefix
(``compozy:<project>:memory:{<key>}``: one conversation is one store of records, the
messages); ``gen_ai.memory.record.count`` as the conventions define it: for
``search_memory`` the records returned (hits, messages read), for ``create_memory`` and
``update_memory`` the records the operation attempted to write, for ``delete_memory`` the
records it attempted to delete (a trim's removed messages, a clear's live ones); no
``gen_ai.memory.record.id`` (a clear deletes all of them, as the conventions say its absence
means); ``compozy.memory.resource``, the memory resource id (as the Prometheus labels);
``server.address`` and ``server.port``; ``error.type`` (the error's class) on failure. The
metric carries the low-cardinality ones only (no store id). Locks, health reads, the session
index and stored results make no span.

**Content** is recorded only when asked (the conventions' opt-in):
``instrument(capture_content=True)``, or the standard
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``. It may hold personal data.
``gen_ai.memory.records`` holds the messages appended, and the records a search or read
returned (a search's hits with their ``score``), as the conventions' JSON array of
``{"content", "id", "metadata": {"role"}, "score"}``, at most :data:`MAX_RECORDS` of them;
``gen_ai.memory.query.text`` holds the query of ``search()`` and of ``context(query=...)``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, TypeVar

from compozy_memory._model.messages import Message
from compozy_memory._wire.effects import RECORDING

__all__ = [
    "ACTIVE",
    "GENAI_OPERATIONS",
    "MAX_RECORDS",
    "Outcome",
    "Telemetry",
    "capturing",
    "content",
    "instrument",
    "operation",
    "record_count",
    "uninstrument",
]

T = TypeVar("T")

#: Our operations (the transport's names) and the GenAI memory operation each one is.
GENAI_OPERATIONS: dict[str, str] = {
    "append": "create_memory",
    "import": "create_memory",
    "replace": "update_memory",
    "flush_commit": "update_memory",
    "trim": "delete_memory",
    "clear": "delete_memory",
    "read": "search_memory",
    "context": "search_memory",
    "search": "search_memory",
    "recall": "search_memory",
    "recall_messages": "search_memory",
}
_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_SCOPE = "compozy_memory"
# Who has a public operation's span open (a thread, and its asyncio task if any): the calls
# it makes then open none of their own. A task started meanwhile (the indexer's) copies the
# context but is not the owner, so its calls keep their spans.
_OPEN: ContextVar[tuple[int, int] | None] = ContextVar("compozy_memory_operation", default=None)


def _owner() -> tuple[int, int]:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a blocking caller
        task = None
    return threading.get_ident(), 0 if task is None else id(task)


def _inside() -> bool:
    """Whether the caller is inside its own public operation's span."""
    return _OPEN.get() == _owner() if _OPEN.get() is not None else False


#: Records one span's ``gen_ai.memory.records`` holds at most (the first ones).
MAX_RECORDS = 100


class Outcome:
    """What an operation's span learns from its result: how many records, and (content
    captured) which."""

    def __init__(self, span: Any = None, capture: bool = False) -> None:
        self._span = span
        self._capture = capture

    def count(self, records: int) -> None:
        """``gen_ai.memory.record.count``."""
        if self._span is not None:
            self._span.set_attribute("gen_ai.memory.record.count", records)

    def found(self, messages: Sequence[Any], scores: Sequence[float] | None = None) -> None:
        """The records returned: their count, and (content captured) the first
        :data:`MAX_RECORDS` of them as ``gen_ai.memory.records``."""
        self.count(len(messages))
        if self._span is None or not self._capture:
            return
        shown = []
        for n, message in enumerate(messages[:MAX_RECORDS]):
            record: dict[str, Any] = {"content": message.text}
            if message.id is not None:
                record["id"] = str(message.id)
            record["metadata"] = {"role": message.role}
            if scores is not None:
                record["score"] = scores[n]
            shown.append(record)
        self._span.set_attribute("gen_ai.memory.records", json.dumps(shown, ensure_ascii=False))


#: The outcome of an operation that makes no span.
NO_OUTCOME = Outcome()


class Telemetry:
    """The tracer and the duration histogram operations report to."""

    def __init__(self, tracer: Any, meter: Any, *, capture_content: bool) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.tracer = tracer
        self.capture_content = capture_content
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration."
        )
        self._client = SpanKind.CLIENT
        self._error = (Status, StatusCode.ERROR)

    async def trace(
        self,
        operation: str,
        call: Awaitable[T],
        *,
        store: str,
        resource: str,
        server: tuple[str, int] | None,
        records: int | None,
        content: Mapping[str, str] | None = None,
    ) -> T:
        """Await ``call`` inside the span of ``operation`` (one of :data:`GENAI_OPERATIONS`),
        and record its duration."""
        with self.span(
            operation,
            store=store,
            resource=resource,
            server=server,
            records=records,
            content=content,
        ):
            return await call

    @contextmanager
    def span(
        self,
        operation: str,
        *,
        store: str,
        resource: str,
        server: tuple[str, int] | None,
        records: int | None,
        content: Mapping[str, str] | None = None,
    ) -> Iterator[None]:
        """The span of ``operation`` around the block (a blocking call, or an awaited one),
        and its duration recorded; ``content`` (:func:`content`) goes on it when this
        telemetry records content; nothing inside a public operation's span, which covers
        the call (see :func:`operation`)."""
        if _inside():
            yield
            return
        name = GENAI_OPERATIONS[operation]
        common: dict[str, Any] = {"gen_ai.operation.name": name}
        common["compozy.memory.resource"] = resource
        if server is not None:
            common["server.address"], common["server.port"] = server
        attributes = {**common, "gen_ai.memory.store.id": store}
        if records is not None:
            attributes["gen_ai.memory.record.count"] = records
        if self.capture_content and content:
            attributes.update(content)
        started = time.perf_counter()
        with self.tracer.start_as_current_span(
            name,
            kind=self._client,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as exc:
                error = type(exc).__name__
                span.set_attribute("error.type", error)
                status, code = self._error
                span.set_status(status(code, error))
                self.duration.record(time.perf_counter() - started, {**common, "error.type": error})
                raise
            self.duration.record(time.perf_counter() - started, common)

    @contextmanager
    def operation(
        self,
        operation: str,
        *,
        store: str,
        resource: str,
        server: tuple[str, int] | None,
        records: int | None = None,
        query: str | None = None,
    ) -> Iterator[Outcome]:
        """The span of one public operation (a handle's method) around the block, the calls
        made inside it opening none; the block reports its result to the :class:`Outcome`."""
        name = GENAI_OPERATIONS[operation]
        common: dict[str, Any] = {"gen_ai.operation.name": name}
        common["compozy.memory.resource"] = resource
        if server is not None:
            common["server.address"], common["server.port"] = server
        attributes = {**common, "gen_ai.memory.store.id": store}
        if records is not None:
            attributes["gen_ai.memory.record.count"] = records
        if self.capture_content and query is not None:
            attributes["gen_ai.memory.query.text"] = query
        started = time.perf_counter()
        token = _OPEN.set(_owner())
        try:
            with self.tracer.start_as_current_span(
                name,
                kind=self._client,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    yield Outcome(span, self.capture_content)
                except BaseException as exc:
                    error = type(exc).__name__
                    span.set_attribute("error.type", error)
                    status, code = self._error
                    span.set_status(status(code, error))
                    elapsed = time.perf_counter() - started
                    self.duration.record(elapsed, {**common, "error.type": error})
                    raise
                self.duration.record(time.perf_counter() - started, common)
        finally:
            _OPEN.reset(token)


#: The process's telemetry: None until :func:`instrument`.
ACTIVE: Telemetry | None = None


def instrument(
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_content: bool | None = None,
) -> Telemetry:
    """Report every memory operation of this process as OpenTelemetry spans and metrics
    (the GlobalTracerProvider and GlobalMeterProvider unless given). ``capture_content``
    records messages and queries too (default: the environment variable
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, off unless ``true``). Needs the
    ``otel`` extra."""
    global ACTIVE
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:
        from compozy_memory.errors import ConfigurationError

        raise ConfigurationError(
            "OpenTelemetry is not installed: pip install 'compozy-memory[otel]'"
        ) from exc
    from importlib.metadata import version

    if capture_content is None:
        capture_content = os.environ.get(_CONTENT_ENV, "").strip().lower() == "true"
    release = version("compozy-memory")
    tracer = trace.get_tracer(_SCOPE, release, tracer_provider)
    meter = metrics.get_meter(_SCOPE, release, meter_provider)
    ACTIVE = Telemetry(tracer, meter, capture_content=capture_content)
    RECORDING.content = capture_content
    return ACTIVE


def uninstrument() -> None:
    """Stop reporting (the providers are the caller's to shut down)."""
    global ACTIVE
    ACTIVE = None
    RECORDING.content = False


def operation(
    handle: Any, name: str, *, records: int | None = None, query: str | None = None
) -> AbstractContextManager[Outcome]:
    """The span of public operation ``name`` of ``handle`` (a memory handle: its key, its
    transport's resource and server) around the block, or nothing when telemetry is off or
    another operation's span is open (a method calling another)."""
    telemetry = ACTIVE
    if telemetry is None or _inside():
        return nullcontext(NO_OUTCOME)
    transport = handle.transport
    return telemetry.operation(
        name,
        store=handle.key,
        resource=transport.memory,
        server=transport.server_address(),
        records=records,
        query=query,
    )


def capturing() -> bool:
    """Whether operations record their content now."""
    telemetry = ACTIVE
    return telemetry is not None and telemetry.capture_content


def content(*, records: Sequence[object] | None = None, query: str | None = None) -> dict[str, str]:
    """The attributes that give a span its content: ``records`` (messages as appended: each
    a dict or a :class:`~compozy_memory.Message`; others are left out) as (role, text) pairs,
    or a search's ``query``. Made only when :func:`capturing`."""
    attributes: dict[str, str] = {}
    if records is not None:
        parsed = [Message.parse(m) if isinstance(m, dict | Message) else None for m in records]
        attributes["gen_ai.memory.records"] = json.dumps(
            [{"content": m.text, "metadata": {"role": m.role}} for m in parsed if m is not None],
            ensure_ascii=False,
        )
    if query is not None:
        attributes["gen_ai.memory.query.text"] = query
    return attributes


def record_count(argv: Sequence[str], args: Sequence[Any]) -> int | None:
    """How many messages a write sends: its ``n`` (or ``n_msgs``) argument, if it has one."""
    for name in ("n", "n_msgs"):
        if name in argv:
            return int(args[argv.index(name)])
    return None
