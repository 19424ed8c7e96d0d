"""``max_messages`` and ``message_count_based``: wired from the resource to the flusher."""

from __future__ import annotations

from compozy_memory import MemoryRegistry
from compozy_memory._config.schema import MemoryResource
from compozy_memory._flush.flusher import Flusher
from compozy_memory._manager import MemoryManager, flush_settings
from compozy_memory._model.limits import UNBOUNDED_TOKENS
from compozy_memory._model.results import AppendResult


class _NoServer:
    """A client that is never called: creating a handle sends nothing."""


def counted(**extra: object) -> MemoryResource:
    return MemoryResource.model_validate(
        {
            "id": "counted",
            "type": "message_count_based",
            "max_messages": 10,
            "default_key_template": "k",
            **extra,
        }
    )


def test_a_count_only_memory_flushes_by_count_with_no_token_limit() -> None:
    settings = flush_settings(counted())
    assert settings.max_messages == 10
    assert settings.max_tokens == UNBOUNDED_TOKENS
    assert settings.trigger_messages == 8  # summarize_threshold 0.8 of the count


def test_a_memory_with_both_limits_flushes_towards_both() -> None:
    settings = flush_settings(counted(type="token_based", max_tokens=2000))
    assert (settings.max_tokens, settings.max_messages) == (2000, 10)


async def test_the_manager_attaches_a_flusher_to_a_count_only_memory() -> None:
    registry = MemoryRegistry("p", [counted()])
    manager = MemoryManager(registry, client=_NoServer())  # type: ignore[arg-type]
    handle = await manager.get("counted")
    flusher = handle.flusher
    assert isinstance(flusher, Flusher)
    assert flusher.settings.max_messages == 10
    scheduled: list[int] = []
    flusher.schedule = lambda: scheduled.append(1)  # type: ignore[method-assign]
    flusher.notice(AppendResult(1, 7, total_tokens=70, total_count=7))
    assert scheduled == []
    flusher.notice(AppendResult(8, 8, total_tokens=80, total_count=8))
    assert scheduled == [1]  # the count, not the tokens, made it due
    await manager.aclose()
