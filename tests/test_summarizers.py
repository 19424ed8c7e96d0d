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
from compozy_memory._flush.material import covered_count, summary_lines
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
    spec = RuleBasedSummarizer(COUNTER, key_facts=False)
    summary = await spec.summarize(messages, max_tokens=200)
    assert summary.method == "rule_based"
    assert summary.text.splitlines() == [
        "CONVERSATION_SUMMARY: Initial context: assistant: "
        "Thanks, that sounds good to me. Let me know if anything else comes up.",
        "... [27 messages exchanged] ...",
        "Recent context: assistant: Order #A1028 for Nora ships on 2026-12-01. Thanks for waiting.",
        "user: Thanks, that sounds good to me. Let me know if anything else comes up.",
    ]


async def test_rule_based_keeps_three_messages_whole_and_summarises_none_under_three() -> None:
    turns = chat(
        1,
        ("Ana", "My flight TP1234 leaves at 3pm on Friday.\n\nGate 12."),
        ("Ben", "Noted."),
        ("Ana", "Thanks!"),
    )
    summarizer = RuleBasedSummarizer(COUNTER)
    three = (await summarizer.summarize(turns, max_tokens=200)).text
    assert three.splitlines() == [  # nothing in the middle, so no count
        "CONVERSATION_SUMMARY: Initial context: Ana: My flight TP1234 leaves at 3pm on Friday. "
        "Gate 12.",  # a message is one row: its text cannot forge another row
        "Recent context: Ben: Noted.",
        "Ana: Thanks!",
    ]
    # Under three messages the spec summarises nothing. A blank summary would be committed
    # by the flusher in their place, so they are carried whole instead.
    two = (await summarizer.summarize(turns[:2], max_tokens=200)).text
    assert two == three.rsplit("\n", 1)[0]
    one = (await summarizer.summarize(turns[:1], max_tokens=200)).text
    assert one == three.splitlines()[0]
    long = chat(1, ("Ana", "word " * 400))
    carried = (await summarizer.summarize(long, max_tokens=1000)).text
    assert carried.count("word") == 400  # whole: the 200-character cut is for condensing
    assert (await summarizer.summarize([], max_tokens=100)).text == ""


async def test_rule_based_shares_a_tight_budget_between_its_messages() -> None:
    messages, _ = support_conversation()
    text = (await RuleBasedSummarizer(COUNTER).summarize(messages, max_tokens=60)).text
    assert COUNTER.count(text) <= 60
    rows = text.splitlines()
    assert rows[1] == "... [27 messages exchanged] ..."  # the count is never cut
    assert rows[2].startswith("Recent context: assistant: Order #A1028")
    assert rows[3].startswith("user: Thanks")


async def test_extractive_keeps_far_more_facts_than_rule_based() -> None:
    messages, facts = support_conversation()
    spec = RuleBasedSummarizer(COUNTER, key_facts=False)
    rule = await spec.summarize(messages, max_tokens=300)
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


# -- rolling summaries, fact keeping ---------------------------------------------------------

HEADERS = re.compile(
    r"Key points from \d+ earlier messages:|Earlier conversation \(\d+ messages\)"
    r"|CONVERSATION_SUMMARY:"
)
LINE = re.compile(r"^(?:\[\d{4}-\d{2}-\d{2}\] )?[^:\s][^:]{0,59}: \S")


def chat(start: int, *turns: tuple[str, str]) -> list[Message]:
    return [
        Message(role="user", name=name, content=text, id=start + i)
        for i, (name, text) in enumerate(turns)
    ]


def summary_of(summary_text: str, covers: range) -> Message:
    return Message.model_validate(
        {"role": "system", "type": "summary", "content": summary_text, "covers": list(covers)}
    )


