"""Agent replicas behind a load balancer, sharing memories in one Redis, flushing as they go.

Four OS processes play replicas of the agents in ``examples/project``. Each conversation's
turns are dealt round-robin across the replicas, as a load balancer would: the replica that
gets turn n waits until the memory shows turn n-1 (written by another process), then
answers. The memories are configured in YAML; as they pass their thresholds they flush in the
background (extractive summaries, so the demo needs no API key), while the other replicas
keep writing. At the end the demo checks every memory from Redis alone: totals equal a
recount, and every message ever stored is either live or covered by a summary and archived.

Run: ``./scripts/demo`` (starts an embedded Valkey), or
``python examples/replicas_demo.py --url redis://localhost:6379/0``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

from compozy_memory import (
    ExtractiveSummarizer,
    HeuristicCounter,
    MemoryInstance,
    MemoryManager,
    MemoryRegistry,
    connect,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory.embedded import start_server

PROJECT_DIR = Path(__file__).resolve().parent / "project"
REPLICAS = 4
TURNS = 60
COUNTER = HeuristicCounter()
# (agent, context, opening question): one conversation each.
CONVERSATIONS: list[tuple[str, dict[str, Any], str]] = [
    ("support-bot", {"workflow": {"id": "wf-1", "input": {"user_id": "alice"}}},
     "My order #1042 arrived damaged, can I get a refund?"),
    ("support-bot", {"workflow": {"id": "wf-2", "input": {"user_id": "bob"}}},
     "How do I reset the password on my account?"),
    ("sql-analyst", {"workflow": {"id": "wf-7", "input": {}}},
     "Which customers in Berlin ordered more than 5 times in 2026?"),
]  # fmt: skip


def replica(url: str, cluster: bool, number: int) -> int:
    """One replica process: handle every turn the load balancer sends to ``number``."""
    return asyncio.run(_replica(url, cluster, number))


def manager_for(client: RedisClient) -> MemoryManager:
    return MemoryManager(
        MemoryRegistry.load(PROJECT_DIR),
        client,
        counter=COUNTER,
        summarizer=ExtractiveSummarizer(COUNTER),  # offline: no LLM call in the demo
    )


async def _replica(url: str, cluster: bool, number: int) -> int:
    client = connect(url, cluster=cluster)
    manager = manager_for(client)
    try:
        handles = [
            (await manager.for_agent(agent, context))[0] for agent, context, _ in CONVERSATIONS
        ]
        (curator,) = await manager.for_agent("knowledge-curator", {})
        counts = await asyncio.gather(
            *(
                converse(handle, opening, number)
                for handle, (_, _, opening) in zip(handles, CONVERSATIONS, strict=True)
            )
        )
        for turn in range(number, TURNS, 10):
            await curator.append(
                {
                    "role": "system",
                    "type": "knowledge",
                    "content": f"Fact {turn}: refunds over $200 need a manager; the Berlin "
                    f"warehouse ships within {turn % 5 + 1} days.",
                    "metadata": {"replica": number},
                }
            )
        for handle in handles:
            if handle.flusher is not None:
                await handle.flusher.wait_idle()
        return sum(counts)
    finally:
        await manager.aclose()
        await client.aclose()


async def converse(memory: MemoryInstance, opening: str, number: int) -> int:
    """Answer this replica's turns of one conversation, each after the turn before it."""
    written = 0
    for turn in range(number, TURNS, REPLICAS):
        # Polling Redis on purpose: the previous turn is written by another OS process.
        while await last_turn(memory) != turn - 1:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        meta: dict[str, Any] = {"replica": number, "turn": turn}
        question = opening if turn == 0 else f"Follow-up {turn}: what about order #{2000 + turn}?"
        await memory.append_many(
            [
                {"role": "user", "content": question, "metadata": meta},
                {"role": "assistant", "metadata": meta,
                 "content": f"(replica {number}) Order #{2000 + turn} ships on 2026-12-"
                            f"{turn % 28 + 1:02d}; I noted it for you."},
            ]
        )  # fmt: skip
        written += 2
    return written


async def last_turn(memory: MemoryInstance) -> int:
    newest = await memory.read(-1)
    if newest and newest[0].metadata and "turn" in newest[0].metadata:
        return int(str(newest[0].metadata["turn"]))
    # The newest message may have been folded into a summary: look at what the summary covers.
    return -1 if not newest else await _turn_from_history(memory)


