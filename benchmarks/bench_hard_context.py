"""How many answers ``context(B)`` keeps without a query, on the hard benchmark's splits.

Against a real server (an embedded Valkey unless ``--url``): every message of each
conversation of ``benchmarks.hard_recall_data`` is appended in order, one ``append`` each,
to a ``MemoryManager`` memory with ``max_tokens: B``, the extractive summarizer and default
flushing, the background flusher awaited idle after every append (so each flush cuts where
the same appends always make it cut: runs repeat exactly), then a final ``flush()``; a
question counts as kept when all its answer words are in ``context(B)`` (for "when"
questions the answer is the day, which only a dated summary line can carry). The
``window`` column is the newest messages that fit ``B``.

``--setting share,tokens`` (repeatable) scores a memory whose ``context.summary_share`` is
``share`` and whose ``flushing_strategy.summary_tokens`` is ``tokens``; the default is the
library's own.

Run: ``python -m benchmarks.bench_hard_context [--split tuning] [--setting 0.5,1000]``.
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
from compozy_memory import MemoryManager, MemoryRegistry
from compozy_memory._config.schema import MemoryResource
from compozy_memory._model.policy import ContextPolicy
from compozy_memory.embedded import start_server

PARALLEL = 4
DEFAULT_SETTING = (ContextPolicy().summary_share, 500)


def resource(budget: int, share: float, tokens: int) -> MemoryResource:
    """An extractive memory of ``budget`` tokens with this summary share and size."""
    name = f"hard-{budget}-{round(share * 100)}-{tokens}"
    return MemoryResource.model_validate(
        {
            "id": name,
            "max_tokens": budget,
            "summarizer": {"type": "extractive"},
            "default_key_template": "{{ .conv }}",
            "flushing_strategy": {"summary_tokens": tokens},
            "context": {"summary_share": share, "recall_share": min(0.4, 1 - share)},
        }
    )


async def measure(
    client: Redis,
    conversations: Sequence[Conversation],
    budget: int,
    settings: Sequence[tuple[float, int]],
    run: str,
) -> tuple[Counter[str], dict[tuple[float, int], Counter[str]]]:
    """Kept answers by kind (and ``all``): for the window, and for each setting."""
    resources = [resource(budget, share, tokens) for share, tokens in settings]
    manager = MemoryManager(MemoryRegistry("bench", resources), client)
    window: Counter[str] = Counter()
    kept: dict[tuple[float, int], Counter[str]] = {s: Counter() for s in settings}
    gate = asyncio.Semaphore(PARALLEL)

    async def one(conv: Conversation, setting: tuple[float, int], res: MemoryResource) -> None:
        async with gate:
            mem = await manager.get(res.id, {"conv": f"{run}-{conv.conversation_id}"})
            flusher = mem.flusher
            assert flusher is not None
            for message in conv.messages:
                await mem.append(message)
                await flusher.wait_idle()
            await mem.flush()
            text = joined(await mem.context(budget))
            for q in conv.questions:
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
    kept: dict[tuple[float, int], Counter[str]],
) -> None:
    asked = Counter(q.kind for c in conversations for q in c.questions)
    asked["all"] = sum(asked.values())
    kinds = ["all", *sorted(k for k in asked if k != "all")]
    print(f"### {split}: share of questions whose answer is in context({budget})")
    print()
    print(
        "| summary_share, summary_tokens | "
        + " | ".join(f"{k} (n={asked[k]})" for k in kinds)
        + " |"
    )
    print("| --- |" + " ---: |" * len(kinds))
    print(f"| window only | {window['all'] / asked['all']:.3f} |" + " |" * (len(kinds) - 1))
    for (share, tokens), counts in kept.items():
        cells = " | ".join(f"{counts[k] / asked[k]:.3f}" for k in kinds)
        print(f"| {share:g}, {tokens} | {cells} |")
    print()


async def run(args: Any) -> None:
    settings = [DEFAULT_SETTING] if not args.setting else []
    for spec in args.setting:
        share, _, tokens = spec.partition(",")
        settings.append((float(share), int(tokens)))
    server = None if args.url else start_server()
    client = Redis.from_url(args.url or server.url, max_connections=16)  # type: ignore[union-attr]
    started = time.perf_counter()
    try:
        for split in args.split:
            conversations = generate(split, args.conversations)
            tag = uuid.uuid4().hex[:8]
            window, kept = await measure(client, conversations, args.budget, settings, tag)
            report(split, conversations, args.budget, window, kept)
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
        help="summary_share,summary_tokens to score (repeatable); default: the library's",
    )
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