GENERATIONS = [
    chat(
        1,
        ("Mel", "Hey Caroline!"),
        ("Caroline", "We adopted a beagle last weekend! We named it Rex."),
        ("Mel", "haha yes"),
        ("Mel", "Agreed, Caroline."),
    ),
    chat(
        5,
        ("Mel", "Talk soon!"),
        ("Mel", "My order #1042 ships on May 8 with UPS."),
        ("Caroline", "Thanks Mel!"),
    ),
    chat(
        8,
        ("Caroline", "Hey Mel!"),
        ("Caroline", "I switched to the Lisbon office, my first day is 2023-06-12."),
        ("Mel", "Love that!"),
    ),
]
FACTS = ["Rex", "#1042", "Lisbon"]


async def fold_three(summarizer: RuleBasedSummarizer | ExtractiveSummarizer) -> str:
    """Summarise the first generation, fold it with the second, then that with the third."""
    first = await summarizer.summarize(GENERATIONS[0], max_tokens=300)
    folded = summary_of(first.text, range(1, 5))
    second = await summarizer.summarize([folded, *GENERATIONS[1]], max_tokens=300)
    folded = summary_of(second.text, range(1, 8))
    third = await summarizer.summarize([folded, *GENERATIONS[2]], max_tokens=300)
    return third.text


async def test_a_fold_of_a_fold_keeps_every_generation_under_one_true_header() -> None:
    text = await fold_three(ExtractiveSummarizer(COUNTER))
    assert len(HEADERS.findall(text)) == 1
    assert text.splitlines()[0] == "Key points from 10 earlier messages:"
    for fact in FACTS:
        assert fact in text
    for line in text.splitlines()[1:]:
        assert LINE.match(line), line  # every line says who
    assert [text.index(f) for f in FACTS] == sorted(text.index(f) for f in FACTS)


async def test_rule_based_folds_content_and_counts_what_it_covers() -> None:
    text = await fold_three(RuleBasedSummarizer(COUNTER, key_facts=False))
    assert len(HEADERS.findall(text)) == 1
    assert text.splitlines() == [
        # The very first message, not the previous summary's header.
        "CONVERSATION_SUMMARY: Initial context: Mel: Hey Caroline!",
        "... [7 messages exchanged] ...",  # of the 10 covered
        "Recent context: Caroline: I switched to the Lisbon office, my first day is 2023-06-12.",
        "Mel: Love that!",
    ]


async def test_rule_based_key_facts_fold_and_count_what_they_cover() -> None:
    text = await fold_three(RuleBasedSummarizer(COUNTER))
    assert len(HEADERS.findall(text)) == 1
    for fact in FACTS:  # the middle's facts survive two folds
        assert fact in text
    rows = text.splitlines()
    assert rows[2].startswith("Key facts: Caroline: We adopted a beagle")
    assert not any("Agreed" in row or "haha" in row for row in rows)  # small talk is no fact
    folded = summary_of(text, range(1, 11))
    # Every row is a message again for the next fold, and they and the count cover all 10.
    assert covered_count(folded.model_copy(update={"covers": None})) == 10
    assert "Key facts" not in "".join(line.text for line in summary_lines(folded))


# Four middle messages that a later question needs, among small talk that outweighs them.
FILLER = [
    "The weather keeps changing its mind, sun then rain then sun again today.",
    "My plants are dying, I think I overwater them every single morning.",
    "I went down a rabbit hole of cooking videos at midnight again, as usual.",
    "Honestly I could sleep for a whole week after this long stretch at work.",
]
NEEDED = {
    "person": ("Ana", "My cousin Henrik Larsen is moving in with us."),
    "date": ("Ben", "The inspection is on 2024-03-18 at 9:30."),
    "number": ("Ana", "The quote came back at 4,750 euros for 12 windows."),
    "decision": ("Ben", "We decided we will sign with the second builder."),
}


def needed_conversation() -> list[Message]:
    turns: list[tuple[str, str]] = [("Ana", "Hi Ben, quick catch-up?")]
    for n, fact in enumerate(NEEDED.values()):
        turns += [("Ana" if n % 2 else "Ben", text) for text in FILLER]
        turns.append(fact)
    turns += [("Ana", text) for text in FILLER[:2]]
    return chat(1, *turns)


