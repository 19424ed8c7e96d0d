"""The limits one memory enforces, independent of where they were configured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from compozy_memory._model.limits import INDEX_DELAY, MAX_FACTS, MAX_INDEX_DELAY, MAX_PRIORITY
from compozy_memory.errors import ConfigurationError

__all__ = ["DEFAULT_PRIORITY", "ContextPolicy", "MemoryPolicy", "SearchPolicy", "WaitPolicy"]

# The spec's levels: 0 critical (never evicted), 1 important, 2 and up optional.
DEFAULT_PRIORITY = 2


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    """Acknowledgement to wait for after every write, on the same connection.

    ``replicas`` > 0 sends ``WAIT replicas timeout``: the write has reached that many replicas'
    memory. ``aof`` sends ``WAITAOF 1 replicas timeout`` instead: the write is fsynced to the
    primary's append-only file (and to that many replicas' files); it needs Redis or Valkey
    7.2+ with ``appendonly yes``. Neither makes replication synchronous: a failover can still
    promote a replica that missed an acknowledged write, and a timeout does not undo the
    write (see :class:`~compozy_memory.ReplicationError`).
    """

    replicas: int = 0
    aof: bool = False
    timeout: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        if not isinstance(self.replicas, int) or self.replicas < 0:
            raise ConfigurationError(f"wait replicas must be >= 0, got {self.replicas!r}")
        if self.replicas == 0 and not self.aof:
            raise ConfigurationError("wait needs replicas >= 1, or aof: true")
        if self.timeout.total_seconds() <= 0:
            raise ConfigurationError(f"wait timeout must be positive, got {self.timeout}")

    @property
    def timeout_ms(self) -> int:
        return max(1, int(self.timeout.total_seconds() * 1000))

    def command(self) -> tuple[str | int, ...]:
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)


@dataclass(frozen=True, slots=True)
class SearchPolicy:
    """BM25 over the archive: ``k1`` (term-frequency saturation), ``b`` (length
    normalisation), ``neighbour_weight`` (how much a turn's better neighbour lifts it: the
    answer often sits next to the turn with the question's words) and ``limit`` (hits a
    query brings into a context). Without ``enabled``, the memory keeps no index at all (no
    index keys, no background work): ``search()`` is refused and ``context(query=)`` leaves
    the query out. ``index_delay`` (seconds) is how long a handle's writes wait for more to
    index with in one step (fewer than ``INDEX_BATCH_DOCS``, or their bytes); a search
    reads what waits (up to ``SEARCH_TAIL_DOCS``), so it is found meanwhile. 0: a step a
    debounce after each write, as a fast stream of writes gets anyway."""

    k1: float = 1.2
    b: float = 0.75
    neighbour_weight: float = 0.5
    limit: int = 10
    enabled: bool = True
    index_delay: float = INDEX_DELAY

    def __post_init__(self) -> None:
        if not (self.k1 >= 0 and 0 <= self.b <= 1 and self.neighbour_weight >= 0):
            raise ConfigurationError("search needs k1 >= 0, 0 <= b <= 1, neighbour_weight >= 0")
        if not isinstance(self.limit, int) or not 0 <= self.limit <= 1000:
            raise ConfigurationError(f"search limit must be in [0, 1000], got {self.limit!r}")
        if not isinstance(self.enabled, bool):
            raise ConfigurationError(f"search enabled is true or false, got {self.enabled!r}")
        delay = self.index_delay
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise ConfigurationError(f"search index_delay is seconds, got {delay!r}")
        if not 0 <= delay <= MAX_INDEX_DELAY:
            raise ConfigurationError(
                f"search index_delay must be in [0, {MAX_INDEX_DELAY:g}] seconds, got {delay!r}"
            )


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """How ``context()`` shares its budget once the pinned messages are counted: at most
    ``summary_share`` of the rest for summaries, ``recall_share`` for recalled messages and
    a query's hits, the remainder for the newest messages; with ``backfill``, what every
    live message leaves unused shows the newest archived originals. With
    ``implicit_query``, a ``context()`` given no query searches for the newest user turn's
    text: what the user just asked brings back what answers it (off by default: at a small
    budget its hits take the room of the newest turns)."""

    summary_share: float = 0.5
    recall_share: float = 0.4
    backfill: bool = True
    implicit_query: bool = False

    def __post_init__(self) -> None:
        shares = (self.summary_share, self.recall_share)
        if any(not 0 <= s <= 1 for s in shares) or sum(shares) > 1:
            raise ConfigurationError(
                "summary_share and recall_share must be in [0, 1] and sum to at most 1, got "
                f"{self.summary_share} and {self.recall_share}"
            )


@dataclass(frozen=True, slots=True)
class MemoryPolicy:
    """Budgets, retention and priorities of a memory.

    ``max_tokens`` is the context budget: the append script refuses any single message larger
    than it, and totals beyond it are what flushing brings back down. ``ttl`` is set on every
    key of the instance by every write. ``archive_max`` caps how many removed originals are
    kept for recall; 0 keeps them all. ``wait`` makes every write wait for replica or AOF
    acknowledgement.
    """

    max_tokens: int | None = None
    max_messages: int | None = None
    ttl: timedelta | None = None
    archive_max: int = 10_000
    default_priority: int = DEFAULT_PRIORITY
    content_priorities: Mapping[str, int] = field(default_factory=dict)
    flush_strategy: str = "hybrid_summary"
    wait: WaitPolicy | None = None
    context: ContextPolicy = field(default_factory=ContextPolicy)
    search: SearchPolicy = field(default_factory=SearchPolicy)
    #: Session facts kept (``memory.facts``): setting one more evicts the oldest.
    facts_max: int = 200

    def __post_init__(self) -> None:
        if (
            not isinstance(self.facts_max, int)
            or isinstance(self.facts_max, bool)
            or not 1 <= self.facts_max <= MAX_FACTS
        ):
            raise ConfigurationError(
                f"facts_max must be an integer in [1, {MAX_FACTS}], got {self.facts_max!r}"
            )
        for name in ("max_tokens", "max_messages"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
        if self.ttl is not None and self.ttl.total_seconds() <= 0:
            raise ConfigurationError(f"ttl must be positive, got {self.ttl}")
        if not isinstance(self.archive_max, int) or self.archive_max < 0:
            raise ConfigurationError(f"archive_max must be >= 0, got {self.archive_max!r}")
        for name, priority in {"default": self.default_priority, **self.content_priorities}.items():
            if not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY:
                raise ConfigurationError(
                    f"priority of {name!r} must be an integer in [0, {MAX_PRIORITY}]"
                )
        object.__setattr__(
            self, "content_priorities", MappingProxyType(dict(self.content_priorities))
        )

    @property
    def ttl_ms(self) -> int:
        """The TTL in milliseconds as the scripts take it; 0 means none."""
        return 0 if self.ttl is None else max(1, int(self.ttl.total_seconds() * 1000))

    def priority_of(self, content_type: str) -> int:
        """The priority a message of ``content_type`` gets when it names none itself."""
        return self.content_priorities.get(content_type, self.default_priority)
