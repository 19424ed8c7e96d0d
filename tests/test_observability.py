"""The logs of retries: one warning a retried call, with its cause, and how it ended."""

from __future__ import annotations

import logging

import pytest

from compozy_memory import RetryPolicy
from compozy_memory.errors import BackendUnavailableError


async def test_a_retried_call_is_logged_once_with_its_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise BackendUnavailableError("connection refused", key="k1")
        return "ok"

    policy = RetryPolicy(attempts=5, initial_backoff=0.001, max_backoff=0.002)
    with caplog.at_level(logging.DEBUG, logger="compozy_memory.retry"):
        result = await policy.call(flaky, what="append", memory="support", key="k1")
    assert result == "ok"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    record = warnings[0]
    assert (record.__dict__["memory"], record.__dict__["key"]) == ("support", "k1")
    assert record.__dict__["operation"] == "append"
    assert "BackendUnavailableError: connection refused" in record.getMessage()
    recovered = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert [r.getMessage() for r in recovered] == ["append of k1 succeeded on attempt 3"]
