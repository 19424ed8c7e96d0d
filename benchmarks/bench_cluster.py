"""Append throughput on a 3-master Redis Cluster against a standalone server, in one run.

64 concurrent sessions append through :class:`~compozy_memory.MemoryInstance` (token counts
supplied), on an embedded standalone Valkey and on an embedded 3-master Valkey Cluster of the
same binary, both on this machine. On the Cluster, calls of one event-loop iteration go out
as one pipeline per owning node (``cluster batched``, the default); ``cluster unbatched``
(``batching=False``) sends each call alone, as releases before cluster batching did.

Rounds alternate between the three and the medians are compared, so drift on a busy machine
hits every side; figures are printed, never asserted. Run:
``python benchmarks/bench_cluster.py`` (options: ``--rounds``, ``--appends``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from redis.asyncio import Redis, RedisCluster

from compozy_memory import MemoryInstance, SuppliedCounter
from compozy_memory._io.translate import RedisClient
from compozy_memory.embedded import start_cluster, start_server

SESSIONS = 64


def turn(session: int, seq: int) -> dict[str, object]:
    return {
        "role": "user" if seq % 2 else "assistant",
        "content": f"session {session} turn {seq}: " + "the quick brown fox " * 6,
        "tokens": 31,
    }


async def append_round(client: RedisClient, appends: int, batching: bool) -> float:
    """Messages per second for SESSIONS concurrent sessions doing ``appends`` each."""
    run = uuid.uuid4().hex
    mems = [
        MemoryInstance.open(
            client,
            project="bench",
            key=f"{run}:{s}",
            counter=SuppliedCounter(),
            batching=batching,
        )
        for s in range(SESSIONS)
    ]

    async def session(s: int) -> None:
        for seq in range(appends):
            await mems[s].append(turn(s, seq))

    started = time.perf_counter()
    await asyncio.gather(*(session(s) for s in range(SESSIONS)))
    return SESSIONS * appends / (time.perf_counter() - started)


async def spread(cluster: RedisCluster) -> str:
    """How a round's memories fall over the masters (they must use all of them)."""
    owners: dict[str, int] = {}
    for s in range(SESSIONS):
        mem = MemoryInstance.open(cluster, project="bench", key=f"spread:{s}")
        node = cluster.get_node_from_key(mem.keys.msgs)
        assert node is not None
        owners[node.name] = owners.get(node.name, 0) + 1
    return ", ".join(str(n) for n in sorted(owners.values()))


async def main(rounds: int, appends: int) -> None:
    server = start_server()
    cluster_servers = start_cluster(3)
    standalone = Redis.from_url(server.url, max_connections=SESSIONS)
    cluster = RedisCluster.from_url(cluster_servers.url)
    try:
        await cluster.initialize()
        sides: dict[str, tuple[RedisClient, bool]] = {
            "standalone batched": (standalone, True),
            "cluster batched": (cluster, True),
            "cluster unbatched": (cluster, False),
        }
        for client, batching in sides.values():  # warm pools, functions, slot maps
            await append_round(client, 20, batching)
        rates: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name, (client, batching) in sides.items():
                rates[name].append(await append_round(client, appends, batching))
        rate = {name: statistics.median(values) for name, values in rates.items()}
        per_master = await spread(cluster)
    finally:
        await standalone.aclose()
        await cluster.aclose()
        server.stop()
        cluster_servers.stop()

    base = rate["standalone batched"]
    print(
        f"engine: embedded valkey, standalone and 3-master cluster (sessions per master: "
        f"{per_master}); {SESSIONS} sessions x {appends} appends, {rounds} alternating "
        "rounds, medians"
    )
    print()
    print("| measure | standalone batched (msg/s) | cluster (msg/s) | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    for name, goal in (("cluster batched", ">= 0.9x"), ("cluster unbatched", "-")):
        print(
            f"| append, {SESSIONS} sessions, counts supplied, {name} "
            f"| {base:,.0f} | {rate[name]:,.0f} | {rate[name] / base:.2f}x | {goal} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--appends", type=int, default=200, help="appends per session per round")
    options = parser.parse_args()
    asyncio.run(main(options.rounds, options.appends))
