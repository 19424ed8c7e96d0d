"""``compression:``: Loom's workload profiles and their overrides."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from compozy_memory._config.types import StrictModel

__all__ = ["PROFILES", "BatchSizes", "CompressionConfig", "CompressionSettings"]


class BatchSizes(StrictModel):
    normal: PositiveInt
    warning: PositiveInt
    critical: PositiveInt


class CompressionSettings(StrictModel):
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


class CompressionConfig(StrictModel):
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