async def test_rule_based_keeps_names_dates_numbers_and_decisions_ahead_of_filler() -> None:
    messages = needed_conversation()
    summarizer = RuleBasedSummarizer(COUNTER)
    spec = await RuleBasedSummarizer(COUNTER, key_facts=False).summarize(messages, max_tokens=200)
    for budget in (200, 260, 1000):
        text = (await summarizer.summarize(messages, max_tokens=budget)).text
        assert COUNTER.count(text) <= budget
        for _, fact in NEEDED.values():
            assert fact in text, (budget, text)
        for filler in FILLER:  # the first and the last two are the spec's; none is a key fact
            assert text.count(filler) == spec.text.count(filler), (budget, text)
        rows = text.splitlines()
        assert rows[0] == spec.text.splitlines()[0]
        assert rows[-2:] == spec.text.splitlines()[-2:]  # the recent context is never cut
        shown = sum(1 for _ in summary_lines(summary_of(text, range(1, len(messages) + 1))))
        assert f"[{len(messages) - shown} messages exchanged]" in text
    # Too small a budget for any fact: the spec's rows, shared out as before.
    tight = (await summarizer.summarize(messages, max_tokens=60)).text
    assert "Key facts" not in tight
    assert COUNTER.count(tight) <= 60


async def test_extractive_keeps_names_dates_numbers_and_decisions_ahead_of_filler() -> None:
    messages = needed_conversation()
    for budget in (80, 120, 400):
        text = (await ExtractiveSummarizer(COUNTER).summarize(messages, max_tokens=budget)).text
        assert COUNTER.count(text) <= budget
        for _, fact in NEEDED.values():
            assert fact in text, (budget, text)
        if budget == 80:  # just room for the facts: they come first, no small talk
            assert not any(filler in text for filler in FILLER), (budget, text)


async def test_a_commitment_or_a_spelled_out_number_is_a_key_fact() -> None:
    turns = [("Ana", "Hi Ben!")]
    turns += [("Ana", text) for text in FILLER]
    turns += [
        ("Ben", "I will send the signed lease back to the agency."),
        ("Ana", "After six interviews in three weeks they finally offered me the job."),
    ]
    turns += [("Ben", text) for text in FILLER]
    text = (await RuleBasedSummarizer(COUNTER).summarize(chat(1, *turns), max_tokens=400)).text
    assert "signed lease" in text, text
    assert "six interviews" in text, text
    facts = text.split("Key facts: ", 1)[1].split("Recent context: ", 1)[0]
    assert not any(filler in facts for filler in FILLER), text


async def test_a_previous_spec_summary_unfolds_to_its_messages() -> None:
    ours = summary_of(
        "CONVERSATION_SUMMARY: Initial context: Ana: Order #77 was refunded.\n"
        "... [9 messages exchanged] ...\n"
        "Recent context: Ben: ok\n"
        "Ana: Done.",
        range(1, 13),
    )
    # The spec's own one-line form, as another implementation writes it (no covers).
    theirs = Message.model_validate(
        {
            "role": "system",
            "type": "summary",
            "content": "CONVERSATION_SUMMARY: Initial context: Order #77 was refunded. ... "
            "[9 messages exchanged] ... Recent context: user: ok assistant: Done.",
        }
    )
    assert covered_count(theirs) == 12
    for previous in (ours, theirs):
        lines = [line.text for line in summary_lines(previous)]
        assert lines == ["Order #77 was refunded.", "ok", "Done."]
        new = chat(13, ("Ana", "My flight TP1234 leaves at 3pm on Friday."))
        for summarizer in (RuleBasedSummarizer(COUNTER), ExtractiveSummarizer(COUNTER)):
            text = (await summarizer.summarize([previous, *new], max_tokens=200)).text
            assert len(HEADERS.findall(text)) == 1, text
            assert "Order #77 was refunded." in text
            assert "[9 messages" not in text
            assert "Recent context: Recent" not in text
        rule = await RuleBasedSummarizer(COUNTER).summarize([previous, *new], max_tokens=200)
        assert "... [10 messages exchanged] ..." in rule.text  # 13 covered, 3 shown


