"""Redis Cluster at scale: 1,000 memories over all masters, and a resharding under load."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import RedisCluster

from compozy_memory import (
    FencedLock,
    MemoryInstance,
    MemoryPolicy,
    RetryPolicy,
)
from compozy_memory.embedded import EmbeddedCluster, start_cluster
from integration.faults import Load, consistency_problems, tally
from integration.memories import COUNTER

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = [pytest.mark.faults, pytest.mark.cluster]

PROJECT = "cl"
PATIENT = RetryPolicy(attempts=100, deadline=30.0, max_backoff=0.2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    """A cluster of its own: resharding changes which master owns what."""
    with start_cluster(3) as c:
        yield c


def owners(cluster: EmbeddedCluster) -> dict[int, int]:
    """slot -> port of the master that owns it."""
    with SyncRedis(port=cluster.nodes[0].port) as admin:
        out = {}
        for start, end, master, *_ in admin.execute_command("CLUSTER", "SLOTS"):
            for slot in range(start, end + 1):
                out[slot] = int(master[1])
        return out


@pytest.mark.slow
async def test_a_thousand_memories_over_every_master_run_every_script(
    cluster: EmbeddedCluster, record: Callable[..., None]
) -> None:
    client = RedisCluster.from_url(cluster.url)
    policy = MemoryPolicy(max_tokens=10_000, ttl=timedelta(hours=1))
    mems = [
        MemoryInstance.open(
            client, project=PROJECT, key=f"user:{i}", counter=COUNTER, policy=policy
        )
        for i in range(1000)
    ]
    calls = 0

    async def exercise(mem: MemoryInstance) -> None:
        nonlocal calls
        await mem.append_many([{"role": "user", "content": f"hello {i}"} for i in range(4)])
        await mem.append({"role": "assistant", "content": "hi"}, dedupe_key="d1")
        assert (await mem.append({"role": "assistant", "content": "hi"}, dedupe_key="d1")).duplicate
        assert len(await mem.read()) == 5
        assert len(await mem.read_window(1000)) == 5
        assert len(await mem.context()) == 5
        assert len((await mem.snapshot()).messages) == 5
        assert (await mem.health()).message_count == 5
        assert (await mem.trim(keep_messages=3)).removed_count == 2
        await mem.replace([{"role": "user", "content": "fresh"}], if_last_id=5)
        await mem.set_ttl(timedelta(minutes=30))
        lease = await FencedLock(mem.gateway, timedelta(seconds=5)).try_acquire()
        assert lease is not None
        assert await lease.release()
        assert len(await mem.recall()) == 5  # 2 trimmed, 3 replaced
        assert await mem.clear() == 1
        calls += 14

    for start in range(0, len(mems), 100):
        await asyncio.gather(*(exercise(m) for m in mems[start : start + 100]))
    slot_owner = owners(cluster)
    per_master = Counter([slot_owner[await client.cluster_keyslot(m.keys.msgs)] for m in mems])
    await client.aclose()
    assert len(per_master) == 3
    assert min(per_master.values()) > 250
    record(
        group="cluster",
        fault="1,000 memories on a 3-master cluster, every script and the lock",
        engine="valkey-cluster",
        promise="every multi-key script runs (one hash slot per memory): no CROSSSLOT",
        operations=calls,
        acknowledged=calls,
        lost=0,
        duplicated=0,
        observed="memories per master: "
        + ", ".join(str(n) for n in sorted(per_master.values()))
        + "; 0 errors",
    )


@pytest.mark.timeout(600)  # 22 s at a load of 4 on 2 cores: moving slots is the slow part
@pytest.mark.slow
async def test_resharding_under_load_loses_nothing(
    cluster: EmbeddedCluster, record: Callable[..., None]
) -> None:
    """valkey-cli moves 2,000 slots from one master to another while 8 writers append to
    300 memories; redis-py follows MOVED and ASK, TRYAGAIN is retried."""
    client = RedisCluster.from_url(cluster.url)
    mems = [
        MemoryInstance.open(
            client, project=PROJECT, key=f"load:{i}", counter=COUNTER, retry=PATIENT
        )
        for i in range(300)
    ]
    before = owners(cluster)
    replies_before = redirections(cluster)
    source, target = cluster.nodes[0], cluster.nodes[1]
    slots = [await client.cluster_keyslot(m.keys.msgs) for m in mems]
    moved_keys = sum(1 for slot in slots if before[slot] == source.port)
    stop = asyncio.Event()
    load = Load(lambda w, s: mems[(w * 37 + s) % len(mems)], stop=stop)
    writers = load.start(8)
    await asyncio.sleep(0.3)
    started = time.monotonic()
    reshard = await asyncio.to_thread(
        subprocess.run,
        [
            str(source.cli()),
            "--cluster",
            "reshard",
            f"127.0.0.1:{source.port}",
            "--cluster-from",
            node_id(source.port),
            "--cluster-to",
            node_id(target.port),
            "--cluster-slots",
            "2000",
            "--cluster-yes",
            "--cluster-pipeline",
            "20",
        ],
        capture_output=True,
        timeout=120,
    )
    resharding_s = time.monotonic() - started
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.gather(*writers)
    assert reshard.returncode == 0, reshard.stdout[-2000:] + reshard.stderr[-2000:]
    after = owners(cluster)
    redirected = redirections(cluster) - replies_before
    slots_moved = sum(1 for s, port in after.items() if before[s] != port)
    t = await tally(client, [m.keys for m in mems], load.attempted, load.acknowledged)
    for mem in mems[:50]:
        assert await consistency_problems(client, mem.keys) == []
    await client.aclose()
    assert slots_moved == 2000
    assert redirected["MOVED"] > 0  # the load really met the migration
    assert (t.lost, t.duplicated, load.failed) == (0, 0, 0)
    record(
        group="cluster",
        fault="valkey-cli --cluster reshard of 2,000 slots during load (8 writers, 300 memories)",
        engine="valkey-cluster",
        promise="nothing lost, nothing duplicated (MOVED/ASK followed, TRYAGAIN retried)",
        tally=t,
        observed=f"{slots_moved} slots moved in {resharding_s:.1f} s; {moved_keys} of the "
        f"memories started on the source master; the servers answered "
        f"{redirected['MOVED']} MOVED, {redirected['ASK']} ASK, {redirected['TRYAGAIN']} "
        f"TRYAGAIN; {load.failed} calls failed",
    )


def redirections(cluster: EmbeddedCluster) -> Counter[str]:
    """MOVED, ASK and TRYAGAIN replies sent so far, summed over the masters."""
    total: Counter[str] = Counter()
    for node in cluster.nodes:
        with SyncRedis(port=node.port, decode_responses=True) as admin:
            for name, stats in admin.info("errorstats").items():
                kind = name.removeprefix("errorstat_")
                if kind in ("MOVED", "ASK", "TRYAGAIN"):
                    total[kind] += int(stats["count"])
    return total


def node_id(port: int) -> str:
    with SyncRedis(port=port, decode_responses=True) as admin:
        return str(admin.execute_command("CLUSTER", "MYID"))
