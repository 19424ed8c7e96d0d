"""How many planted facts a context keeps: rolling summaries against a plain window.

No Redis. Each generated conversation (``benchmarks.recall_data``) is fed in order into a
simulated memory whose context is one rolling summary plus the live messages. Whenever the
context passes a budget ``B``, the oldest 30% of the live messages (a tool call with its
results) are summarised together with the previous summary, as the flusher does with
``fold``: ``summary_tokens = B/4``, capped by the tokens it replaces, minus the message
framing. At the end, a question counts as kept when all its answer words appear in the
context (summary text + live messages). ``window`` is the newest messages that fit ``B``.

Tokens are counted with compozy_memory's default counter (offline tiktoken, cl100k).

Run: ``python -m benchmarks.bench_summaries [--conversations 10] [--budgets 2000 4000 8000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from benchmarks.recall_data import Conversation, generate, message_text
from compozy_memory import ExtractiveSummarizer, Message, RuleBasedSummarizer
from compozy_memory._flush.summarizers import Summarizer
from compozy_memory._model.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    TokenCounter,
    count_message,
    default_counter,
)

OLDEST_PERCENT = 30
_WORD = re.compile(r"[A-Za-z0-9]+(?:[.'@:-][A-Za-z0-9]+)*")


def to_messages(conversation: Conversation, counter: TokenCounter) -> list[Message]:
    """The conversation as stored messages: ids in order, token counts filled in."""
    out = []
    for i, raw in enumerate(conversation.messages, start=1):
        message = Message.model_validate({**raw, "id": i})
        out.append(message.model_copy(update={"tokens": count_message(message, counter)}))
    return out


def words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def kept(conversation: Conversation, context_text: str) -> Counter[str]:
    """Questions whose answer words all appear in the context, in total and by kind."""
    present = words(context_text)
    hits: Counter[str] = Counter()
    for question in conversation.questions:
        wanted = {w.lower() for a in question.answer_words for w in _WORD.findall(a)}
        if wanted <= present:
            hits["all"] += 1
            hits[question.kind] += 1
    return hits


def _text(message: Message) -> str:
    return message_text(message.model_dump(include={"content"}))


def window(messages: Sequence[Message], budget: int) -> list[Message]:
    """The newest messages whose tokens fit ``budget``."""
    out: list[Message] = []
    used = 0
    for message in reversed(messages):
        if used + (message.tokens or 0) > budget:
            break
        out.append(message)
        used += message.tokens or 0
    return out[::-1]


def _batch(live: list[Message]) -> int:
    """How many of the oldest live messages to summarise: 30%, never splitting a tool call
    from its results, always leaving the newest message."""
    want = max(1, math.ceil(len(live) * OLDEST_PERCENT / 100))
    calls: set[str] = set()
    for message in live[:want]:
        calls.update(message.tool_use_ids)
        calls.difference_update(message.tool_result_ids)
    while calls and want < len(live) - 1:
        calls.difference_update(live[want].tool_result_ids)
        want += 1
    return min(want, len(live) - 1)


async def rolling(
    messages: Sequence[Message], summarizer: Summarizer, budget: int, counter: TokenCounter
) -> tuple[Message | None, list[Message], int, float]:
    """Feed ``messages`` in order, flushing past ``budget``; the final summary, the live
    messages, the number of flushes and the seconds spent summarising."""
    summary: Message | None = None
    live: list[Message] = []
    live_tokens = 0
    flushes, spent = 0, 0.0
    summary_tokens = budget // 4
    for message in messages:
        live.append(message)
        live_tokens += message.tokens or 0
        while live_tokens + (summary.tokens or 0 if summary else 0) > budget and len(live) > 1:
            take = _batch(live)
            chosen, live = live[:take], live[take:]
            replaced = sum(m.tokens or 0 for m in chosen)
            live_tokens -= replaced
            limit = max(1, min(summary_tokens, replaced) - MESSAGE_OVERHEAD_TOKENS)
            started = time.perf_counter()
            result = await summarizer.summarize(
                [*([summary] if summary else []), *chosen], max_tokens=limit
            )
            spent += time.perf_counter() - started
            flushes += 1
            before = summary.covered_ids if summary else []
            covers = sorted({*before, *(m.id or 0 for m in chosen)})
            made = Message.model_validate(
                {"role": "system", "type": "summary", "content": result.text, "covers": covers}
            )
            summary = made.model_copy(update={"tokens": count_message(made, counter)})
    return summary, live, flushes, spent


async def run(conversations: Sequence[Conversation], budgets: Sequence[int]) -> None:
    counter = default_counter()
    summarizers: dict[str, Summarizer] = {
        "rule_based": RuleBasedSummarizer(counter),
        "extractive": ExtractiveSummarizer(counter),
    }
    prepared = [(c, to_messages(c, counter)) for c in conversations]
    total = sum(len(c.questions) for c in conversations)
    kinds = sorted({q.kind for c in conversations for q in c.questions})
    by_kind: dict[tuple[int, str], Counter[str]] = {}
    rows: list[tuple[int, dict[str, float]]] = []
    timing: dict[str, list[float]] = {name: [] for name in summarizers}
    for budget in budgets:
        row: dict[str, float] = {}
        hits: Counter[str] = Counter()
        for conversation, messages in prepared:
            hits += kept(conversation, "\n".join(_text(m) for m in window(messages, budget)))
        row["window"] = hits["all"] / total
        by_kind[(budget, "window")] = hits
        for name, summarizer in summarizers.items():
            hits = Counter()
            for conversation, messages in prepared:
                summary, live, flushes, spent = await rolling(messages, summarizer, budget, counter)
                timing[name].append(1000 * spent / max(1, flushes))
                text = "\n".join([summary.text if summary else "", *(_text(m) for m in live)])
                hits += kept(conversation, text)
            row[name] = hits["all"] / total
            by_kind[(budget, name)] = hits
        rows.append((budget, row))

    print(f"{len(conversations)} conversations, {total} questions; share whose answer is kept\n")
    print(f"{'budget':>8} {'window':>8} {'rule_based':>11} {'extractive':>11}")
    for budget, row in rows:
        print(
            f"{budget:>8} {row['window']:>8.1%} {row['rule_based']:>11.1%} "
            f"{row['extractive']:>11.1%}"
        )
    counts = Counter(q.kind for c in conversations for q in c.questions)
    print("\nby question kind (kept / asked)")
    print(f"{'budget':>8} {'method':<11} " + " ".join(f"{k:>12}" for k in kinds))
    for (budget, name), hits in by_kind.items():
        cells = " ".join(f"{hits[k]:>5}/{counts[k]:<6}" for k in kinds)
        print(f"{budget:>8} {name:<11} {cells}")
    print("\nmean time per summary (ms)")
    for name, values in timing.items():
        print(f"  {name:<11} {sum(values) / max(1, len(values)):.2f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", type=int, nargs="+", default=[2000, 4000, 8000])
    args: Any = parser.parse_args(argv)
    asyncio.run(run(generate(args.conversations, args.seed), args.budgets))


if __name__ == "__main__":
    main()
