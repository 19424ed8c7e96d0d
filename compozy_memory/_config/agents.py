"""Agent memory configuration: the spec's three levels, resolved to memory references.

1. ``memory: "<id>"`` with ``memory_key``: one memory, read-write.
2. ``memory: true`` with ``memories: [<ids>]`` and ``memory_key``: several, read-write, one key.
3. ``memories: [{id, mode: read-write|read-only, key}]``: each with its own mode and key.

``memory: false`` or no memory settings means a stateless agent. Where a key is left out, the
memory's ``default_key_template`` is used; if it has none, that is an error. Every key template
is compiled here, so one that cannot compile, or reads a private attribute, is refused with its
path. Every misuse is reported with what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from compozy_memory._config.schema import MemoryResource
from compozy_memory._config.templates import compile_template
from compozy_memory.errors import (
    ConfigurationError,
    TemplateError,
    format_path,
    unknown_key,
    unknown_name,
)

__all__ = [
    "AgentConfigError",
    "MemoryReference",
    "Mode",
    "configuration_level",
    "resolve_agent_memories",
]

Mode = Literal["read-write", "read-only"]
_MODES = ("read-write", "read-only")
_AGENT_KEYS = ("id", "description", "memory", "memories", "memory_key")
_ENTRY_KEYS = ("id", "mode", "key")


@dataclass(frozen=True, slots=True)
class MemoryReference:
    """An agent's use of one memory: which, how, and under which key template."""

    id: str
    mode: Mode = "read-write"
    key: str | None = None

    @property
    def read_only(self) -> bool:
        return self.mode == "read-only"


class AgentConfigError(ConfigurationError):
    """An agent's memory settings are wrong; ``path`` is the key they are about."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        self.path = path
        super().__init__(f"{format_path(path)}: {message}" if path else message)
        self.detail = message


def configuration_level(config: Mapping[str, Any]) -> int | None:
    """Which of the three levels valid settings use; None for a stateless agent."""
    memory = config.get("memory")
    if isinstance(memory, str):
        return 1
    if memory is True:
        return 2
    return 3 if memory is None and config.get("memories") else None


def resolve_agent_memories(
    config: Mapping[str, Any], resources: Mapping[str, MemoryResource]
) -> list[MemoryReference]:
    """The memories an agent uses, checked against the project's ``resources``."""
    if not isinstance(config, Mapping):
        raise AgentConfigError((), "an agent's settings must be a mapping")
    for name in config:
        if name not in _AGENT_KEYS:
            raise AgentConfigError(
                (str(name),), unknown_key(str(name), _AGENT_KEYS, list_allowed=True)
            )
    memory = config.get("memory")
    memories = config.get("memories")
    memory_key = config.get("memory_key")
    if memory_key is not None and (not isinstance(memory_key, str) or not memory_key.strip()):
        raise AgentConfigError(("memory_key",), "must be a non-empty key template string")

    if memory is False or (memory is None and memories is None):
        if memories is not None or memory_key is not None:
            raise AgentConfigError(
                ("memory",),
                "memory: false makes the agent stateless; remove memories and memory_key, "
                "or set memory: true",
            )
        return []
    if isinstance(memory, str):
        return _level_one(memory, memories, memory_key, resources)
    if memory is True:
        return _level_two(memories, memory_key, resources)
    if memory is None:
        return _level_three(memories, memory_key, resources)
    hint = (
        "; to use several memories write memory: true and memories: [ids]"
        if isinstance(memory, list)
        else ""
    )
    raise AgentConfigError(
        ("memory",),
        f'must be a memory id ("support"), true (with memories: [ids]) or false, '
        f"got {_kind(memory)}{hint}",
    )


def _level_one(
    memory: str, memories: Any, memory_key: str | None, resources: Mapping[str, MemoryResource]
) -> list[MemoryReference]:
    if memories is not None:
        raise AgentConfigError(
            ("memories",),
            'use memory: "<id>" for one memory or memories: [...] for several, not both',
        )
    if not memory.strip():
        raise AgentConfigError(("memory",), "must name a memory id, got an empty string")
    _known(("memory",), memory, resources)
    _key_for(("memory_key",), memory, memory_key, resources, "memory_key")
    _compiles(("memory_key",), memory_key)
    return [MemoryReference(memory, "read-write", memory_key)]


