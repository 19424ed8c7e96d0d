"""OpenTelemetry spans and metrics after the GenAI memory conventions, read from the SDK's
in-memory exporters, for real operations on every engine."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from compozy_memory import (
    ConflictError,
    MemoryInstance,
    ReadOnlyMemoryError,
    instrument_opentelemetry,
    uninstrument_opentelemetry,
)
from compozy_memory._io.translate import RedisClient


class Exported:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.metrics = InMemoryMetricReader()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def durations(self) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "gen_ai.client.operation.duration"
            for point in metric.data.data_points
        ]


@pytest.fixture
def exported() -> Iterator[Exported]:
    out = Exported()
    yield out
    uninstrument_opentelemetry()
    out.tracer_provider.shutdown()
    out.meter_provider.shutdown()


def handle(client: RedisClient, **options: Any) -> MemoryInstance:
    return MemoryInstance.open(
        client, project="otel", key=f"conv:{uuid.uuid4().hex}", memory_id="support", **options
    )


async def test_memory_operations_are_genai_memory_spans(
    client: RedisClient, exported: Exported, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider, meter_provider=exported.meter_provider
    )
    memory = handle(client)
    await memory.append_many(
        [{"role": "user", "content": "my card ends 4242"}, {"role": "assistant", "content": "ok"}]
    )
    await memory.read()
    await memory.trim(keep_messages=1)
    assert await memory.search("card") != []
    await memory.clear()

    (create,) = exported.named("create_memory")
    assert create.kind == SpanKind.CLIENT
    attributes = dict(create.attributes or {})
    assert attributes["gen_ai.operation.name"] == "create_memory"
    assert attributes["gen_ai.memory.store.id"] == memory.key
    assert attributes["gen_ai.memory.record.count"] == 2
    assert attributes["compozy.memory.resource"] == "support"
    # Content is off by default: nothing of the messages or the query is on any span.
    every = [dict(s.attributes or {}) for s in exported.spans.get_finished_spans()]
    assert not any("gen_ai.memory.records" in a or "gen_ai.memory.query.text" in a for a in every)
    # (the message's words, not its digits alone: a random key's hex may hold "4242")
    assert "ends 4242" not in json.dumps(every)
    names = [s.name for s in exported.spans.get_finished_spans()]
    assert names.count("delete_memory") >= 2  # trim (in steps), clear
    assert "search_memory" in names  # read, search (replace and trim read first too)
    points = exported.durations()
    operations = {p.attributes["gen_ai.operation.name"] for p in points}
    assert operations == {"create_memory", "search_memory", "delete_memory"}
    assert all("gen_ai.memory.store.id" not in p.attributes for p in points)  # cardinality
    assert sum(p.count for p in points) == len(names)


async def test_content_is_captured_only_when_asked(client: RedisClient, exported: Exported) -> None:
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider,
        meter_provider=exported.meter_provider,
        capture_content=True,
    )
    memory = handle(client)
    await memory.append({"role": "user", "content": "where is order 1042?"})
    await memory.trim(keep_messages=0)
    await memory.search("order")
    (create,) = exported.named("create_memory")
    records = json.loads(str((create.attributes or {})["gen_ai.memory.records"]))
    assert records == [{"content": "where is order 1042?", "metadata": {"role": "user"}}]
    queries = [
        (s.attributes or {}).get("gen_ai.memory.query.text")
        for s in exported.spans.get_finished_spans()
    ]
    assert "order" in queries


async def test_a_failed_operation_carries_its_error_type(
    client: RedisClient, exported: Exported
) -> None:
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider, meter_provider=exported.meter_provider
    )
    memory = handle(client)
    reader = MemoryInstance(client, memory.keys, read_only=True)
    with pytest.raises(ReadOnlyMemoryError):  # refused before any call: no span
        await reader.append({"role": "user", "content": "x"})
    await memory.append({"role": "user", "content": "one"})
    with pytest.raises(ConflictError):  # the script refuses: a stale compare-and-set
        await memory.replace([{"role": "user", "content": "two"}], if_last_id=99)
    (failed,) = exported.named("update_memory")
    assert failed.status.status_code == StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "ConflictError"
    (point,) = [p for p in exported.durations() if "error.type" in p.attributes]
    assert point.attributes["error.type"] == "ConflictError"
    assert point.attributes["gen_ai.operation.name"] == "update_memory"


async def test_nothing_is_reported_once_uninstrumented(
    client: RedisClient, exported: Exported
) -> None:
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider, meter_provider=exported.meter_provider
    )
    uninstrument_opentelemetry()
    await handle(client).append({"role": "user", "content": "quiet"})
    assert exported.spans.get_finished_spans() == ()


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_each_public_operation_is_one_span_with_its_record_count(
    client: RedisClient, exported: Exported
) -> None:
    """The conventions' record count: returned for search_memory, attempted for
    delete_memory; a trim of 600 messages (three steps of 256) is one span, not three."""
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider, meter_provider=exported.meter_provider
    )
    memory = handle(client)
    await memory.append_many(
        [{"role": "user", "content": f"order {n} shipped", "tokens": 1} for n in range(600)]
    )
    exported.spans.clear()
    trimmed = await memory.trim(keep_messages=0)
    assert trimmed.removed_count == 600
    (trim,) = exported.named("delete_memory")
    assert _attributes(trim)["gen_ai.memory.record.count"] == 600
    assert [s.name for s in exported.spans.get_finished_spans()] == ["delete_memory"]

    exported.spans.clear()
    hits = await memory.search("order shipped", limit=7)
    assert len(hits) == 7
    (search,) = exported.spans.get_finished_spans()
    assert (search.name, _attributes(search)["gen_ai.memory.record.count"]) == ("search_memory", 7)
    assert "gen_ai.memory.records" not in _attributes(search)  # content is opt-in

    exported.spans.clear()
    read = await memory.read()
    assert read == []
    (reading,) = exported.spans.get_finished_spans()
    assert _attributes(reading)["gen_ai.memory.record.count"] == 0

    await memory.append_many([{"role": "user", "content": "x", "tokens": 1}] * 3)
    exported.spans.clear()
    assert await memory.clear() == 3
    (cleared,) = exported.spans.get_finished_spans()
    assert cleared.name == "delete_memory"
    assert _attributes(cleared)["gen_ai.memory.record.count"] == 3
    assert "gen_ai.memory.record.id" not in _attributes(cleared)  # all of them
    points = exported.durations()
    assert sum(p.count for p in points) == 6  # two appends, trim, search, read, clear: one each


async def test_a_search_with_nothing_to_search_is_a_span_too(
    client: RedisClient, exported: Exported
) -> None:
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider, meter_provider=exported.meter_provider
    )
    memory = handle(client)
    assert await memory.search("anything") == []  # nothing stored at all
    assert await memory.search("the and of") == []  # only stop words: no script call
    spans = exported.named("search_memory")
    assert [_attributes(s)["gen_ai.memory.record.count"] for s in spans] == [0, 0]


async def test_captured_content_holds_the_query_and_the_records_found(
    client: RedisClient, exported: Exported
) -> None:
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider,
        meter_provider=exported.meter_provider,
        capture_content=True,
    )
    memory = handle(client)
    await memory.append_many(
        [
            {"role": "user", "content": "my parcel to Lisbon is late"},
            {"role": "assistant", "content": "it left the depot on Monday"},
        ]
    )
    await memory.trim(keep_messages=1)
    exported.spans.clear()
    hits = await memory.search("parcel Lisbon")
    (search,) = exported.spans.get_finished_spans()
    attributes = _attributes(search)
    assert attributes["gen_ai.memory.query.text"] == "parcel Lisbon"
    records = json.loads(str(attributes["gen_ai.memory.records"]))
    assert records[0] == {
        "content": "my parcel to Lisbon is late",
        "id": str(hits[0].id),
        "metadata": {"role": "user"},
        "score": hits[0].score,
    }
    exported.spans.clear()
    context = await memory.context(200, query="when did it leave?")
    (span,) = exported.spans.get_finished_spans()
    attributes = _attributes(span)
    assert span.name == "search_memory"
    assert attributes["gen_ai.memory.query.text"] == "when did it leave?"
    assert attributes["gen_ai.memory.record.count"] == len(context)
    shown = json.loads(str(attributes["gen_ai.memory.records"]))
    assert [r["content"] for r in shown] == [m.text for m in context]


async def test_the_blocking_twin_reports_the_same_spans(
    client: RedisClient, exported: Exported
) -> None:
    instrument_opentelemetry(
        tracer_provider=exported.tracer_provider, meter_provider=exported.meter_provider
    )
    twin = handle(client).to_sync()
    try:
        twin.append_many(
            [{"role": "user", "content": f"note {n}", "tokens": 1} for n in range(300)]
        )
        exported.spans.clear()
        assert twin.trim(keep_messages=10).removed_count == 290
        assert len(twin.search("note", limit=5)) == 5
        twin.context(50, query="note")
        names = [s.name for s in exported.spans.get_finished_spans()]
        assert names == ["delete_memory", "search_memory", "search_memory"]
        counts = [
            _attributes(s)["gen_ai.memory.record.count"]
            for s in exported.spans.get_finished_spans()
        ]
        assert counts[:2] == [290, 5]
    finally:
        twin.client.close()
