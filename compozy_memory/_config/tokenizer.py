"""``tokenizer:``: which tokens a memory counts in (an encoding, or a model's)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from compozy_memory._config.types import Duration, StrictModel, format_duration
from compozy_memory._model.tokens import encoding_for_model

__all__ = ["ENCODINGS", "Tokenizer", "TokenizerConfig"]


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


class TokenizerConfig(StrictModel):
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
