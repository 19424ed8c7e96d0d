"""The memory resource schema: what a project declares in YAML, validated strictly.

Unknown keys are errors everywhere. Durations are written as ``24h``, ``30s``, ``500ms``,
``1h30m`` or a number of seconds. A resource turns into the :class:`MemoryPolicy` its
instances enforce with :meth:`MemoryResource.policy`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from compozy_memory._config.compression import (
    PROFILES,
    BatchSizes,
    CompressionConfig,
    CompressionSettings,
)
from compozy_memory._config.templates import compile_template
from compozy_memory._config.tokenizer import Tokenizer, TokenizerConfig
from compozy_memory._config.types import (
    MAX_DURATION,
    Delay,
    Duration,
    Identifier,
    StrictModel,
    format_duration,
    parse_duration,
)
from compozy_memory._model.limits import INDEX_DELAY, MAX_INDEX_DELAY, MAX_PRIORITY
from compozy_memory._model.policy import ContextPolicy, MemoryPolicy, SearchPolicy, WaitPolicy
from compozy_memory.errors import TemplateError

__all__ = [
    "KNOWN_CONTEXT_WINDOWS",
    "MAX_DURATION",
    "PROFILES",
    "AnthropicSummarizerConfig",
    "BatchSizes",
    "CompressionConfig",
    "CompressionSettings",
    "ContextConfig",
    "ExtractiveSummarizerConfig",
    "FlushingStrategy",
    "LockingConfig",
    "MemoryResource",
    "PersistenceConfig",
    "PriorityBlock",
    "RuleBasedSummarizerConfig",
    "SearchConfig",
    "TokenAllocation",
    "TokenizerConfig",
    "format_duration",
    "parse_duration",
]

# Context windows of models a resource may name instead of giving context_window.
KNOWN_CONTEXT_WINDOWS: dict[str, int] = {
    "claude-": 200_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "o3": 200_000,
    "o4-mini": 200_000,
}


class PriorityBlock(StrictModel):
    priority: int = Field(ge=0, le=MAX_PRIORITY)
    content_types: list[Identifier] = Field(min_length=1)
    max_tokens: PositiveInt | None = None

    @model_validator(mode="after")
    def _limit_can_apply(self) -> PriorityBlock:
        if self.priority == 0 and self.max_tokens is not None:
            raise ValueError(
                "max_tokens on priority 0 would do nothing: priority 0 (critical) is never "
                "evicted or summarised; remove max_tokens, or give the block priority 2 or more"
            )
        return self


class TokenAllocation(StrictModel):
    short_term: float = Field(ge=0, le=1)
    long_term: float = Field(ge=0, le=1)
    system: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> TokenAllocation:
        total = self.short_term + self.long_term + self.system
        if abs(total - 1) > 1e-6:
            raise ValueError(
                f"short_term + long_term + system must be 1, got {total:g} "
                f"({self.short_term:g} + {self.long_term:g} + {self.system:g})"
            )
        return self


class FlushingStrategy(StrictModel):
    type: Literal["hybrid_summary", "fifo"] = "hybrid_summary"
    summarize_threshold: float = Field(default=0.8, gt=0, le=1)
    #: A summary's budget; None: the context's ``summary_share`` of ``max_tokens`` (at most
    #: half of it), the room ``context()`` gives summaries.
    summary_tokens: PositiveInt | None = None
    summarize_oldest_percent: int = Field(default=30, ge=1, le=100)


class WaitConfig(StrictModel):
    """``persistence.wait``: acknowledgement every write waits for (see WaitPolicy)."""

    replicas: int = Field(default=0, ge=0)
    aof: bool = False
    timeout: Duration = timedelta(seconds=1)

    @model_validator(mode="after")
    def _waits_for_something(self) -> WaitConfig:
        if self.replicas == 0 and not self.aof:
            raise ValueError("wait needs replicas >= 1, or aof: true")
        return self

    def policy(self) -> WaitPolicy:
        return WaitPolicy(replicas=self.replicas, aof=self.aof, timeout=self.timeout)


class PersistenceConfig(StrictModel):
    type: Literal["redis"] = "redis"
    ttl: Duration | None = None
    wait: WaitConfig | None = None


class LockingConfig(StrictModel):
    append_ttl: Duration = timedelta(seconds=30)
    clear_ttl: Duration = timedelta(seconds=10)
    flush_ttl: Duration = timedelta(minutes=5)


class ContextConfig(StrictModel):
    """``context:``: how ``context()`` shares the budget left after pinned messages."""

    summary_share: float = Field(default=0.5, ge=0, le=1)
    recall_share: float = Field(default=0.4, ge=0, le=1)
    backfill: bool = True
    implicit_query: bool = False

    @model_validator(mode="after")
    def _shares_fit(self) -> ContextConfig:
        if self.summary_share + self.recall_share > 1:
            raise ValueError(
                f"summary_share + recall_share must be at most 1, got "
                f"{self.summary_share:g} + {self.recall_share:g}"
            )
        return self

    def policy(self) -> ContextPolicy:
        return ContextPolicy(
            self.summary_share, self.recall_share, self.backfill, self.implicit_query
        )


class SearchConfig(StrictModel):
    """``search:``: BM25 over the archive (k1, b), how much a turn's neighbour lifts it, how
    many hits a query brings into a context, whether the memory is searchable at all
    (``enabled: false``: no index is kept), and how long a handle's writes wait for more to
    index with (``index_delay``)."""

    k1: float = Field(default=1.2, ge=0, le=10)
    b: float = Field(default=0.75, ge=0, le=1)
    neighbour_weight: float = Field(default=0.5, ge=0, le=10)
    limit: int = Field(default=10, ge=0, le=1000)
    enabled: bool = True
    index_delay: Delay = timedelta(seconds=INDEX_DELAY)

    @field_validator("index_delay")
    @classmethod
    def _delay_in_range(cls, delay: timedelta) -> timedelta:
        seconds = delay.total_seconds()
        if not 0 <= seconds <= MAX_INDEX_DELAY:
            raise ValueError(
                f"index_delay must be between 0s and {MAX_INDEX_DELAY:g}s, got {seconds}s"
            )
        return delay

    def policy(self) -> SearchPolicy:
        return SearchPolicy(
            self.k1,
            self.b,
            self.neighbour_weight,
            self.limit,
            self.enabled,
            self.index_delay.total_seconds(),
        )


class RuleBasedSummarizerConfig(StrictModel):
    type: Literal["rule_based"] = "rule_based"
    #: Fill the budget the spec's rows leave unused with the middle messages that carry
    #: names, dates, numbers and decisions (``Key facts:``); false: the spec's rows only.
    key_facts: bool = True


class ExtractiveSummarizerConfig(StrictModel):
    type: Literal["extractive"] = "extractive"


class AnthropicSummarizerConfig(StrictModel):
    type: Literal["anthropic"]
    model: str = Field(default="claude-haiku-4-5", min_length=1)
    timeout: Duration = timedelta(seconds=30)
    max_retries: int = Field(default=3, ge=0, le=10)


SummarizerConfig = Annotated[
    RuleBasedSummarizerConfig | ExtractiveSummarizerConfig | AnthropicSummarizerConfig,
    Field(discriminator="type"),
]


class MemoryResource(StrictModel):
    """One memory declared by the project."""

    resource: Literal["memory"] | None = None
    id: Identifier
    description: str = ""
    type: Literal["token_based", "message_count_based"] = "token_based"
    max_tokens: PositiveInt | None = None
    max_messages: PositiveInt | None = None
    max_context_ratio: float | None = Field(default=None, gt=0, le=1)
    model: str | None = None
    context_window: PositiveInt | None = None
    priority_blocks: list[PriorityBlock] = Field(default_factory=list)
    token_allocation: TokenAllocation | None = None
    flushing_strategy: FlushingStrategy = Field(default_factory=FlushingStrategy)
    persistence: PersistenceConfig = Field(default_factory=PersistenceConfig)
    locking: LockingConfig = Field(default_factory=LockingConfig)
    default_key_template: str | None = Field(default=None, min_length=1)
    # Extractive by default: offline, milliseconds, and it keeps facts; the spec's rule_based
    # keeps the first message and the last two (benchmarks/bench_recall.py measures both).
    summarizer: SummarizerConfig = Field(default_factory=ExtractiveSummarizerConfig)
    tokenizer: Tokenizer | None = None
    compression: CompressionConfig | None = None
    archive_max: int = Field(default=10_000, ge=0)
    context: ContextConfig = Field(default_factory=ContextConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)

    @field_validator("default_key_template")
    @classmethod
    def _template_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                compile_template(value)
            except TemplateError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _coherent(self) -> MemoryResource:
        if self.max_context_ratio is not None and self.window is None:
            raise ValueError(
                "max_context_ratio needs the model's context window: set context_window"
                + (f" (model '{self.model}' is not one we know)" if self.model else "")
            )
        if (
            self.type == "token_based"
            and self.max_tokens is None
            and self.max_context_ratio is None
        ):
            raise ValueError(
                "a token_based memory needs a budget: set max_tokens or max_context_ratio"
            )
        if self.type == "message_count_based" and self.max_messages is None:
            raise ValueError("a message_count_based memory needs max_messages")
        seen_priorities: set[int] = set()
        owner: dict[str, int] = {}
        for block in self.priority_blocks:
            if block.priority in seen_priorities:
                raise ValueError(f"priority_blocks: priority {block.priority} appears twice")
            seen_priorities.add(block.priority)
            for content_type in block.content_types:
                if content_type in owner:
                    raise ValueError(
                        f"priority_blocks: content type '{content_type}' is in priority "
                        f"{owner[content_type]} and {block.priority}; give it one priority"
                    )
                owner[content_type] = block.priority
        return self

    @property
    def window(self) -> int | None:
        """The model's context window: ``context_window``, else known from ``model``."""
        if self.context_window is not None:
            return self.context_window
        if self.model:
            for prefix, size in KNOWN_CONTEXT_WINDOWS.items():
                if self.model.startswith(prefix):
                    return size
        return None

    @property
    def effective_max_tokens(self) -> int | None:
        """The token budget: the lower of ``max_tokens`` and the ratio of the window."""
        budgets = [b for b in (self.max_tokens, self._ratio_budget) if b is not None]
        return min(budgets) if budgets else None

    @property
    def _ratio_budget(self) -> int | None:
        if self.max_context_ratio is None or self.window is None:
            return None
        return int(self.window * self.max_context_ratio)

    @property
    def content_priorities(self) -> dict[str, int]:
        return {t: b.priority for b in self.priority_blocks for t in b.content_types}

    def policy(self) -> MemoryPolicy:
        """The limits an instance of this memory enforces."""
        return MemoryPolicy(
            max_tokens=self.effective_max_tokens,
            max_messages=self.max_messages,
            ttl=self.persistence.ttl,
            archive_max=self.archive_max,
            content_priorities=self.content_priorities,
            flush_strategy=self.flushing_strategy.type,
            wait=self.persistence.wait.policy() if self.persistence.wait else None,
            context=self.context.policy(),
            search=self.search.policy(),
        )

    def summary(self) -> dict[str, Any]:
        """What ``compozy-memory validate`` prints for this resource."""
        out: dict[str, Any] = {
            "type": self.type,
            "max_tokens": self.effective_max_tokens,
            "max_messages": self.max_messages,
            "ttl": format_duration(self.persistence.ttl) if self.persistence.ttl else None,
            "flushing": f"{self.flushing_strategy.type} at "
            f"{self.flushing_strategy.summarize_threshold:.0%}, oldest "
            f"{self.flushing_strategy.summarize_oldest_percent}%",
            "summarizer": self.summarizer.type,
            "tokenizer": self.tokenizer.describe() if self.tokenizer else None,
            "key_template": self.default_key_template,
        }
        wait = self.persistence.wait
        if wait is not None:
            what = f"{wait.replicas} replica(s)" + (", AOF fsync" if wait.aof else "")
            out["wait"] = f"{what}, timeout {format_duration(wait.timeout)}"
        if self.priority_blocks:
            out["priorities"] = "; ".join(
                f"{b.priority}: {', '.join(b.content_types)}" for b in self.priority_blocks
            )
        if self.compression is not None:
            c = self.compression.resolve()
            out["compression"] = (
                f"{c.workload_profile}: L1 {c.min_l1_messages}-{c.max_l1_messages}, "
                f"{c.warning_threshold_percent}%/{c.critical_threshold_percent}%, batches "
                f"{c.batch_sizes.normal}/{c.batch_sizes.warning}/{c.batch_sizes.critical}"
            )
        return {k: v for k, v in out.items() if v is not None}
