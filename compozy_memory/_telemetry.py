"""OpenTelemetry spans and metrics for memory operations, after the GenAI semantic
conventions (``pip install 'compozy-memory[otel]'``), beside the Prometheus metrics.

Off until :func:`instrument` is called: then every memory operation a handle sends (each
script call, retries included) is one ``gen_ai.memory.client`` span, kind CLIENT, named by
its ``gen_ai.operation.name``, and one measurement of ``gen_ai.client.operation.duration``
(seconds). Until then the transport reads one module attribute a call and nothing else, and
nothing of OpenTelemetry is imported.

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
messages); ``gen_ai.memory.record.count`` for writes (the messages sent);
``compozy.memory.resource``, the memory resource id (as the Prometheus labels);
``server.address`` and ``server.port``; ``error.type`` (the error's class) on failure. The
metric carries the low-cardinality ones only (no store id). Locks, health reads, the session
index and stored results make no span.

**Content** (``gen_ai.memory.records``: the messages appended, as a JSON array of
``{"content", "metadata": {"role"}}``; ``gen_ai.memory.query.text``: a search's query) is
recorded only when asked: ``instrument(capture_content=True)``, or the standard
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``. It may hold personal data.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from compozy_memory._model.messages import Message
from compozy_memory._wire.effects import RECORDING

__all__ = [
    "ACTIVE",
    "GENAI_OPERATIONS",
    "Telemetry",
    "capturing",
    "content",
    "instrument",
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
        telemetry records content."""
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