async def test_a_legacy_nested_summary_unfolds_to_its_content() -> None:
    legacy = summary_of(
        "Earlier conversation (14 messages). It began with system: Earlier conversation "
        "(12 messages). It began with user: Order #77 was refunded. 9 messages followed. "
        "Then user: ok Then assistant: Done.",
        range(1, 15),
    )
    new = chat(15, ("Ana", "My flight TP1234 leaves at 3pm on Friday."))
    for summarizer in (RuleBasedSummarizer(COUNTER), ExtractiveSummarizer(COUNTER)):
        text = (await summarizer.summarize([legacy, *new], max_tokens=200)).text
        assert len(HEADERS.findall(text)) == 1, text
        first = text.splitlines()[0]
        assert "15 " in first or "[12 messages exchanged]" in text  # of 15: 3 are shown
        assert "Order #77 was refunded." in text
        assert "Earlier conversation (12" not in text


async def test_greetings_never_win_over_facts() -> None:
    messages = chat(
        1,
        ("Mel", "Hey Mel!"),
        ("Caroline", "Agreed, Caroline."),
        ("Mel", "haha yes"),
        ("Caroline", "Talk soon!"),
        ("Mel", "Thanks Caroline!"),
        ("Caroline", "Omg yes, so true"),
        ("Caroline", "My sister Priya is flying in from Kyoto next week."),
    )
    summarizer = ExtractiveSummarizer(COUNTER)
    small = await summarizer.summarize(messages, max_tokens=30)
    assert "Priya" in small.text
    large = await summarizer.summarize(messages, max_tokens=500)
    for phatic in ("Hey Mel", "Agreed", "haha", "Talk soon", "Thanks", "Omg"):
        assert phatic not in large.text


async def test_the_newer_of_two_near_identical_statements_is_kept() -> None:
    messages = chat(
        1,
        ("Ana", "The launch review meeting is in room Birch on Friday."),
        ("Ben", "We should bring the slides and the quarterly numbers along."),
        ("Ana", "Correction: the launch review meeting is in room Cobalt on Friday."),
    )
    text = (await ExtractiveSummarizer(COUNTER).summarize(messages, max_tokens=500)).text
    assert "Cobalt" in text
    assert "Birch" not in text


async def test_a_short_answer_keeps_its_question_and_a_tool_result_its_tool() -> None:
    messages = [
        *chat(1, ("Ana", "Where did you go for the anniversary dinner?"), ("Ben", "Cedar House.")),
        Message(
            role="assistant",
            content=[{"type": "tool_use", "id": "t1", "name": "lookup_order", "input": {}}],
            id=3,
        ),
        Message(
            role="user",
            content=[{"type": "tool_result", "tool_use_id": "t1", "content": "Order 9: UPS."}],
            id=4,
        ),
    ]
    text = (await ExtractiveSummarizer(COUNTER).summarize(messages, max_tokens=500)).text
    assert "Ben: Cedar House. (re: Where did you go for the anniversary dinner?)" in text
    assert "lookup_order result: Order 9: UPS." in text


def dated(
    day: str, *turns: tuple[str, str], start: int = 1, ts: int | None = None
) -> list[Message]:
    return [
        Message(role="user", name=n, content=t, id=start + i, ts=ts, metadata={"date": day})
        for i, (n, t) in enumerate(turns)
    ]


async def test_every_day_of_the_summary_is_marked_from_the_day_it_was_said() -> None:
    # Replayed a year later: ts is the day of the append, metadata.date the day it was said.
    replayed = 1_732_000_000_000
    messages = [
        *dated("2023-05-08", ("Ana", "I signed the lease on a flat in Leith."), ts=replayed),
        *dated("2023-05-08", ("Ben", "My cousin Teo moved to Porto."), start=2, ts=replayed),
        *dated("2023-06-02", ("Ana", "Our cat Tofu had three kittens."), start=3, ts=replayed),
    ]
    text = (await ExtractiveSummarizer(COUNTER).summarize(messages, max_tokens=500)).text
    assert text.splitlines()[1:] == [
        "[2023-05-08] Ana: I signed the lease on a flat in Leith.",
        "Ben: My cousin Teo moved to Porto.",
        "[2023-06-02] Ana: Our cat Tofu had three kittens.",
    ]
    # Without a date of its own, a message is dated by its append.
    plain = [Message(role="user", name="Ana", content="Order 1042 shipped to Leith.", id=1, ts=0)]
    text = (await ExtractiveSummarizer(COUNTER).summarize(plain, max_tokens=500)).text
    assert "[1970-01-01] Ana: Order 1042 shipped to Leith." in text


