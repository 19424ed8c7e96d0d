from __future__ import annotations

import re
from datetime import timedelta

from prometheus_client import CollectorRegistry

from compozy_memory import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    HeuristicCounter,
    Message,
    RuleBasedSummarizer,
)
from compozy_memory._metrics import FlushMetrics
from tests.anthropic_stub import Reply, anthropic_stub

COUNTER = HeuristicCounter()
NAMES = ["Maria", "Jonas", "Aiko", "Pedro", "Lena", "Omar", "Sofia", "Ivan", "Nora", "Tariq"]


def support_conversation() -> tuple[list[Message], list[str]]:
    """30 turns; every third carries a fact (an order id, a name, a date), the rest chatter."""
    messages, facts = [], []
    for i in range(30):
        if i % 3 == 1:
            order = f"#A{1000 + i}"
            facts.append(order)
            text = (
                f"Order {order} for {NAMES[i % 10]} ships on 2026-12-{i % 28 + 1:02d}. "
                "Thanks for waiting."
            )
        else:
            text = "Thanks, that sounds good to me. Let me know if anything else comes up."
        messages.append(Message(role="user" if i % 2 else "assistant", content=text, id=i + 1))
    return messages, facts


def recall(text: str, facts: list[str]) -> float:
    return sum(fact in text for fact in facts) / len(facts)


async def test_rule_based_is_the_specs() -> None:
    messages, _ = support_conversation()
    summary = await RuleBasedSummarizer(COUNTER).summarize(messages, max_tokens=200)
    assert summary.method == "rule_based"
    lines = summary.text.splitlines()
    assert lines[0] == "Earlier conversation (30 messages)."
    assert lines[1].startswith("It began with assistant:")
    assert lines[2] == "27 messages followed."
    assert [line[:5] for line in lines[3:]] == ["Then ", "Then "]


async def test_extractive_keeps_far_more_facts_than_rule_based() -> None:
    messages, facts = support_conversation()
    rule = await RuleBasedSummarizer(COUNTER).summarize(messages, max_tokens=300)
    extractive = await ExtractiveSummarizer(COUNTER).summarize(messages, max_tokens=300)
    assert COUNTER.count(extractive.text) <= 300
    assert recall(extractive.text, facts) >= 0.9
    assert recall(rule.text, facts) <= 0.2
    # In order, and without the chatter that carries no fact.
    found = re.findall(r"#A\d+", extractive.text)
    assert found == sorted(found)
    assert "sounds good" not in extractive.text


async def test_summaries_fit_their_budget() -> None:
    messages, _ = support_conversation()
    for summarizer in (RuleBasedSummarizer(COUNTER), ExtractiveSummarizer(COUNTER)):
        for budget in (20, 60, 500):
            summary = await summarizer.summarize(messages, max_tokens=budget)
            assert COUNTER.count(summary.text) <= budget


async def test_anthropic_is_asked_for_facts_and_answers() -> None:
    messages, _ = support_conversation()
    with anthropic_stub(Reply(text="Order #A1001 for Jonas ships 2026-12-02.")) as stub:
        summarizer = AnthropicSummarizer(COUNTER, base_url=stub.url, api_key="test-key")
        summary = await summarizer.summarize(messages, max_tokens=200)
        await summarizer.aclose()
    assert (summary.method, summary.fallback) == ("anthropic", None)
    assert summary.text == (
        "Key points from 30 earlier messages:\nOrder #A1001 for Jonas ships 2026-12-02."
    )
    (request,) = stub.requests
    assert request["path"] == "/v1/messages"
    assert request["body"]["model"] == "claude-haiku-4-5"
    assert request["body"]["max_tokens"] <= 200  # the header takes the rest
    prompt = request["body"]["messages"][0]["content"]
    assert "decision" in prompt
    assert "open question" in prompt
    assert "#A1004" in prompt
    headers = request["headers"]  # the SDK sends the key as x-api-key or as a bearer token
    assert "test-key" in headers.get("x-api-key", "") + headers.get("authorization", "")


async def test_anthropic_retries_429_then_succeeds() -> None:
    messages, _ = support_conversation()
    with anthropic_stub(Reply(status=429), Reply(status=529), Reply(text="ok")) as stub:
        summarizer = AnthropicSummarizer(COUNTER, base_url=stub.url, max_retries=3)
        summary = await summarizer.summarize(messages, max_tokens=100)
        await summarizer.aclose()
    assert (summary.text, summary.fallback) == ("Key points from 30 earlier messages:\nok", None)
    assert len(stub.requests) == 3


async def test_anthropic_falls_back_when_it_keeps_failing() -> None:
    messages, facts = support_conversation()
    metrics = FlushMetrics(CollectorRegistry())
    with anthropic_stub(*[Reply(status=500)] * 5) as stub:
        summarizer = AnthropicSummarizer(COUNTER, base_url=stub.url, max_retries=2, metrics=metrics)
        summary = await summarizer.summarize(messages, max_tokens=300)
        await summarizer.aclose()
    assert len(stub.requests) == 3  # one try and two retries
    assert summary.method == "extractive"
    assert summary.fallback is not None
    assert summary.fallback.startswith("anthropic: InternalServerError")
    assert recall(summary.text, facts) >= 0.9
    fallbacks = metrics.registry.get_sample_value(
        "compozy_memory_summarizer_fallbacks_total", {"method": "anthropic"}
    )
    assert fallbacks == 1


async def test_anthropic_times_out_and_falls_back() -> None:
    messages, _ = support_conversation()
    with anthropic_stub(Reply(hang=5)) as stub:
        summarizer = AnthropicSummarizer(COUNTER, base_url=stub.url, timeout=timedelta(seconds=0.5))
        summary = await summarizer.summarize(messages, max_tokens=100)
        await summarizer.aclose()
    assert summary.method == "extractive"
    assert summary.fallback == "anthropic: timed out after 0.5s"
