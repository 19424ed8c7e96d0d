"""Agent replicas behind a load balancer, sharing memories in one Redis.

Four OS processes play replicas of a support bot and a SQL agent. Each conversation's turns
are dealt round-robin across the replicas, as a load balancer would: the replica that gets
turn n waits until the memory shows turn n-1 (written by another process), then answers.
Every replica also adds facts to one project-wide knowledge memory, all at the same time. At
the end the demo prints each memory with the totals Redis kept and a recount.

Run: ``./scripts/demo`` (starts an embedded Valkey), or
``python examples/replicas_demo.py --url redis://localhost:6379/0``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from datetime import timedelta

from compozy_memory import MemoryInstance, MemoryPolicy, connect
from compozy_memory.embedded import start_server
from compozy_memory.scripts import RedisClient

PROJECT = "acme"
REPLICAS = 4
TURNS = 60
CONVERSATIONS = {
    "support:user-alice": "My order #1042 arrived damaged, can I get a refund?",
    "support:user-bob": "How do I reset the password on my account?",
    "sql-agent:session-7": "Which customers in Berlin ordered more than 5 times in 2026?",
}
KNOWLEDGE = "project:knowledge"
POLICY = MemoryPolicy(max_tokens=4_000, ttl=timedelta(hours=24))


def replica(url: str, cluster: bool, number: int) -> int:
    """One replica process: handle every turn the load balancer sends to ``number``."""
    return asyncio.run(_replica(url, cluster, number))


async def _replica(url: str, cluster: bool, number: int) -> int:
    client = connect(url, cluster=cluster)
    try:
        knowledge = MemoryInstance.open(client, project=PROJECT, key=KNOWLEDGE, policy=POLICY)
        counts = await asyncio.gather(
            *(converse(client, key, opening, number) for key, opening in CONVERSATIONS.items())
        )
        facts = 0
        for turn in range(number, TURNS, 10):
            await knowledge.append(
                {
                    "role": "system",
                    "type": "knowledge",
                    "priority": 1,
                    "content": f"Fact {turn}: refunds over $200 need a manager; the Berlin "
                    f"warehouse ships within {turn % 5 + 1} days.",
                    "metadata": {"replica": number},
                }
            )
            facts += 1
    finally:
        await client.aclose()
    return sum(counts) + facts


async def converse(client: RedisClient, key: str, opening: str, number: int) -> int:
    """Answer this replica's turns of one conversation, each after the turn before it."""
    mem = MemoryInstance.open(client, project=PROJECT, key=key, policy=POLICY)
    written = 0
    for turn in range(number, TURNS, REPLICAS):
        # Polling Redis on purpose: the previous turn is written by another OS process.
        while await last_turn(mem) != turn - 1:  # noqa: ASYNC110
            await asyncio.sleep(0.002)  # another replica still has the previous turn
        await mem.append_many(turn_messages(key, opening, turn, number))
        written += 2
    return written


async def last_turn(mem: MemoryInstance) -> int:
    newest = await mem.read(-1)
    if not newest or not newest[0].metadata:
        return -1
    return int(str(newest[0].metadata["turn"]))


def turn_messages(key: str, opening: str, turn: int, number: int) -> list[dict[str, object]]:
    question = opening if turn == 0 else f"Follow-up {turn} on {key.split(':')[1]}."
    answer: dict[str, object] = {
        "role": "assistant",
        "content": f"(replica {number}) Answer to turn {turn}: checked and noted.",
        "metadata": {"replica": number, "turn": turn},
    }
    if key.startswith("sql-agent") and turn % 3 == 0:
        answer["content"] = ""
        answer["tool_calls"] = [
            {
                "id": f"call_{turn}",
                "type": "function",
                "function": {
                    "name": "run_sql",
                    "arguments": json.dumps({"query": "SELECT id FROM customers LIMIT 5"}),
                },
            }
        ]
    return [
        {"role": "user", "content": question, "metadata": {"replica": number, "turn": turn}},
        answer,
    ]


async def report(url: str, cluster: bool) -> bool:
    client = connect(url, cluster=cluster, decode_responses=True)
    consistent = True
    try:
        rows = []
        for key in [*CONVERSATIONS, KNOWLEDGE]:
            mem = MemoryInstance.open(client, project=PROJECT, key=key, policy=POLICY)
            health = await mem.health()
            messages = await mem.read()
            recount = sum(m.tokens or 0 for m in messages)
            ids = [m.id or 0 for m in messages]
            replicas = sorted(
                {
                    str(m.metadata["replica"])
                    for m in messages
                    if m.metadata and "replica" in m.metadata
                }
            )
            ok = recount == health.token_count and ids == sorted(ids) and len(set(ids)) == len(ids)
            consistent &= ok
            rows.append(
                (
                    key,
                    health.message_count,
                    health.token_count,
                    recount,
                    ",".join(replicas) or "-",
                    "yes" if ok else "NO",
                )
            )
        header = ("memory", "messages", "tokens (meta)", "tokens (recount)", "replicas", "exact")
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, tuple("-" * w for w in widths), *rows]:
            print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))

        alice = MemoryInstance.open(
            client, project=PROJECT, key="support:user-alice", policy=POLICY
        )
        window = await alice.read_window(120)
        print(f"\nNewest 120-token window of support:user-alice ({len(window)} messages):")
        for m in window:
            print(f"  #{m.id:<4} {m.role:<9} {m.tokens:>3} tokens  {m.text[:60]}")
    finally:
        await client.aclose()
    return consistent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Redis or Valkey URL; default: start an embedded Valkey")
    parser.add_argument("--cluster", action="store_true", help="the URL names a cluster node")
    options = parser.parse_args()
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
    print("\nevery memory exact: totals kept in Redis match a recount" if consistent else "")
    return 0 if consistent else 1


async def _clear(url: str, cluster: bool) -> None:
    client = connect(url, cluster=cluster)
    try:
        for key in [*CONVERSATIONS, KNOWLEDGE]:
            await MemoryInstance.open(client, project=PROJECT, key=key).clear()
    finally:
        await client.aclose()


if __name__ == "__main__":
    raise SystemExit(main())
