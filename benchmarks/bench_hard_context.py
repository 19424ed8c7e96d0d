"""How many answers ``context(B)`` keeps without a query, on the hard benchmark's splits.

Against a real server (an embedded Valkey unless ``--url``): every message of each
conversation of ``benchmarks.hard_recall_data`` is appended in order, one ``append`` each,
to a ``MemoryManager`` memory with ``max_tokens: B``, the extractive summarizer and default
flushing, the background flusher awaited idle after every append (so each flush cuts where
the same appends always make it cut: runs repeat exactly), then a final ``flush()``; a
question counts as kept when all its answer words are in ``context(B)`` (for "when"
questions the answer is the day, which only a dated summary line can carry). The
``window`` column is the newest messages that fit ``B``.

``--setting share,tokens[,implicit]`` (repeatable) scores a memory whose
``context.summary_share`` is ``share``, whose ``flushing_strategy.summary_tokens`` is
``tokens`` (``share``: the library's default, share x B) and whose
``context.implicit_query`` is ``implicit`` (1 or 0; 1: the newest user turn is the query of
the recall share); the default is the library's own.

``--query`` scores ``context(B, query=question)`` instead: the question given as the query
of the recall share, each on the same flushed memory.

``--ask`` scores the other case of the implicit query: the question is the newest user
turn. For each question the flushed memory is copied (``export_transcript`` and
``import_transcript``), the question appended as a user message, and ``context(B)`` taken
without a query, then the copy cleared; a question counts when its answer is in that
context.

Run: ``python -m benchmarks.bench_hard_context [--split tuning] [--setting 0.5,1000,0]
[--query | --ask]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from benchmarks.bench_recall import answered, joined, window_only
from benchmarks.hard_recall_data import SPLITS, Split, generate
from benchmarks.recall_data import Conversation
from compozy_memory import MemoryInstance, MemoryManager, MemoryRegistry
from compozy_memory._config.schema import FlushingStrategy, MemoryResource
from compozy_memory._model.policy import ContextPolicy
from compozy_memory.embedded import start_server

PARALLEL = 4
Setting = tuple[float, int | None, bool]
DEFAULT_SETTING: Setting = (
    ContextPolicy().summary_share,
    FlushingStrategy().summary_tokens,
    ContextPolicy().implicit_query,
)


def resource(budget: int, share: float, tokens: int | None, implicit: bool) -> MemoryResource:
    """An extractive memory of ``budget`` tokens with this summary share and size (None: the
    library's, which follows the share)."""
    name = f"hard-{budget}-{round(share * 100)}-{tokens or 'share'}-{int(implicit)}"
    return MemoryResource.model_validate(
        {
            "id": name,
            "max_tokens": budget,
            "summarizer": {"type": "extractive"},
            "default_key_template": "{{ .conv }}",
            "flushing_strategy": {} if tokens is None else {"summary_tokens": tokens},
            "context": {
                "summary_share": share,
                "recall_share": min(0.4, 1 - share),
                "implicit_query": implicit,
            },
        }
    )


async def asked(
    client: Redis, mem: MemoryInstance, conv: Conversation, budget: int, run: str
) -> Counter[str]:
    """Kept answers when each question is the newest user turn of a copy of ``mem``."""
    kept: Counter[str] = Counter()
    transcript = await mem.export_transcript("jsonl")
    for n, q in enumerate(conv.questions):
        copy = MemoryInstance.open(
            client, project="bench", key=f"{run}:ask:{n}", policy=mem.policy, counter=mem.counter
        )
        await copy.import_transcript(transcript)
        await copy.append({"role": "user", "name": "Asker", "content": q.question})
        if answered(q, joined(await copy.context(budget))):
            kept[q.kind] += 1
            kept["all"] += 1
        await copy.clear()
    return kept


async def measure(
    client: Redis,
    conversations: Sequence[Conversation],
    budget: int,
    settings: Sequence[Setting],
    run: str,
    ask: bool = False,
    query: bool = False,
) -> tuple[Counter[str], dict[Setting, Counter[str]]]:
    """Kept answers by kind (and ``all``): for the window, and for each setting."""
    resources = [resource(budget, *setting) for setting in settings]
    manager = MemoryManager(MemoryRegistry("bench", resources), client)
    window: Counter[str] = Counter()
    kept: dict[Setting, Counter[str]] = {s: Counter() for s in settings}
    gate = asyncio.Semaphore(PARALLEL)

    async def one(conv: Conversation, setting: Setting, res: MemoryResource) -> None:
        async with gate:
            mem = await manager.get(res.id, {"conv": f"{run}-{conv.conversation_id}"})
            flusher = mem.flusher
            assert flusher is not None
            for message in conv.messages:
                await mem.append(message)
                await flusher.wait_idle()
            await mem.flush()
            # Flushes (each one summarizer call): what a larger summary costs with an LLM.
            kept[setting]["flushes"] += (await mem.health()).flush_count
            if ask:
                where = f"{run}:{res.id}:{conv.conversation_id}"
                kept[setting].update(await asked(client, mem, conv, budget, where))
            else:
                text = "" if query else joined(await mem.context(budget))
                for q in conv.questions:
                    if query:
                        text = joined(await mem.context(budget, query=q.question))
                    if answered(q, text):
                        kept[setting][q.kind] += 1
                        kept[setting]["all"] += 1
            await mem.clear()

    async def newest(conv: Conversation) -> None:
        async with gate:
            text_kept = await window_only(client, conv, [budget], run)
            window["all"] += text_kept[budget]

    await asyncio.gather(
        *(newest(c) for c in conversations),
        *(one(c, s, r) for c in conversations for s, r in zip(settings, resources, strict=True)),
    )
    await manager.aclose()
    return window, kept


def report(
    split: Split,
    conversations: Sequence[Conversation],
    budget: int,
    window: Counter[str],
    kept: dict[Setting, Counter[str]],
    ask: bool = False,
    query: bool = False,
) -> None:
    n_asked = Counter(q.kind for c in conversations for q in c.questions)
    n_asked["all"] = sum(n_asked.values())
    kinds = ["all", *sorted(k for k in n_asked if k != "all")]
    where = ", the question the newest user turn" if ask else ""
    where = ", the question the query" if query else where
    print(f"### {split}: share of questions whose answer is in context({budget}){where}")
    print()
    print(
        "| summary_share, summary_tokens, implicit_query | "
        + " | ".join(f"{k} (n={n_asked[k]})" for k in kinds)
        + " | flushes a conversation |"
    )
    print("| --- |" + " ---: |" * (len(kinds) + 1))
    print(f"| window only | {window['all'] / n_asked['all']:.3f} |" + " |" * len(kinds))
    for (share, tokens, implicit), counts in kept.items():
        cells = " | ".join(f"{counts[k] / n_asked[k]:.3f}" for k in kinds)
        cells += f" | {counts['flushes'] / len(conversations):.1f}"
        print(f"| {share:g}, {tokens or 'share x B'}, {int(implicit)} | {cells} |")
    print()


async def run(args: Any) -> None:
    settings = [DEFAULT_SETTING] if not args.setting else []
    for spec in args.setting:
        parts = spec.split(",")
        implicit = bool(int(parts[2])) if len(parts) > 2 else True
        tokens = None if parts[1] == "share" else int(parts[1])
        settings.append((float(parts[0]), tokens, implicit))
    server = None if args.url else start_server()
    client = Redis.from_url(args.url or server.url, max_connections=16)  # type: ignore[union-attr]
    started = time.perf_counter()
    try:
        for split in args.split:
            conversations = generate(split, args.conversations)
            tag = uuid.uuid4().hex[:8]
            window, kept = await measure(
                client, conversations, args.budget, settings, tag, args.ask, args.query
            )
            report(split, conversations, args.budget, window, kept, args.ask, args.query)
    finally:
        await client.aclose()
        if server:
            server.stop()
    print(f"{time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--split", nargs="+", choices=SPLITS, default=list(SPLITS))
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--budget", type=int, default=4_000)
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help="summary_share,summary_tokens[,implicit_query] to score (repeatable); default: "
        "the library's",
    )
    parser.add_argument("--ask", action="store_true", help="the question is the newest turn")
    parser.add_argument("--query", action="store_true", help="the question is the query")
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