async def test_a_sentence_said_again_counts_once_at_its_newest() -> None:
    boilerplate = "The gym was empty at 6am on Monday, it felt like a secret club."
    messages = chat(
        1,
        ("Ana", f"{boilerplate} I booked the Birch room for the launch."),
        ("Ben", f"Our flight to Oaxaca leaves at 7:15. {boilerplate}"),
        ("Ana", boilerplate),
    )
    text = (await ExtractiveSummarizer(COUNTER).summarize(messages, max_tokens=500)).text
    assert text.count("secret club") == 1
    assert "Ana: The gym was empty" in text.splitlines()[-1]
    assert "I booked the Birch room" in text
    assert "Our flight to Oaxaca leaves at 7:15." in text


async def test_a_folded_answer_keeps_its_question_and_its_worth() -> None:
    summarizer = ExtractiveSummarizer(COUNTER)
    first = await summarizer.summarize(
        chat(1, ("Ana", "Where did you go on holiday in the end?"), ("Ben", "Cusco!")),
        max_tokens=500,
    )
    line = "Ben: Cusco! (re: Where did you go on holiday in the end?)"
    assert line in first.text
    # Chatter that outscores the bare line "Cusco! (re: ...)" but not an answer to a question.
    chatter = chat(3, *((NAMES[i % 10], f"Took the dog out {i + 2} times.") for i in range(12)))
    folded = await summarizer.summarize(
        [summary_of(first.text, range(1, 3)), *chatter], max_tokens=40
    )
    assert line in folded.text


async def test_extractive_never_exceeds_its_budget_on_long_conversations() -> None:
    from benchmarks.recall_data import generate
    from compozy_memory._model.tokens import default_counter

    counter = default_counter()
    conversation = generate(1)[0]
    messages = [Message.model_validate({**m, "id": i}) for i, m in enumerate(conversation.messages)]
    summarizer = ExtractiveSummarizer(counter)
    for budget in (5, 40, 300, 2000):
        summary = await summarizer.summarize(messages[:400], max_tokens=budget)
        assert counter.count(summary.text) <= budget
    # Its speed (about 12 ms for 256 messages) is a benchmark's figure
    # (benchmarks/bench_summaries.py), not a pass/fail test on a shared machine.


async def test_anthropic_is_given_the_summary_so_far_and_a_named_dated_transcript() -> None:
    previous = summary_of(
        "Key points from 12 earlier messages:\n[2023-05-01] Caroline: adopted a beagle named Rex",
        range(1, 13),
    )
    new = [
        Message(
            role="user",
            name="Mel",
            content="Actually we moved the party to Saturday.",
            metadata={"date": "2023-05-08"},
            id=13,
        )
    ]
    with anthropic_stub(
        Reply(text="Here is the updated summary:\n- Caroline: Rex\n- Mel: Sat")
    ) as stub:
        summarizer = AnthropicSummarizer(COUNTER, base_url=stub.url, api_key="k")
        summary = await summarizer.summarize([previous, *new], max_tokens=200)
        await summarizer.aclose()
    prompt = stub.requests[0]["body"]["messages"][0]["content"]
    so_far = prompt[prompt.index("Summary so far") : prompt.index("New messages")]
    assert "Caroline: adopted a beagle named Rex" in so_far
    assert "Key points from" not in prompt  # the header is not material
    assert "[2023-05-08] Mel: Actually we moved the party to Saturday." in prompt
    assert "latest value" in prompt
    assert "one fact per line" in prompt.lower()
    assert summary.text == "Key points from 13 earlier messages:\nCaroline: Rex\nMel: Sat"