def _level_two(
    memories: Any, memory_key: str | None, resources: Mapping[str, MemoryResource]
) -> list[MemoryReference]:
    if not isinstance(memories, list) or not memories:
        raise AgentConfigError(
            ("memories",),
            'memory: true needs memories: [<ids>]; for one memory write memory: "<id>"',
        )
    if any(isinstance(item, Mapping) for item in memories):
        raise AgentConfigError(
            ("memories",),
            "with memory: true, memories lists ids; to give each memory its own mode or key, "
            "remove memory: true and write memories: [{id: ..., mode: read-only, key: ...}]",
        )
    _compiles(("memory_key",), memory_key)
    refs = []
    for i, item in enumerate(memories):
        if not isinstance(item, str) or not item.strip():
            raise AgentConfigError(("memories", i), f"must be a memory id, got {_kind(item)}")
        _known(("memories", i), item, resources)
        _key_for(("memory_key",), item, memory_key, resources, "memory_key")
        refs.append(MemoryReference(item, "read-write", memory_key))
    _no_duplicates(refs)
    return refs


def _level_three(
    memories: Any, memory_key: str | None, resources: Mapping[str, MemoryResource]
) -> list[MemoryReference]:
    if not isinstance(memories, list) or not memories:
        raise AgentConfigError(
            ("memories",), f"must be a list of {{id, mode, key}} entries, got {_kind(memories)}"
        )
    if all(isinstance(item, str) for item in memories):
        raise AgentConfigError(
            ("memories",),
            "memories: [ids] needs memory: true (level 2); or write each entry as "
            "{id: ..., mode: ..., key: ...} (level 3)",
        )
    if memory_key is not None:
        raise AgentConfigError(
            ("memory_key",),
            'memory_key is for memory: "<id>" and memory: true; with memories: [{...}] give '
            "each entry its own key",
        )
    refs = []
    for i, item in enumerate(memories):
        where: tuple[str | int, ...] = ("memories", i)
        if not isinstance(item, Mapping):
            raise AgentConfigError(
                where, f"write every entry as {{id: ..., key: ...}}, got {_kind(item)}"
            )
        for name in item:
            if name not in _ENTRY_KEYS:
                raise AgentConfigError(
                    (*where, str(name)), unknown_key(str(name), _ENTRY_KEYS, list_allowed=True)
                )
        memory_id = item.get("id")
        if not isinstance(memory_id, str) or not memory_id.strip():
            raise AgentConfigError((*where, "id"), "is required: the id of a memory resource")
        _known((*where, "id"), memory_id, resources)
        mode = item.get("mode", "read-write")
        if mode not in _MODES:
            raise AgentConfigError(
                (*where, "mode"), f"must be read-write or read-only, got {mode!r}"
            )
        key = item.get("key")
        if key is not None and (not isinstance(key, str) or not key.strip()):
            raise AgentConfigError((*where, "key"), "must be a non-empty key template string")
        _key_for(where, memory_id, key, resources, "key")
        _compiles((*where, "key"), key)
        refs.append(MemoryReference(memory_id, mode, key))
    _no_duplicates(refs)
    return refs


def _known(path: tuple[str | int, ...], memory_id: str, resources: Mapping[str, Any]) -> None:
    if memory_id not in resources:
        raise AgentConfigError(path, unknown_name("memory", memory_id, resources))


def _key_for(
    path: tuple[str | int, ...],
    memory_id: str,
    key: str | None,
    resources: Mapping[str, MemoryResource],
    field: str,
) -> None:
    if key is None and resources[memory_id].default_key_template is None:
        raise AgentConfigError(
            path,
            f'memory {memory_id!r} needs a key: add {field}: "..." (a template such as '
            '"user:{{ .workflow.input.user_id }}"), or give the memory a default_key_template',
        )


def _compiles(path: tuple[str | int, ...], key: str | None) -> None:
    """A key template must compile, and read no private attribute, when it is declared."""
    if key is not None:
        try:
            compile_template(key)
        except TemplateError as exc:
            raise AgentConfigError(path, str(exc)) from None


def _no_duplicates(refs: Sequence[MemoryReference]) -> None:
    seen: set[str] = set()
    for i, ref in enumerate(refs):
        if ref.id in seen:
            raise AgentConfigError(("memories", i), f"memory {ref.id!r} is listed twice")
        seen.add(ref.id)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return repr(value)
    return f"{type(value).__name__} {value!r}"
