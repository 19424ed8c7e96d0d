"""The spec's health fields on real engines: when the last flush was, and by which strategy."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from compozy_memory import MemoryManager, MemoryRegistry
from compozy_memory._io.translate import RedisClient
from integration.memories import COUNTER


def project(folder: Path, strategy: str) -> MemoryRegistry:
    (folder / "memory").mkdir(parents=True)
    (folder / "compozy.yaml").write_text("project: acme\n")
    (folder / "memory" / "notes.yaml").write_text(
        "id: notes\n"
        "max_tokens: 400\n"
        "default_key_template: 'session:{{ .workflow.id }}'\n"
        f"flushing_strategy: {{type: {strategy}, summary_tokens: 40}}\n"
    )
    return MemoryRegistry.load(folder)


@pytest.mark.parametrize("strategy", ["hybrid_summary", "fifo"])
async def test_health_reports_the_last_flush_and_the_strategy(
    client: RedisClient, tmp_path: Path, strategy: str
) -> None:
    registry = project(tmp_path, strategy)
    manager = MemoryManager(registry, client, counter=COUNTER)
    memory = await manager.get("notes", {"workflow": {"id": uuid.uuid4().hex}})
    before = await memory.health()
    assert before.last_flush_ms is None
    assert before.strategy == strategy == registry.get("notes").flushing_strategy.type

    turns = [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i}", "tokens": 50}
        for i in range(12)
    ]  # 600 tokens over a 400-token budget
    await memory.append_many(turns)
    result = await memory.flush()  # before the background flush's debounce has passed
    flusher = memory.flusher
    assert flusher is not None
    await flusher.wait_idle()
    now_ms = time.time() * 1000

    if result.outcome != "skipped":  # a slow machine may have let the background one win
        assert result.outcome == ("summarised" if strategy == "hybrid_summary" else "evicted")
        assert result.plan is not None
        assert result.tokens_saved > 0
        summarised = 0 if strategy == "fifo" else len(result.plan.summarize_ids)
        assert result.summarized_count == summarised
        assert summarised > 0 or strategy == "fifo"
    health = await memory.health()
    assert health.flush_count >= 1
    assert health.strategy == strategy
    assert health.last_flush_ms is not None
    # The server's clock, which the embedded engines share with this machine.
    assert abs(health.last_flush_ms - now_ms) < 5_000
    assert health.token_count + health.summary_tokens <= 400
    await manager.aclose()
