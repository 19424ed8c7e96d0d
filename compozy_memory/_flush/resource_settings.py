"""From a memory resource (YAML) to what flushing it takes: settings and a summarizer.

Both managers use these; so does the CLI's ``flush`` command.
"""

from __future__ import annotations

from collections.abc import Sequence

from compozy_memory._config.schema import (
    AnthropicSummarizerConfig,
    CompressionSettings,
    ExtractiveSummarizerConfig,
    MemoryResource,
    RuleBasedSummarizerConfig,
    TokenAllocation,
)
from compozy_memory._flush.anthropic_summary import AnthropicSummarizer
from compozy_memory._flush.extractive import ExtractiveSummarizer
from compozy_memory._flush.planner import EVICTABLE_PRIORITY
from compozy_memory._flush.settings import BatchSizes, Compression, FlushSettings, summary_budget
from compozy_memory._flush.summarizers import RuleBasedSummarizer, Summarizer
from compozy_memory._metrics import MemoryMetrics
from compozy_memory._model.limits import UNBOUNDED_TOKENS
from compozy_memory._model.tokens import TokenCounter
from compozy_memory.errors import ConfigurationError

__all__ = [
    "ALLOCATION_OF_CONTENT_TYPE",
    "DEFAULT_TOKEN_ALLOCATION",
    "allocation_category",
    "build_summarizer",
    "compression_settings",
    "flush_settings",
]

#: The spec's ``DefaultTokenAllocation`` (Compozy's memory specification: docs/design.md), used
#: when a resource gives none.
DEFAULT_TOKEN_ALLOCATION = TokenAllocation(short_term=0.7, long_term=0.2, system=0.1)

#: The spec's ``mapContentTypesToAllocation``: which share of ``token_allocation``
#: limits a priority block, by content type. A block's first content type listed here decides;
#: a block with none of them is ``short_term``.
ALLOCATION_OF_CONTENT_TYPE = {
    "system_prompt": "system",
    "user_profile": "system",
    "recent_context": "short_term",
    "important_facts": "short_term",
    "historical_messages": "long_term",
}


def allocation_category(content_types: Sequence[str]) -> str:
    """The ``token_allocation`` share (system, short_term, long_term) of a block's types."""
    for content_type in content_types:
        category = ALLOCATION_OF_CONTENT_TYPE.get(content_type)
        if category is not None:
            return category
    return "short_term"


def flush_settings(resource: MemoryResource) -> FlushSettings:
    """What a flush of ``resource`` aims for: its token budget and its ``max_messages``,
    both when it has both; a count-only memory flushes with no token limit.

    Priority limits: for each block of priority 2 or more (the only ones priority eviction
    touches), the lower of its ``max_tokens`` and its share of the budget under
    ``token_allocation`` (the spec's default 0.7 / 0.2 / 0.1 when none is given),
    the share chosen by the block's content types."""
    budget = resource.effective_max_tokens
    if budget is None:
        if resource.max_messages is None:
            raise ConfigurationError(f"memory {resource.id!r} has no budget to flush towards")
        budget = UNBOUNDED_TOKENS  # count only: no token limit, no allocation limits
    allocation = resource.token_allocation or DEFAULT_TOKEN_ALLOCATION
    limits: dict[int, int] = {}
    for block in resource.priority_blocks:
        if block.priority < EVICTABLE_PRIORITY:
            continue
        share = getattr(allocation, allocation_category(block.content_types))
        candidates = [int(budget * share)]
        if block.max_tokens:
            candidates.append(block.max_tokens)
        limits[block.priority] = min(candidates)
    strategy = resource.flushing_strategy
    compression = resource.compression.resolve() if resource.compression else None
    return FlushSettings(
        max_tokens=budget,
        summarize_threshold=strategy.summarize_threshold,
        summarize_oldest_percent=strategy.summarize_oldest_percent,
        summary_tokens=summary_budget(
            resource.effective_max_tokens, resource.context.summary_share, strategy.summary_tokens
        ),
        strategy=strategy.type,
        priority_limits=limits,
        compression=compression_settings(compression) if compression else None,
        max_messages=resource.max_messages,
    )


def compression_settings(settings: CompressionSettings) -> Compression:
    sizes = settings.batch_sizes
    return Compression(
        max_l1_messages=settings.max_l1_messages,
        min_l1_messages=settings.min_l1_messages,
        warning_threshold_percent=settings.warning_threshold_percent,
        critical_threshold_percent=settings.critical_threshold_percent,
        batch_sizes=BatchSizes(sizes.normal, sizes.warning, sizes.critical),
    )


def build_summarizer(
    config: RuleBasedSummarizerConfig | ExtractiveSummarizerConfig | AnthropicSummarizerConfig,
    counter: TokenCounter,
    *,
    metrics: MemoryMetrics | None = None,
) -> Summarizer:
    """The summarizer a resource's ``summarizer`` block asks for."""
    if isinstance(config, AnthropicSummarizerConfig):
        return AnthropicSummarizer(
            counter,
            model=config.model,
            timeout=config.timeout,
            max_retries=config.max_retries,
            metrics=metrics,
        )
    if isinstance(config, ExtractiveSummarizerConfig):
        return ExtractiveSummarizer(counter)
    return RuleBasedSummarizer(counter, key_facts=config.key_facts)
