"""The memory resource schema: what a project declares in YAML, validated strictly.

Unknown keys are errors everywhere. Durations are written as ``24h``, ``30s``, ``500ms``,
``1h30m`` or a number of seconds. A resource turns into the :class:`MemoryPolicy` its
instances enforce with :meth:`MemoryResource.policy`.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from compozy_memory._config.templates import compile_template
from compozy_memory._model.limits import MAX_PRIORITY
from compozy_memory._model.policy import ContextPolicy, MemoryPolicy, SearchPolicy, WaitPolicy
from compozy_memory._model.tokens import encoding_for_model
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

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The longest duration a setting may have: anything longer is a typo (Redis itself would
#: take a TTL of up to 2**63 ms, but Python's timedelta overflows far sooner).
MAX_DURATION = timedelta(days=3650)
_MAX_SECONDS = MAX_DURATION.total_seconds()


def parse_duration(value: object) -> timedelta:
    """``24h``, ``1h30m``, ``500ms``, ``10s`` or a number of seconds, as a timedelta from 1ms
    to 10 years (:data:`MAX_DURATION`); ValueError, saying why, for anything else."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError("a duration is text like '24h' or '30s', or a number of seconds")
    elif isinstance(value, int | float):
        seconds = _seconds(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(
                f"'{value}' is not a duration: write e.g. '24h', '30m', '1h30m', '500ms'"
            )
        seconds = sum(_seconds(float(n)) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is text like '24h' or '30s', or a number of seconds")
    if math.isnan(seconds):
        raise ValueError("a duration is not a number (NaN): write e.g. '24h' or '30s'")
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    if seconds > _MAX_SECONDS:  # inf too; timedelta itself overflows past 999999999 days
        raise ValueError(f"{value!r} is too long: a duration is at most 10 years (3650d)")
    if seconds < 0.001:
        raise ValueError(f"{value!r} is too short: a duration is at least 1ms")
    return timedelta(seconds=seconds)


def _seconds(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int past float's range
        return math.inf


def format_duration(value: timedelta) -> str:
    """The shortest way to write ``value`` as a duration: ``24h``, ``1h30m``, ``500ms``."""
    millis = round(value.total_seconds() * 1000)
    out = ""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, millis = divmod(millis, size)
        out += f"{count}{unit}" if count else ""
    return out + (f"{millis}ms" if millis else "") or "0s"


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
# pydantic matches ``pattern`` with Rust's regex, where "$" is the end of the text: "m\n" is
# refused (tests/test_config.py pins it), unlike Python's re.match with "$".
Identifier = Annotated[str, Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,127}$")]

# Context windows of models a resource may name instead of giving context_window.
KNOWN_CONTEXT_WINDOWS: dict[str, int] = {
    "claude-": 200_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "o3": 200_000,
    "o4-mini": 200_000,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PriorityBlock(_Strict):
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


class TokenAllocation(_Strict):
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


class FlushingStrategy(_Strict):
    type: Literal["hybrid_summary", "fifo"] = "hybrid_summary"
    summarize_threshold: float = Field(default=0.8, gt=0, le=1)
    summary_tokens: PositiveInt = 500
    summarize_oldest_percent: int = Field(default=30, ge=1, le=100)


class WaitConfig(_Strict):
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


class PersistenceConfig(_Strict):
    type: Literal["redis"] = "redis"
    ttl: Duration | None = None
    wait: WaitConfig | None = None


class LockingConfig(_Strict):
    append_ttl: Duration = timedelta(seconds=30)
    clear_ttl: Duration = timedelta(seconds=10)
    flush_ttl: Duration = timedelta(minutes=5)


class ContextConfig(_Strict):
    """``context:``: how ``context()`` shares the budget left after pinned messages."""

    summary_share: float = Field(default=0.3, ge=0, le=1)
    recall_share: float = Field(default=0.4, ge=0, le=1)
    backfill: bool = True

    @model_validator(mode="after")
    def _shares_fit(self) -> ContextConfig:
        if self.summary_share + self.recall_share > 1:
            raise ValueError(
                f"summary_share + recall_share must be at most 1, got "
                f"{self.summary_share:g} + {self.recall_share:g}"
            )
        return self

    def policy(self) -> ContextPolicy:
        return ContextPolicy(self.summary_share, self.recall_share, self.backfill)


class SearchConfig(_Strict):
    """``search:``: BM25 over the archive (k1, b), how much a turn's neighbour lifts it, and
    how many hits a query brings into a context."""

    k1: float = Field(default=1.2, ge=0, le=10)
    b: float = Field(default=0.75, ge=0, le=1)
    neighbour_weight: float = Field(default=0.5, ge=0, le=10)
    limit: int = Field(default=10, ge=0, le=1000)

    def policy(self) -> SearchPolicy:
        return SearchPolicy(self.k1, self.b, self.neighbour_weight, self.limit)


class RuleBasedSummarizerConfig(_Strict):
    type: Literal["rule_based"] = "rule_based"


class ExtractiveSummarizerConfig(_Strict):
    type: Literal["extractive"]


class AnthropicSummarizerConfig(_Strict):
    type: Literal["anthropic"]
    model: str = Field(default="claude-haiku-4-5", min_length=1)
    timeout: Duration = timedelta(seconds=30)
    max_retries: int = Field(default=3, ge=0, le=10)


SummarizerConfig = Annotated[
    RuleBasedSummarizerConfig | ExtractiveSummarizerConfig | AnthropicSummarizerConfig,
    Field(discriminator="type"),
]


ENCODINGS = ("cl100k_base", "o200k_base")


def _tokenizer_shorthand(value: object) -> object:
    """``tokenizer: o200k_base`` is ``tokenizer: {encoding: o200k_base}``."""
    if isinstance(value, str):
        if value not in ENCODINGS:
            raise ValueError(
                f"'{value}' is not an encoding we ship ({', '.join(ENCODINGS)}); "
                f"for a model write {{model: {value}}}"
            )
        return {"encoding": value}
    if not isinstance(value, dict):
        raise ValueError("write an encoding (e.g. o200k_base) or a mapping such as {model: gpt-4o}")
    return value


class TokenizerConfig(_Strict):
    """``tokenizer``: how a memory counts messages that arrive without ``tokens``.

    An ``encoding``, or a ``model`` whose encoding is known (OpenAI models) or, for Claude,
    estimated with cl100k; ``method: anthropic_api`` asks Anthropic's count_tokens API for
    Claude models (see :class:`~compozy_memory._model.anthropic_tokens.AnthropicTokenCounter`).
    """

    encoding: Literal["cl100k_base", "o200k_base"] | None = None
    model: str | None = Field(default=None, min_length=1)
    method: Literal["local", "anthropic_api"] = "local"
    timeout: Duration = timedelta(seconds=2)
    retry_after: Duration = timedelta(seconds=30)

    @model_validator(mode="after")
    def _names_one_thing(self) -> TokenizerConfig:
        if (self.encoding is None) == (self.model is None):
            raise ValueError("give an encoding or a model, exactly one of them")
        if self.method == "anthropic_api":
            if self.model is None or not self.model.startswith("claude-"):
                raise ValueError("method anthropic_api counts for a Claude model: set model")
        else:
            api_only = {"timeout", "retry_after"} & self.model_fields_set
            if api_only:
                raise ValueError(f"{' and '.join(sorted(api_only))}: only for method anthropic_api")
            if (
                self.model is not None
                and not self.model.startswith("claude-")
                and encoding_for_model(self.model) is None
            ):
                raise ValueError(
                    f"model '{self.model}' has no encoding we know: set encoding "
                    f"({' or '.join(ENCODINGS)}) instead"
                )
        return self

    @property
    def local_encoding(self) -> str:
        """The encoding that counts locally (for Claude, the estimate's)."""
        if self.encoding is not None:
            return self.encoding
        return encoding_for_model(self.model or "") or "cl100k_base"

    @property
    def estimated(self) -> bool:
        """Whether local counts are an estimate (a Claude model) rather than exact."""
        return self.model is not None and self.model.startswith("claude-")

    def describe(self) -> str:
        if self.method == "anthropic_api":
            return f"{self.model} via count_tokens (timeout {format_duration(self.timeout)})"
        if self.estimated:
            return f"{self.model}, estimated with cl100k_base"
        return self.local_encoding + (f" ({self.model})" if self.model else "")


Tokenizer = Annotated[TokenizerConfig, BeforeValidator(_tokenizer_shorthand)]


class BatchSizes(_Strict):
    normal: PositiveInt
    warning: PositiveInt
    critical: PositiveInt


class CompressionSettings(_Strict):
    """Resolved Loom-style compression settings: every value known."""

    workload_profile: Literal["data_intensive", "conversational", "balanced"]
    max_l1_messages: PositiveInt
    min_l1_messages: PositiveInt
    warning_threshold_percent: int = Field(ge=1, le=100)
    critical_threshold_percent: int = Field(ge=1, le=100)
    batch_sizes: BatchSizes


# Loom's profiles. Loom gives min_l1_messages only for balanced (4, half of max_l1); the
# others use the same rule.
PROFILES: dict[str, CompressionSettings] = {
    "data_intensive": CompressionSettings(
        workload_profile="data_intensive", max_l1_messages=5, min_l1_messages=2,
        warning_threshold_percent=50, critical_threshold_percent=70,
        batch_sizes=BatchSizes(normal=2, warning=4, critical=6),
    ),
    "conversational": CompressionSettings(
        workload_profile="conversational", max_l1_messages=12, min_l1_messages=6,
        warning_threshold_percent=70, critical_threshold_percent=85,
        batch_sizes=BatchSizes(normal=4, warning=6, critical=8),
    ),
    "balanced": CompressionSettings(
        workload_profile="balanced", max_l1_messages=8, min_l1_messages=4,
        warning_threshold_percent=60, critical_threshold_percent=75,
        batch_sizes=BatchSizes(normal=3, warning=5, critical=7),
    ),
}  # fmt: skip


class CompressionConfig(_Strict):
    """A workload profile and any overrides. Explicit values win, then the profile's, then
    balanced's."""

    workload_profile: Literal["data_intensive", "conversational", "balanced"] = "balanced"
    max_l1_messages: PositiveInt | None = None
    min_l1_messages: PositiveInt | None = None
    warning_threshold_percent: int | None = Field(default=None, ge=1, le=100)
    critical_threshold_percent: int | None = Field(default=None, ge=1, le=100)
    batch_sizes: BatchSizes | None = None

    @model_validator(mode="after")
    def _consistent(self) -> CompressionConfig:
        settings = self.resolve()
        if settings.critical_threshold_percent < settings.warning_threshold_percent:
            raise ValueError(
                f"critical_threshold_percent ({settings.critical_threshold_percent}) must be "
                f">= warning_threshold_percent ({settings.warning_threshold_percent})"
            )
        if settings.min_l1_messages > settings.max_l1_messages:
            raise ValueError(
                f"min_l1_messages ({settings.min_l1_messages}) must be <= max_l1_messages "
                f"({settings.max_l1_messages})"
            )
        return self

    def resolve(self) -> CompressionSettings:
        base = PROFILES[self.workload_profile]
        explicit = self.model_dump(exclude_none=True, exclude={"workload_profile"})
        return base.model_copy(update={k: getattr(self, k) for k in explicit})


class MemoryResource(_Strict):
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
    summarizer: SummarizerConfig = Field(default_factory=RuleBasedSummarizerConfig)
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
