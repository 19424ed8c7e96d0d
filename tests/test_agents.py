from __future__ import annotations

from typing import Any

import pytest

from compozy_memory._config.agents import AgentConfigError, MemoryReference, resolve_agent_memories
from compozy_memory._config.schema import MemoryResource

RESOURCES = {
    "support": MemoryResource(id="support", max_tokens=100),
    "knowledge": MemoryResource(id="knowledge", max_tokens=100,
                                default_key_template="project:{{ .project.id }}"),
    "sql": MemoryResource(id="sql", max_tokens=100),
}  # fmt: skip


def resolve(**config: Any) -> list[MemoryReference]:
    return resolve_agent_memories(config, RESOURCES)


def test_level_one() -> None:
    assert resolve(memory="support", memory_key="u:{{ .user.id }}") == [
        MemoryReference("support", "read-write", "u:{{ .user.id }}")
    ]
    assert resolve(memory="knowledge") == [MemoryReference("knowledge", "read-write", None)]


def test_level_two() -> None:
    assert resolve(memory=True, memories=["support", "sql"], memory_key="t:{{ .t }}") == [
        MemoryReference("support", "read-write", "t:{{ .t }}"),
        MemoryReference("sql", "read-write", "t:{{ .t }}"),
    ]


def test_level_three() -> None:
    refs = resolve(
        memories=[
            {"id": "sql", "mode": "read-write", "key": "s:{{ .workflow.id }}"},
            {"id": "knowledge", "mode": "read-only"},
            {"id": "support", "key": "u:{{ .u }}"},
        ]
    )
    assert refs == [
        MemoryReference("sql", "read-write", "s:{{ .workflow.id }}"),
        MemoryReference("knowledge", "read-only", None),
        MemoryReference("support", "read-write", "u:{{ .u }}"),
    ]
    assert refs[1].read_only


@pytest.mark.parametrize("config", [{}, {"memory": False}, {"id": "a", "description": "x"}])
def test_stateless(config: dict[str, Any]) -> None:
    assert resolve_agent_memories(config, RESOURCES) == []


MISUSES: list[tuple[str, dict[str, Any], str]] = [
    (
        "typo in a setting",
        {"memroy": "support"},
        "memroy: unknown key 'memroy'; did you mean 'memory'? allowed: id, description, memory, "
        "memories, memory_key",
    ),
    (
        "level 1 without a key",
        {"memory": "support"},
        "memory_key: memory 'support' needs a key: add memory_key: \"...\" (a template such as "
        '"user:{{ .workflow.input.user_id }}"), or give the memory a default_key_template',
    ),
    (
        "level 1 with an unknown id",
        {"memory": "suport", "memory_key": "k"},
        "memory: unknown memory 'suport' (did you mean 'support'?); the project defines: "
        "knowledge, sql, support",
    ),
    (
        "level 1 and a list",
        {"memory": "support", "memories": ["sql"], "memory_key": "k"},
        'memories: use memory: "<id>" for one memory or memories: [...] for several, not both',
    ),
    (
        "empty id",
        {"memory": "", "memory_key": "k"},
        "memory: must name a memory id, got an empty string",
    ),
    (
        "a list in memory",
        {"memory": ["support"]},
        'memory: must be a memory id ("support"), true (with memories: [ids]) or false, got list '
        "['support']; to use several memories write memory: true and memories: [ids]",
    ),
    (
        "a number in memory",
        {"memory": 3},
        'memory: must be a memory id ("support"), true (with memories: [ids]) or false, got int 3',
    ),
    (
        "memory true alone",
        {"memory": True},
        'memories: memory: true needs memories: [<ids>]; for one memory write memory: "<id>"',
    ),
    (
        "memory true with entries",
        {"memory": True, "memories": [{"id": "sql", "key": "k"}]},
        "memories: with memory: true, memories lists ids; to give each memory its own mode or key, "
        "remove memory: true and write memories: [{id: ..., mode: read-only, key: ...}]",
    ),
    (
        "level 2 unknown id",
        {"memory": True, "memories": ["support", "nope"], "memory_key": "k"},
        "memories[1]: unknown memory 'nope'; the project defines: knowledge, sql, support",
    ),
    (
        "level 2 without key",
        {"memory": True, "memories": ["support"]},
        "memory_key: memory 'support' needs a key: add memory_key: \"...\" (a template such as "
        '"user:{{ .workflow.input.user_id }}"), or give the memory a default_key_template',
    ),
    (
        "level 2 twice the same",
        {"memory": True, "memories": ["sql", "sql"], "memory_key": "k"},
        "memories[1]: memory 'sql' is listed twice",
    ),
    (
        "ids without memory true",
        {"memories": ["support"], "memory_key": "k"},
        "memories: memories: [ids] needs memory: true (level 2); or write each entry as "
        "{id: ..., mode: ..., key: ...} (level 3)",
    ),
    (
        "memory false with a list",
        {"memory": False, "memories": ["sql"]},
        "memory: memory: false makes the agent stateless; remove memories and memory_key, or set "
        "memory: true",
    ),
    (
        "level 3 with memory_key",
        {"memories": [{"id": "sql", "key": "k"}], "memory_key": "k"},
        'memory_key: memory_key is for memory: "<id>" and memory: true; with memories: [{...}] '
        "give each entry its own key",
    ),
    (
        "level 3 bad mode",
        {"memories": [{"id": "sql", "mode": "readonly", "key": "k"}]},
        "memories[0].mode: must be read-write or read-only, got 'readonly'",
    ),
    (
        "level 3 missing id",
        {"memories": [{"mode": "read-only", "key": "k"}]},
        "memories[0].id: is required: the id of a memory resource",
    ),
    (
        "level 3 typo",
        {"memories": [{"id": "sql", "kee": "k"}]},
        "memories[0].kee: unknown key 'kee'; did you mean 'key'? allowed: id, mode, key",
    ),
    (
        "level 3 missing key",
        {"memories": [{"id": "sql"}]},
        "memories[0]: memory 'sql' needs a key: add key: \"...\" (a template such as "
        '"user:{{ .workflow.input.user_id }}"), or give the memory a default_key_template',
    ),
    (
        "level 3 mixed entries",
        {"memories": [{"id": "sql", "key": "k"}, "support"]},
        "memories[1]: write every entry as {id: ..., key: ...}, got 'support'",
    ),
    (
        "memories not a list",
        {"memories": "support"},
        "memories: must be a list of {id, mode, key} entries, got 'support'",
    ),
    (
        "empty memory_key",
        {"memory": "support", "memory_key": " "},
        "memory_key: must be a non-empty key template string",
    ),
]


@pytest.mark.parametrize(("case", "config", "message"), MISUSES, ids=[m[0] for m in MISUSES])
def test_misuse_says_what_to_write_instead(case: str, config: dict[str, Any], message: str) -> None:
    with pytest.raises(AgentConfigError) as info:
        resolve_agent_memories(config, RESOURCES)
    assert str(info.value) == message


def test_settings_must_be_a_mapping() -> None:
    with pytest.raises(AgentConfigError, match="must be a mapping"):
        resolve_agent_memories(["support"], RESOURCES)  # type: ignore[arg-type]
