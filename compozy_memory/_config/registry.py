"""MemoryRegistry: the project's memory resources and agents, by id, reloadable in place."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compozy_memory._config.agents import MemoryReference, resolve_agent_memories
from compozy_memory._config.loader import AgentEntry, Project, load_project
from compozy_memory._config.schema import MemoryResource
from compozy_memory._model.keys import validate_project
from compozy_memory.errors import ConfigurationError, MemoryNotFoundError, unknown_name

__all__ = ["MemoryRegistry"]

log = logging.getLogger("compozy_memory.config")


@dataclass(frozen=True)
class _Snapshot:
    resources: dict[str, MemoryResource]
    agents: dict[str, AgentEntry] = field(default_factory=dict)
    generation: int = 0


class MemoryRegistry:
    """Memory resources by id, for one project.

    ``reload()`` reads the project again and swaps in the result in one step: callers see the
    old set or the new one, never a mix, and a failed reload keeps the old set. Handles
    already open keep the resource they were made with.
    """

    def __init__(
        self, project: str, resources: Iterable[MemoryResource] = (), *, source: Path | None = None
    ) -> None:
        self.project = validate_project(project)
        self.source = source
        by_id: dict[str, MemoryResource] = {}
        for resource in resources:
            if resource.id in by_id:
                raise ConfigurationError(f"memory id {resource.id!r} is defined twice")
            by_id[resource.id] = resource
        self._snapshot = _Snapshot(by_id)

    @classmethod
    def load(cls, path: str | Path) -> MemoryRegistry:
        """The registry of the project at ``path`` (a folder or its compozy.yaml)."""
        project = load_project(path)
        _log_warnings(project)
        registry = cls(project.id, source=Path(path))
        registry._snapshot = _from_project(project, generation=0)
        return registry

    @property
    def generation(self) -> int:
        """Increases by one with every successful reload."""
        return self._snapshot.generation

    def reload(self) -> None:
        if self.source is None:
            raise ConfigurationError("this registry was not loaded from files: nothing to reload")
        project = load_project(self.source)  # raises before anything changes
        _log_warnings(project)
        if project.id != self.project:
            raise ConfigurationError(
                f"reload changed the project id from {self.project!r} to {project.id!r}; "
                "that moves every memory to a new namespace: start a new registry instead"
            )
        self._snapshot = _from_project(project, generation=self._snapshot.generation + 1)

    def get(self, memory_id: str) -> MemoryResource:
        resources = self._snapshot.resources
        try:
            return resources[memory_id]
        except KeyError:
            raise MemoryNotFoundError(unknown_name("memory", memory_id, resources)) from None

    def exists(self, memory_id: str) -> bool:
        return memory_id in self._snapshot.resources

    def list(self) -> builtins.list[MemoryResource]:
        return [self._snapshot.resources[k] for k in sorted(self._snapshot.resources)]

    def agent(self, agent_id: str) -> tuple[MemoryReference, ...]:
        """The memories of an agent declared in the project files."""
        agents = self._snapshot.agents
        try:
            return agents[agent_id].memories
        except KeyError:
            raise MemoryNotFoundError(unknown_name("agent", agent_id, agents)) from None

    def agent_level(self, agent_id: str) -> int | None:
        """The spec's configuration level (1, 2, 3) an agent's settings use; None: stateless."""
        agents = self._snapshot.agents
        try:
            return agents[agent_id].level
        except KeyError:
            raise MemoryNotFoundError(unknown_name("agent", agent_id, agents)) from None

    def resolve(self, agent_config: Mapping[str, Any]) -> builtins.list[MemoryReference]:
        """Resolve an agent's memory settings given at run time (any of the three levels)."""
        return resolve_agent_memories(agent_config, self._snapshot.resources)


def _from_project(project: Project, *, generation: int) -> _Snapshot:
    return _Snapshot(
        {k: e.resource for k, e in project.resources.items()}, dict(project.agents), generation
    )


def _log_warnings(project: Project) -> None:
    for warning in project.warnings:
        log.warning("memory configuration: %s", warning)
