"""Loading a project's memory configuration from YAML, with every error located.

A project is a folder with ``compozy.yaml``::

    project: acme                 # the Redis namespace: compozy:acme:memory:...
    memories: [ ... ]             # memory resources, inline (optional)
    agents: [ ... ]               # agents' memory settings (optional)

plus one memory resource per file in ``memory/*.yaml``. Every problem found in any file is
collected and reported together, each with its file, line and key path, for example
``memory/support.yaml:7: flushing_strategy.summarize_threshold: Input should be less than or
equal to 1``. Unknown keys, duplicate keys and duplicate ids are errors.

Settings that are valid but have no effect here (``locking.append_ttl``, ``locking.clear_ttl``,
``max_tokens`` on a priority-1 block) are collected as :attr:`Project.warnings`, located the
same way: ``compozy-memory validate`` prints them and ``MemoryRegistry.load`` logs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from compozy_memory._config import schema as config_models
from compozy_memory._config.agents import (
    AgentConfigError,
    MemoryReference,
    configuration_level,
    resolve_agent_memories,
)
from compozy_memory._config.schema import MemoryResource
from compozy_memory._model.keys import validate_project
from compozy_memory.errors import (
    ConfigFileError,
    ConfigProblem,
    ConfigurationError,
    format_path,
    unknown_key,
)

__all__ = ["PROJECT_FILE", "AgentEntry", "Project", "ResourceEntry", "load_project"]

PROJECT_FILE = "compozy.yaml"
_PROJECT_KEYS = ("project", "description", "memories", "agents")
Path_ = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class ResourceEntry:
    resource: MemoryResource
    file: str
    line: int


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """An agent's resolved memories; ``level`` is the spec's configuration level it used
    (None for a stateless agent)."""

    id: str
    memories: tuple[MemoryReference, ...]
    file: str
    line: int
    level: int | None


@dataclass(frozen=True)
class Project:
    """A loaded, valid project: its id, memory resources and agents."""

    root: Path
    id: str
    resources: dict[str, ResourceEntry] = field(default_factory=dict)
    agents: dict[str, AgentEntry] = field(default_factory=dict)
    #: Settings that validate but do nothing here, each located like a problem.
    warnings: list[ConfigProblem] = field(default_factory=list)


@dataclass
class _Document:
    file: str
    data: Any
    lines: dict[Path_, int]

    def line(self, path: Path_) -> int | None:
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path)


def load_project(path: str | Path) -> Project:
    """Load ``path`` (a project folder or its compozy.yaml); raise ConfigFileError listing
    every problem found."""
    given = Path(path)
    project_file = given / PROJECT_FILE if given.is_dir() else given
    root = project_file.parent
    problems: list[ConfigProblem] = []
    if not project_file.is_file():
        raise ConfigFileError([ConfigProblem(str(project_file), None, "", "no such file")])

    main = _read(project_file, root, problems)
    project_id = "invalid"
    raw_resources: list[tuple[_Document, Path_, Any]] = []
    raw_agents: list[tuple[_Document, Path_, Any]] = []
    if main is not None:
        if not isinstance(main.data, dict):
            problems.append(ConfigProblem(main.file, 1, "", "must be a mapping with project:"))
        else:
            for key in main.data:
                if key not in _PROJECT_KEYS:
                    problems.append(
                        ConfigProblem(
                            main.file,
                            main.line((key,)),
                            str(key),
                            unknown_key(str(key), _PROJECT_KEYS),
                        )
                    )
            project_id = _project_id(main, problems)
            for section, bucket in (("memories", raw_resources), ("agents", raw_agents)):
                items = main.data.get(section)
                if items is None:
                    continue
                if not isinstance(items, list):
                    problems.append(
                        ConfigProblem(main.file, main.line((section,)), section, "must be a list")
                    )
                    continue
                bucket.extend((main, (section, i), item) for i, item in enumerate(items))

    folder = root / "memory"
    for file in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        document = _read(file, root, problems)
        if document is not None:
            raw_resources.append((document, (), document.data))

    resources: dict[str, ResourceEntry] = {}
    # Memories whose own files have errors: agents may still name them without a second,
    # misleading "unknown memory" error.
    broken: dict[str, MemoryResource] = {}
    warnings: list[ConfigProblem] = []
    for document, where, data in raw_resources:
        resource = _validate(document, where, data, problems)
        if resource is None:
            if isinstance(data, dict) and isinstance(data.get("id"), str):
                template = data.get("default_key_template")
                broken[data["id"]] = MemoryResource.model_construct(
                    id=data["id"], default_key_template=template if template else "?"
                )
            continue
        warnings += _warnings(document, where, data)
        line = document.line(where) or 1
        previous = resources.get(resource.id)
        if previous is not None:
            problems.append(
                ConfigProblem(
                    document.file,
                    document.line((*where, "id")) or line,
                    format_path(where),
                    f"memory id {resource.id!r} is already defined at "
                    f"{previous.file}:{previous.line}",
                )
            )
            continue
        resources[resource.id] = ResourceEntry(resource, document.file, line)

    known = {**broken, **{k: e.resource for k, e in resources.items()}}
    agents = _agents(raw_agents, known, problems)
    if problems:
        raise ConfigFileError(problems)
    return Project(root=root, id=project_id, resources=resources, agents=agents, warnings=warnings)


#: Settings of the spec's memory resource (Compozy's memory specification: docs/design.md)
#: that are accepted and do nothing here.
_INERT_LOCKING = {
    "append_ttl": "appends take no lock here: each is one atomic Lua script",
    "clear_ttl": "clears take no lock here: a clear is one atomic Lua script",
}


def _warnings(document: _Document, where: Path_, data: dict[str, Any]) -> list[ConfigProblem]:
    """Valid settings of a valid resource ``data`` that have no effect."""
    found: list[ConfigProblem] = []

    def warn(path: Path_, message: str) -> None:
        found.append(
            ConfigProblem(document.file, document.line((*where, *path)), format_path(path), message)
        )

    locking = data.get("locking")
    if isinstance(locking, dict):
        for name, why in _INERT_LOCKING.items():
            if name in locking:
                warn(("locking", name), f"has no effect ({why}); only flush_ttl is used")
    blocks = data.get("priority_blocks")
    for i, block in enumerate(blocks if isinstance(blocks, list) else []):
        if isinstance(block, dict) and block.get("priority") == 1 and "max_tokens" in block:
            warn(
                ("priority_blocks", i, "max_tokens"),
                "has no effect: priority eviction removes priorities 2 and up only (priority 1 "
                "is still summarised past the threshold)",
            )
    return found


def _project_id(main: _Document, problems: list[ConfigProblem]) -> str:
    value = main.data.get("project")
    if value is None:
        message = "is required: the project id, used as the Redis namespace"
    else:
        try:
            return validate_project(value)
        except ConfigurationError as exc:
            message = str(exc).replace("project id ", "", 1)
    problems.append(ConfigProblem(main.file, main.line(("project",)) or 1, "project", message))
    return "invalid"


def _validate(
    document: _Document, where: Path_, data: Any, problems: list[ConfigProblem]
) -> MemoryResource | None:
    if not isinstance(data, dict):
        problems.append(
            ConfigProblem(
                document.file,
                document.line(where) or 1,
                format_path(where),
                "a memory resource must be a mapping",
            )
        )
        return None
    try:
        return MemoryResource.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            located, shown = _locate(document, where, tuple(error["loc"]))
            problems.append(
                ConfigProblem(
                    document.file, document.line(located), format_path(shown), _message(error)
                )
            )
        return None


def _agents(
    raw: list[tuple[_Document, Path_, Any]],
    resources: dict[str, MemoryResource],
    problems: list[ConfigProblem],
) -> dict[str, AgentEntry]:
    agents: dict[str, AgentEntry] = {}
    for document, where, data in raw:
        line = document.line(where) or 1
        agent_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(agent_id, str) or not agent_id:
            problems.append(
                ConfigProblem(
                    document.file,
                    line,
                    format_path((*where, "id")),
                    "is required: every agent needs an id",
                )
            )
            continue
        if agent_id in agents:
            first = agents[agent_id]
            problems.append(
                ConfigProblem(
                    document.file,
                    line,
                    format_path(where),
                    f"agent id {agent_id!r} is already defined at {first.file}:{first.line}",
                )
            )
            continue
        try:
            refs = resolve_agent_memories(data, resources)
        except AgentConfigError as exc:
            path = (*where, *exc.path)
            problems.append(
                ConfigProblem(document.file, document.line(path), format_path(path), exc.detail)
            )
            continue
        agents[agent_id] = AgentEntry(
            agent_id, tuple(refs), document.file, line, configuration_level(data)
        )
    return agents


def _read(file: Path, root: Path, problems: list[ConfigProblem]) -> _Document | None:
    shown = str(file.relative_to(root)) if file.is_relative_to(root) else str(file)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(ConfigProblem(shown, None, "", f"cannot be read: {exc}"))
        return None
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # refuses control characters at once (ReaderError)
        node = loader.get_single_node()
        if node is None:
            problems.append(ConfigProblem(shown, 1, "", "is empty"))
            return None
        lines: dict[Path_, int] = {}
        data = _build(loader, node, (), lines, shown, problems)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problems.append(ConfigProblem(shown, line, "", f"is not valid YAML: {_yaml_reason(exc)}"))
        return None
    finally:
        if loader is not None:
            loader.dispose()
    return _Document(shown, data, lines)


def _build(
    loader: yaml.SafeLoader,
    node: yaml.Node,
    path: Path_,
    lines: dict[Path_, int],
    file: str,
    problems: list[ConfigProblem],
) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        own = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
        loader.flatten_mapping(node)  # YAML merge keys (<<) come first; own keys override them
        merged = len(node.value) - own
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for index, (key_node, value_node) in enumerate(node.value):
            key = loader.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                problems.append(
                    ConfigProblem(file, line, format_path(path), f"keys must be text, got {key!r}")
                )
                continue
            if key in first_line:
                problems.append(
                    ConfigProblem(
                        file,
                        line,
                        format_path((*path, key)),
                        f"appears twice (first on line {first_line[key]})",
                    )
                )
                continue
            if index >= merged:  # merged keys may be overridden; a mapping's own may not repeat
                first_line[key] = line
            lines[(*path, key)] = line
            out[key] = _build(loader, value_node, (*path, key), lines, file, problems)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _build(loader, item, (*path, i), lines, file, problems)
            for i, item in enumerate(node.value)
        ]
    return loader.construct_object(node)


def _locate(document: _Document, where: Path_, loc: tuple[Any, ...]) -> tuple[Path_, Path_]:
    """Map a pydantic error location to (the path to find its line, the path to show).

    Pydantic puts union tags (``anthropic``) into locations; they match no YAML key and are
    dropped, except a last element, which names a missing or unknown key."""
    path: Path_ = where
    for i, part in enumerate(loc):
        candidate = (*path, part)
        if candidate in document.lines:
            path = candidate
        elif i == len(loc) - 1:
            return path, candidate
    return path, path


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        return unknown_key(name, _ALL_FIELDS)
    if kind == "missing":
        return "is required"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _models() -> Iterator[type[BaseModel]]:
    for name in config_models.__all__:
        value = getattr(config_models, name)
        if isinstance(value, type) and issubclass(value, BaseModel):
            yield value


_ALL_FIELDS = frozenset(f for model in _models() for f in model.model_fields)


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    return str(problem) if problem else str(exc).splitlines()[0]
