"""``max_messages`` and ``message_count_based``: wired from the resource to the flusher."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from compozy_memory import MemoryRegistry
from compozy_memory._config.loader import load_project
from compozy_memory._config.schema import MemoryResource
from compozy_memory._flush.flusher import Flusher
from compozy_memory._manager import MemoryManager, flush_settings
from compozy_memory._model.limits import UNBOUNDED_TOKENS
from compozy_memory._model.results import AppendResult
from compozy_memory._ops.cli import main


class _NoServer:
    """A client with no server: the manager's warm-up at its first get fails quietly, and
    creating a handle sends nothing."""


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
    assert settings.summary_tokens == 500  # no budget to take a share of


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


def _project(tmp_path: Path, memory: str) -> Path:
    (tmp_path / "memory").mkdir()
    (tmp_path / "compozy.yaml").write_text("project: acme\n")
    (tmp_path / "memory" / "m.yaml").write_text(textwrap.dedent(memory).lstrip())
    return tmp_path


INERT = """
    id: m
    max_tokens: 1000
    priority_blocks:
      - priority: 1
        content_types: [facts]
        max_tokens: 100
    locking:
      append_ttl: 30s
      clear_ttl: 10s
      flush_ttl: 2m
"""


def test_settings_that_do_nothing_are_warned_about_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    root = _project(tmp_path, INERT)
    warnings = [str(w) for w in load_project(root).warnings]
    assert warnings == [
        "memory/m.yaml:8: locking.append_ttl: has no effect (appends take no lock here: each "
        "is one atomic Lua script); only flush_ttl is used",
        "memory/m.yaml:9: locking.clear_ttl: has no effect (clears take no lock here: a clear "
        "is one atomic Lua script); only flush_ttl is used",
        "memory/m.yaml:6: priority_blocks[0].max_tokens: has no effect: priority eviction "
        "removes priorities 2 and up only (priority 1 is still summarised past the threshold)",
    ]
    assert main(["validate", str(root)]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: memory/m.yaml:") == 3
    with caplog.at_level(logging.WARNING, logger="compozy_memory.config"):
        MemoryRegistry.load(root)
    assert sum("locking.append_ttl" in r.getMessage() for r in caplog.records) == 1


def test_defaults_and_flush_ttl_raise_no_warning(tmp_path: Path) -> None:
    root = _project(tmp_path, "id: m\nmax_tokens: 1000\nlocking:\n  flush_ttl: 2m\n")
    assert load_project(root).warnings == []


def test_max_tokens_on_priority_0_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"priority 0 .* is never evicted"):
        MemoryResource.model_validate(
            {
                "id": "m",
                "max_tokens": 1000,
                "priority_blocks": [
                    {"priority": 0, "content_types": ["system_prompt"], "max_tokens": 10}
                ],
            }
        )