async def _turn_from_history(memory: MemoryInstance) -> int:
    for message in reversed(await memory.read()):
        if message.metadata and "turn" in message.metadata:
            return int(str(message.metadata["turn"]))
    return -1


async def report(url: str, cluster: bool) -> bool:
    client = connect(url, cluster=cluster, decode_responses=True)
    manager = manager_for(client)
    consistent = True
    rows = []
    try:
        memories = [(await manager.for_agent(a, c))[0] for a, c, _ in CONVERSATIONS]
        memories.append((await manager.for_agent("knowledge-curator", {}))[0])
        for memory in memories:
            ok, row = await check(client, memory)
            consistent &= ok
            rows.append(row)
        header = ("memory", "live", "summaries", "archived", "context / budget", "exact")
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, tuple("-" * w for w in widths), *rows]:
            print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))
        alice = memories[0]
        # Summaries get at most half of a context (ContextPolicy.summary_share), and this
        # memory's YAML caps one at summary_tokens: 500: 2,000 tokens leave room for it.
        context = await alice.context(2000)
        print(f"\nWhat an LLM would get for alice within 2000 tokens ({len(context)} messages):")
        summaries = [m for m in context if m.content_type == "summary"]
        recent = [m for m in context if m.content_type != "summary"]
        shown = summaries + recent[-6:]
        for m in shown:
            if m is recent[-6] and len(recent) > 6:
                print(f"  ... {len(recent) - 6} more recent messages ...")
            text = " ".join(m.text.split())
            label = f"summary of {m.covered_count}" if m.content_type == "summary" else m.role
            print(f"  #{m.id:<4} {label:<14} {m.tokens:>3} tokens  {text[:58]}")
    finally:
        await manager.aclose()
        await client.aclose()
    return consistent


async def check(client: RedisClient, memory: MemoryInstance) -> tuple[bool, tuple[Any, ...]]:
    """Totals equal a recount; every id ever assigned is live, summarised, or a summary."""
    live = await memory.read()
    summaries = (await memory.snapshot()).summaries
    archived = [json.loads(e) for e in await client.lrange(memory.keys.archive, 0, -1)]
    health = await memory.health()
    covered = {i for s in summaries for i in s.covered_ids}
    archived_ids = {e["id"] for e in archived}
    accounted = {m.id for m in live} | {s.id for s in summaries} | covered | archived_ids
    exact = (
        sum(m.tokens or 0 for m in live) == health.token_count
        and sum(s.tokens or 0 for s in summaries) == health.summary_tokens
        and covered <= archived_ids
        and accounted == set(range(1, health.last_id + 1))
    )
    context = health.token_count + health.summary_tokens
    key = memory.key.split("{", 1)[1].rstrip("}")
    return exact, (
        key,
        len(live),
        len(summaries),
        len(archived),
        f"{context} / {health.max_tokens}",
        "yes" if exact else "NO",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Redis or Valkey URL; default: start an embedded Valkey")
    parser.add_argument("--cluster", action="store_true", help="the URL names a cluster node")
    return parser.parse_args(argv)


def main() -> int:
    options = parse_args()
    server = None
    url = options.url
    if url is None:
        server = start_server()
        url = server.url
        print(f"embedded Valkey on {url} ({server.binary})")
    try:
        asyncio.run(_clear(url, options.cluster))
        started = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(REPLICAS) as pool:
            written = pool.starmap(replica, [(url, options.cluster, n) for n in range(REPLICAS)])
        elapsed = time.perf_counter() - started
        print(f"{REPLICAS} replica processes wrote {sum(written)} messages in {elapsed:.1f}s\n")
        consistent = asyncio.run(report(url, options.cluster))
    finally:
        if server is not None:
            server.stop()
    if consistent:
        print("\nevery memory exact: totals match a recount; every message is live or summarised")
    return 0 if consistent else 1


async def _clear(url: str, cluster: bool) -> None:
    client = connect(url, cluster=cluster)
    manager = manager_for(client)
    try:
        for agent, context, _ in CONVERSATIONS:
            for memory in await manager.for_agent(agent, context):
                if not memory.read_only:
                    await memory.clear()
        for memory in await manager.for_agent("knowledge-curator", {}):
            await memory.clear()
    finally:
        await manager.aclose()
        await client.aclose()


if __name__ == "__main__":
    raise SystemExit(main())
