"""Claude counts through the real anthropic client against the local count_tokens stub."""

from __future__ import annotations

import asyncio
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

from compozy_memory import HeuristicCounter, MemoryManager, MemoryRegistry
from compozy_memory._model.anthropic_tokens import AnthropicTokenCounter
from compozy_memory._model.tokens import counter_for_encoding, default_counter
from tests.anthropic_stub import COUNT_FRAMING, Reply, anthropic_stub

MODEL = "claude-sonnet-4-5"
# 10 words: the stub counts 10 (plus its framing); cl100k counts 14.
TEXT = "Order #1042 arrived damaged, please refund it to my card."


def counter(url: str, **options: object) -> AnthropicTokenCounter:
    return AnthropicTokenCounter(MODEL, base_url=url, api_key="test-key", **options)  # type: ignore[arg-type]


@pytest.mark.slow
async def test_exact_counts_come_from_the_api_without_its_framing() -> None:
    with anthropic_stub() as stub:
        claude = counter(stub.url)
        assert await claude.acount(TEXT) == 10
        assert await claude.acount("") == 0  # no request for nothing
        await claude.aclose()
    probe, request = stub.count_requests  # the framing is measured once, with a 1-byte text
    assert probe["body"]["messages"] == [{"role": "user", "content": "."}]
    assert request["body"] == {"model": MODEL, "messages": [{"role": "user", "content": TEXT}]}
    headers = request["headers"]
    assert "test-key" in headers.get("x-api-key", "") + headers.get("authorization", "")
    assert claude.fallbacks == 0
    assert COUNT_FRAMING > 0


async def test_counts_are_cached_by_content() -> None:
    with anthropic_stub() as stub:
        claude = counter(stub.url)
        assert await claude.acount(TEXT) == 10
        assert await claude.acount(TEXT) == 10
        assert claude.count(TEXT) == 10  # the synchronous path knows it now
        assert await claude.acount(TEXT + " ") == 10
        await claude.aclose()
    assert len(stub.count_requests) == 3  # the probe, TEXT, and the different text once
    assert claude.exact == 2


async def test_the_synchronous_count_estimates_at_once_and_learns_in_the_background() -> None:
    local = default_counter().count(TEXT)
    assert local == 14
    with anthropic_stub(counts=(Reply(hang=0.5),)) as stub:  # a slow API
        claude = counter(stub.url)
        started = time.perf_counter()
        assert claude.count(TEXT) == local  # the estimate: nothing waits for the API
        assert time.perf_counter() - started < 0.1
        assert claude.estimated == 1
        await claude.wait_idle()
        assert claude.count(TEXT) == 10  # the background count landed in the cache
        # The estimate of other texts is scaled by what the API taught: 10 per 14 cl100k.
        assert claude.ratio == 10 / 14
        other = "Thanks, the refund for order 1042 arrived today."
        assert claude.count(other) == -(-default_counter().count(other) * 10 // 14)
        await claude.aclose()
    assert claude.fallbacks == 0


async def test_a_timeout_falls_back_to_the_estimate_and_is_recorded() -> None:
    with anthropic_stub(counts=(Reply(hang=3),)) as stub:
        claude = counter(stub.url, timeout=timedelta(seconds=0.3))
        started = time.perf_counter()
        assert await claude.acount(TEXT) == 14  # cl100k, unscaled: nothing learned yet
        assert time.perf_counter() - started < 1.5
        assert (claude.fallbacks, claude.last_fallback) == (1, "timed out after 0.3s")
        # Paused after the failure: no request, no wait, the estimate again.
        sent = len(stub.count_requests)
        assert await claude.acount("something else entirely") == 3
        assert len(stub.count_requests) == sent
        assert claude.fallbacks == 2
        assert claude.count("and again") == 2  # and no background count is started
        assert not claude._pending
        await claude.aclose()


async def test_an_api_error_falls_back_then_the_api_is_asked_again_later() -> None:
    with anthropic_stub(counts=(Reply(status=500),)) as stub:
        claude = counter(stub.url, retry_after=timedelta(seconds=0.2))
        assert await claude.acount(TEXT) == 14
        assert claude.last_fallback is not None
        assert claude.last_fallback.startswith("InternalServerError")
        await asyncio.sleep(0.25)
        assert await claude.acount(TEXT) == 10  # the API is back
        await claude.aclose()
    assert claude.fallbacks == 1


# -- wiring: one counter per resource, from its tokenizer ---------------------------------


def project(tmp_path: Path) -> MemoryRegistry:
    (tmp_path / "memory").mkdir(parents=True)
    (tmp_path / "compozy.yaml").write_text("project: acme\n")
    memories = {
        "plain": "",
        "gpt4o": "tokenizer: {model: gpt-4o}\n",
        "o200k": "tokenizer: o200k_base\n",
        "gpt4": "tokenizer: {model: gpt-4-turbo}\n",
        "claude-local": "tokenizer: {model: claude-haiku-4-5}\n",
        "claude-api": textwrap.dedent("""\
            tokenizer:
              model: claude-sonnet-4-5
              method: anthropic_api
              timeout: 500ms
            """),
    }  # fmt: skip
    for name, extra in memories.items():
        (tmp_path / "memory" / f"{name}.yaml").write_text(f"id: {name}\nmax_tokens: 1000\n{extra}")
    return MemoryRegistry.load(tmp_path)


async def test_the_manager_counts_each_memory_with_its_tokenizer(tmp_path: Path) -> None:
    manager = MemoryManager(project(tmp_path), client=None)  # type: ignore[arg-type]
    o200k = counter_for_encoding("o200k_base")
    assert manager.counter_for("plain") is default_counter()
    assert manager.counter_for("gpt4") is default_counter()
    assert manager.counter_for("gpt4o") is o200k
    assert manager.counter_for("o200k") is o200k  # one counter per encoding
    assert manager.counter_for("claude-local") is default_counter()  # the documented estimate
    api = manager.counter_for("claude-api")
    assert isinstance(api, AnthropicTokenCounter)
    assert (api.model, api.timeout) == (MODEL, 0.5)
    assert manager.counter_for("claude-api") is api
    russian = "Привет, как дела? Я хотел бы вернуть заказ номер 1042."
    assert manager.counter_for("gpt4o").count(russian) != manager.counter_for("plain").count(
        russian
    )
    await manager.aclose()
    # An explicit counter still counts for every memory.
    heuristic = HeuristicCounter()
    forced = MemoryManager(project(tmp_path / "again"), None, counter=heuristic)  # type: ignore[arg-type]
    assert forced.counter_for("gpt4o") is heuristic
