"""A primary with one replica: what WAIT / WAITAOF after each write does and does not give."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.crc import key_slot

from compozy_memory import (
    AppendResult,
    ConfigurationError,
    ConflictError,
    ExtractiveSummarizer,
    FencedLock,
    Flusher,
    FlushMetrics,
    FlushSettings,
    MemoryInstance,
    MemoryPolicy,
    Message,
    ReplicationError,
    ScriptError,
    Summary,
    WaitPolicy,
    connect,
)
from compozy_memory.embedded import (
    EmbeddedCluster,
    EmbeddedServer,
    find_binary,
    start_cluster,
    start_server,
)
from integration.engines import EngineSpec, require_redis7, spec_for
from integration.faults import FaultProxy, consistency_problems
from integration.memories import COUNTER, memory

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults

ONE_REPLICA = WaitPolicy(replicas=1, timeout=timedelta(milliseconds=300))


@dataclass
class Pair:
    """A primary and a replica that replicates through a FaultProxy (the link can stall)."""

    primary: EmbeddedServer
    replica: EmbeddedServer
    link: FaultProxy

    def pause_replica(self) -> None:
        """Stall the replication link: the replica receives nothing until resumed."""
        self.link.stall()

    def resume_replica(self) -> None:
        self.link.resume()

    def stop(self) -> None:
        self.link.close()
        self.replica.stop()
        self.primary.stop()


def start_pair(binary: Path, *, aof: bool = False) -> Pair:
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if aof else []
    primary = start_server(binary, extra_args=["--repl-diskless-sync-delay", "0", *persistence])
    link = FaultProxy(primary.port)
    replica = start_server(
        binary, extra_args=["--replicaof", "127.0.0.1", str(link.port), *persistence]
    )
    pair = Pair(primary, replica, link)
    try:
        wait_until_replicating(pair, aof=aof)
    except BaseException:
        pair.stop()
        raise
    return pair


def wait_until_replicating(pair: Pair, *, aof: bool, within: float = 30.0) -> None:
    """Return once a write on the primary is acknowledged by the replica, as the tests expect.

    The link being up is not enough: the replica may still be loading its initial sync, and
    with appendonly it then rewrites its AOF, during which WAITAOF counts it out
    (``replicas 0/1`` on a busy machine). So wait for the sync and the rewrite to finish,
    then for one write to be acknowledged by WAIT (and by WAITAOF with appendonly).
    """
    deadline = time.monotonic() + within
    state: dict[str, object] = {}
    with SyncRedis(port=pair.primary.port) as primary, SyncRedis(port=pair.replica.port) as replica:
        while time.monotonic() < deadline:
            state = {**replica.info("replication"), **replica.info("persistence")}
            settled = (
                state.get("master_link_status") == "up"
                and state.get("master_sync_in_progress") == 0
                and state.get("loading") == 0
                and (
                    not aof
                    or (
                        state.get("aof_enabled") == 1
                        and state.get("aof_rewrite_in_progress") == 0
                        and state.get("aof_rewrite_scheduled") == 0
                    )
                )
            )
            if settled:
                primary.set("pair:replicating", "1")
                acked = primary.execute_command("WAIT", 1, 200) >= 1
                if acked and aof:
                    acked = primary.execute_command("WAITAOF", 0, 1, 200)[1] >= 1
                if acked:
                    return
            time.sleep(0.05)
    raise AssertionError(f"the replica was not replicating after {within:.0f} s: {state}")


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = start_pair(find_binary("valkey-server"))
    yield p
    p.stop()


async def test_a_waited_write_is_on_the_replica_when_the_call_returns(pair: Pair) -> None:
    primary = Redis.from_url(pair.primary.url)
    replica = Redis.from_url(pair.replica.url)
    mem = memory(primary, wait=ONE_REPLICA)
    for i in range(50):
        await mem.append({"role": "user", "content": f"m{i}"})
        assert await replica.llen(mem.keys.msgs) == i + 1  # read at once, no polling
    await mem.replace([{"role": "user", "content": "fresh"}])
    assert await replica.lrange(mem.keys.msgs, 0, -1) == await primary.lrange(mem.keys.msgs, 0, -1)
    await primary.aclose()
    await replica.aclose()


async def test_a_missing_acknowledgement_is_a_typed_error_and_a_safe_retry(
    pair: Pair, record: Callable[..., None]
) -> None:
    primary = Redis.from_url(pair.primary.url)
    mem = memory(primary, wait=ONE_REPLICA)
    await mem.append({"role": "user", "content": "before"})
    pair.pause_replica()
    started = time.monotonic()
    with pytest.raises(ReplicationError) as info:
        await mem.append({"role": "user", "content": "unacked"}, dedupe_key="turn-2")
    waited = time.monotonic() - started
    assert (info.value.required, info.value.acknowledged) == (1, 0)
    assert "not undone" in str(info.value)
    assert isinstance(info.value.result, AppendResult)  # what the primary stored
    assert info.value.result.first_id == 2
    assert 0.25 < waited < 2.0
    # The write is applied on the primary; the error says it was not replicated in time.
    assert await primary.llen(mem.keys.msgs) == 2
    pair.resume_replica()
    again = await mem.append({"role": "user", "content": "unacked"}, dedupe_key="turn-2")
    assert again.duplicate
    replica = Redis.from_url(pair.replica.url)
    assert await replica.llen(mem.keys.msgs) == 2
    assert await consistency_problems(primary, mem.keys) == []
    await primary.aclose()
    await replica.aclose()
    record(
        group="replicas",
        fault="replica paused during a write with wait: replicas=1",
        engine="valkey",
        promise="ReplicationError within the timeout; the write stays on the primary; a "
        "retry with the same dedupe key waits again without writing twice",
        operations=3,
        acknowledged=2,
        lost=0,
        duplicated=0,
        observed=f"ReplicationError after {waited * 1000:.0f} ms (timeout 300 ms), "
        "retry returned duplicate=True and the replica had both messages",
    )


async def flushed_memory(primary: Redis, summarizer: ExtractiveSummarizer) -> MemoryInstance:
    """A memory that waits for one replica, over its budget, with a flusher attached."""
    policy = MemoryPolicy(max_tokens=400, wait=ONE_REPLICA)
    mem = memory(primary, policy=policy)
    mem.attach_flusher(
        Flusher(
            mem.gateway,
            FlushSettings(max_tokens=400, summary_tokens=60),
            summarizer,
            COUNTER,
            metrics=FlushMetrics(CollectorRegistry()),
        )
    )
    await mem.append_many([{"role": "user", "content": f"order {i} " * 20} for i in range(12)])
    return mem


class PausingSummarizer(ExtractiveSummarizer):
    """Stalls the replication link while it summarises: after the lock, before the commit."""

    def __init__(self, pair: Pair) -> None:
        super().__init__(COUNTER)
        self.pair = pair

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        self.pair.pause_replica()
        return await super().summarize(messages, max_tokens=max_tokens)


async def test_a_flush_without_replica_acknowledgement_still_reports_its_commit(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """The commit happened on the primary; the flusher says so instead of failing. (The
    replica stops after the lock was taken: a lock it does not acknowledge gives no lease.)"""
    primary = Redis.from_url(pair.primary.url)
    mem = await flushed_memory(primary, PausingSummarizer(pair))
    result = await mem.flush()
    assert result.outcome == "summarised"
    assert (await mem.health()).summaries == 1
    assert "committed without replica acknowledgement" in caplog.text
    pair.resume_replica()
    await primary.aclose()


async def test_a_flush_whose_lock_the_replica_misses_writes_nothing(pair: Pair) -> None:
    primary = Redis.from_url(pair.primary.url)
    mem = await flushed_memory(primary, ExtractiveSummarizer(COUNTER))
    pair.pause_replica()
    with pytest.raises(ReplicationError, match="no lease"):
        await mem.flush()
    assert (await mem.health()).summaries == 0
    assert await primary.exists(mem.keys.lock) == 0
    pair.resume_replica()
    assert (await mem.flush()).outcome == "summarised"
    await primary.aclose()


async def test_asking_for_more_replicas_than_exist_fails_with_the_counts(pair: Pair) -> None:
    primary = Redis.from_url(pair.primary.url)
    mem = memory(primary, wait=WaitPolicy(replicas=2, timeout=timedelta(milliseconds=100)))
    with pytest.raises(ReplicationError) as info:
        await mem.append({"role": "user", "content": "x"})
    assert (info.value.required, info.value.acknowledged) == (2, 1)
    await primary.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("wait", [None, ONE_REPLICA], ids=["no-wait", "wait-1-replica"])
async def test_failover_to_a_replica_that_missed_writes(
    wait: WaitPolicy | None, record: Callable[..., None]
) -> None:
    """The replica stops applying; the primary takes writes, then dies; the replica is
    promoted. Without wait the acknowledged writes are gone; with wait none of them had been
    acknowledged (each raised ReplicationError), so nothing acknowledged is lost."""
    p = start_pair(find_binary("valkey-server"))
    try:
        primary = Redis.from_url(p.primary.url)
        mem = memory(primary, wait=wait)
        acked: set[str] = set()
        for i in range(10):
            await mem.append({"role": "user", "content": f"synced {i}"})
            acked.add(f"synced {i}")
        # Let the first ten reach the replica (without wait nothing else makes sure of it),
        # so that exactly the writes made during the stall are at stake.
        replica = Redis.from_url(p.replica.url)
        for _ in range(1000):  # up to 10 s
            if await replica.llen(mem.keys.msgs) >= 10:
                break
            await asyncio.sleep(0.01)
        await replica.aclose()
        p.pause_replica()
        refused = 0
        for i in range(10):
            try:
                await mem.append({"role": "user", "content": f"during pause {i}"})
            except ReplicationError:
                refused += 1
            else:
                acked.add(f"during pause {i}")
        await primary.aclose()
        p.primary.process.kill()
        p.primary.process.wait()
        p.link.close()  # what the stalled link held dies with the primary
        promoted = Redis.from_url(p.replica.url)
        await promoted.replicaof("NO", "ONE")
        survived = {m.content for m in await MemoryInstance(promoted, mem.keys).read()}
        lost = len(acked - survived)
        await promoted.aclose()
    finally:
        p.stop()
    if wait is None:
        assert lost == 10  # asynchronous replication: acknowledged writes can be lost
    else:
        assert (lost, refused) == (0, 10)
    record(
        group="replicas",
        fault="failover to a replica that stopped applying, "
        + ("no wait" if wait is None else "wait: replicas=1"),
        engine="valkey",
        promise="none: asynchronous replication can lose acknowledged writes"
        if wait is None
        else "a write acknowledged without error is on the replica",
        operations=20,
        acknowledged=len(acked),
        lost=lost,
        duplicated=0,
        observed=f"{refused} writes raised ReplicationError; {lost} acknowledged writes "
        "missing after promotion",
    )


@pytest.mark.slow
@pytest.mark.parametrize("aof", [False, True], ids=["wait", "waitaof"])
async def test_a_lock_epoch_survives_failover_when_wait_is_set(
    aof: bool, record: Callable[..., None]
) -> None:
    """A lease is handed out only once the replica has its epoch: after the replica is
    promoted, the next holder gets a newer epoch, never one a holder on the old primary has
    (before, the acquisition was not waited: 1, 2, then 2 again on the promoted replica)."""
    wait = WaitPolicy(replicas=1, timeout=timedelta(seconds=2), aof=aof)
    p = start_pair(find_binary("valkey-server"), aof=aof)
    handed: list[int] = []
    refused = 0
    try:
        primary = Redis.from_url(p.primary.url)
        mem = memory(primary, wait=wait)
        lock = FencedLock(mem.gateway, ttl=timedelta(seconds=30))
        first = await lock.try_acquire()
        assert first is not None
        handed.append(first.epoch)
        await first.release()
        await mem.append({"role": "user", "content": "the release is on the replica too"})
        p.pause_replica()
        missed: ReplicationError | None = None
        try:
            second = await lock.try_acquire()
        except ReplicationError as exc:
            missed = exc
        else:
            assert second is not None
            handed.append(second.epoch)
        if missed is not None:
            refused += 1
            assert "no lease" in str(missed)
            assert missed.result == (2, first.incarnation)
            assert await primary.exists(mem.keys.lock) == 0  # given back at once
        await primary.aclose()
        p.primary.process.kill()
        p.primary.process.wait()
        p.link.close()
        promoted = Redis.from_url(p.replica.url)
        await promoted.replicaof("NO", "ONE")
        after = FencedLock(MemoryInstance(promoted, mem.keys, counter=COUNTER).gateway)
        third = await after.try_acquire()
        assert third is not None
        handed.append(third.epoch)
        await promoted.aclose()
    finally:
        p.stop()
    assert len(handed) == len(set(handed)), f"two leases share an epoch: {handed}"
    assert refused == 1
    record(
        group="adversarial-2",
        item=4,
        fault="failover after a flush lock was taken on a primary whose replica had stopped, "
        + ("wait: replicas=1, aof" if aof else "wait: replicas=1"),
        engine="valkey",
        promise="a lock acquisition is waited like a write: no two flush leases share a "
        "fencing epoch across a failover",
        operations=len(handed) + refused,
        acknowledged=len(handed),
        lost=0,
        duplicated=len(handed) - len(set(handed)),  # epochs handed out twice
        observed=f"epochs handed out {handed}; the acquisition the replica missed raised "
        "ReplicationError and gave its lock back",
    )


async def test_waitaof_fsyncs_before_returning() -> None:
    p = start_pair(find_binary("valkey-server"), aof=True)
    try:
        primary = Redis.from_url(p.primary.url)
        # What is checked is that the append waits for the fsync, not how fast: a busy machine
        # took over the default second to fsync a replica that had just synced.
        wait = WaitPolicy(replicas=1, aof=True, timeout=timedelta(seconds=15))
        mem = memory(primary, wait=wait)
        result = await mem.append({"role": "user", "content": "durable"})
        assert result.first_id == 1
        await primary.aclose()
    finally:
        p.stop()


async def test_waitaof_on_a_server_without_it_is_a_clear_error(
    standalone: EngineSpec,
) -> None:
    """Redis 7.0 has no WAITAOF, and no server takes it without appendonly."""
    client = connect(standalone.url)
    assert isinstance(client, Redis)
    mem = memory(client, wait=WaitPolicy(aof=True))
    with pytest.raises(ScriptError, match="WAITAOF"):
        await mem.append({"role": "user", "content": "x"})
    await client.aclose()


@pytest.mark.cluster
async def test_wait_needs_a_standalone_client(valkey_cluster: EmbeddedCluster) -> None:
    client = spec_for("valkey-cluster", valkey_cluster).client()
    with pytest.raises(ConfigurationError, match="standalone"):
        memory(client, wait=ONE_REPLICA)
    await client.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("engine_name", ["valkey", "redis7"])
@pytest.mark.parametrize("wait", [None, ONE_REPLICA], ids=["no-wait", "wait-1-replica"])
async def test_a_compare_and_set_read_before_a_failover_is_refused(
    engine_name: str, wait: WaitPolicy | None, record: Callable[..., None]
) -> None:
    """An editor reads the memory on the primary (ids 1-10, the last two never reach the
    stalled replica); the primary dies and the replica is promoted; other writers bring
    last_id back to 10 with other messages. The editor's replace(if_last_id=10,
    if_incarnation=...) must not land: the promoted server has a new replication id, so the
    memory's incarnation changed (lua/lib/deltas.lua: lineage). With wait the last two writes
    raised ReplicationError, but the editor read them all the same."""
    binary = find_binary("valkey-server") if engine_name == "valkey" else Path(require_redis7())
    p = start_pair(binary)
    key = f"conv:{uuid.uuid4().hex}"
    try:
        primary = Redis.from_url(p.primary.url)
        writer = memory(primary, key, wait=wait)
        await writer.append_many([{"role": "user", "content": f"kept {i}"} for i in range(8)])
        replica = Redis.from_url(p.replica.url)
        for _ in range(1000):  # without wait nothing else makes sure the eight are there
            if await replica.llen(writer.keys.msgs) >= 8:
                break
            await asyncio.sleep(0.01)
        await replica.aclose()
        p.pause_replica()
        try:
            await writer.append_many([{"role": "user", "content": f"lost {i}"} for i in range(2)])
        except ReplicationError:
            assert wait is not None
        editor = memory(primary, key)
        seen = await editor.snapshot()
        assert seen.last_id == 10
        await primary.aclose()
        p.primary.process.kill()
        p.primary.process.wait()
        p.link.close()
        promoted = Redis.from_url(p.replica.url)
        await promoted.replicaof("NO", "ONE")
        others = memory(promoted, key)
        again = await others.append_many(
            [{"role": "assistant", "content": f"other {i}"} for i in range(2)]
        )
        assert again.last_id == seen.last_id  # the ids were given again
        before = [m.content for m in await others.read()]
        stale = memory(promoted, key)
        went_through = 0
        refusal = ""
        try:
            await stale.replace(
                [{"role": "user", "content": "the editor's rewrite"}],
                if_last_id=seen.last_id,
                if_incarnation=seen.incarnation,
            )
            went_through = 1
        except ConflictError as exc:
            refusal = str(exc)
        after = [m.content for m in await others.read()]
        # The next compare-and-set with what the promoted server gives out lands.
        fresh = await stale.snapshot()
        assert fresh.incarnation != seen.incarnation
        await stale.replace(
            [{"role": "user", "content": "a rewrite read after the failover"}],
            if_last_id=fresh.last_id,
            if_incarnation=fresh.incarnation,
        )
        await promoted.aclose()
    finally:
        p.stop()
    assert went_through == 0
    assert "server changed" in refusal
    assert after == before
    record(
        group="adversarial-3",
        item=2,
        fault="replace(if_last_id, if_incarnation) read on a primary that then died, sent to "
        "the promoted replica after other writers gave its last ids again, "
        + ("no wait" if wait is None else "wait: replicas=1"),
        engine=engine_name,
        promise="a compare-and-set read before a failover is refused (the promoted server's "
        "replication id differs from the one the memory's incarnation was given under: it "
        "gets a new one); one read after lands",
        operations=1,
        acknowledged=went_through,
        lost=len(set(before) - set(after)),
        duplicated=0,
        observed=f"ConflictError; the {len(after)} messages on the promoted replica "
        "(other writers' ids 9 and 10 included) unchanged; a replace read after the failover "
        "went through",
    )


@pytest.mark.slow
@pytest.mark.cluster
async def test_a_compare_and_set_read_before_a_cluster_failover_is_refused(
    record: Callable[..., None],
) -> None:
    """The same on a Cluster: a replica of the memory's primary takes over (CLUSTER FAILOVER);
    the memory is then taken back to an earlier state (DUMP/RESTORE, as a replica that missed
    writes would hold it) and other writers give its last ids again. The editor's
    replace(if_last_id, if_incarnation) read before the failover is refused."""
    key = f"conv:{uuid.uuid4().hex}"
    with start_cluster(3) as cluster:
        spec = spec_for("valkey-cluster", cluster)
        client = spec.client()
        try:
            writer = quiet(memory(client, key))
            await writer.append_many([{"role": "user", "content": f"kept {i}"} for i in range(8)])
            slot = key_slot(writer.keys.meta.encode())
            port = _owner_port(cluster.nodes[0].port, slot)
            owner = next(n for n in cluster.nodes if n.port == port)
            replica = cluster.add_node()
            with SyncRedis(port=owner.port) as primary, SyncRedis(port=replica.port) as node:
                owner_id = primary.execute_command("CLUSTER", "MYID")
                owner_id = owner_id.decode() if isinstance(owner_id, bytes) else owner_id
                deadline = time.monotonic() + 30
                while True:  # the new node must know the primary before it can follow it
                    try:
                        node.execute_command("CLUSTER", "REPLICATE", owner_id)
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.2)
                saved = {k: primary.dump(k) for k in (writer.keys.msgs, writer.keys.meta)}
                await writer.append_many(
                    [{"role": "user", "content": f"lost {i}"} for i in range(2)]
                )
                while primary.execute_command("WAIT", 1, 200) < 1:
                    if time.monotonic() > deadline:
                        raise AssertionError("the replica never caught up")
                editor = quiet(memory(client, key))
                seen = await editor.snapshot()
                assert seen.last_id == 10
                node.execute_command("CLUSTER", "FAILOVER")
                while node.info("replication")["role"] != "master":
                    if time.monotonic() > deadline:
                        raise AssertionError("the replica did not take over")
                    await asyncio.sleep(0.1)
                for k, dump in saved.items():  # the state a replica that missed ids 9, 10 had
                    assert dump is not None
                    node.restore(k, 0, dump, replace=True)
            others = quiet(memory(client, key))
            again = await others.append_many(
                [{"role": "assistant", "content": f"other {i}"} for i in range(2)]
            )
            assert again.last_id == seen.last_id
            before = [m.content for m in await others.read()]
            went_through, refusal = 0, ""
            try:
                await quiet(memory(client, key)).replace(
                    [{"role": "user", "content": "the editor's rewrite"}],
                    if_last_id=seen.last_id,
                    if_incarnation=seen.incarnation,
                )
                went_through = 1
            except ConflictError as exc:
                refusal = str(exc)
            after = [m.content for m in await others.read()]
        finally:
            await client.aclose()
    assert went_through == 0
    assert "server changed" in refusal
    assert after == before
    record(
        group="adversarial-3",
        item=2,
        fault="replace(if_last_id, if_incarnation) read before CLUSTER FAILOVER of the "
        "memory's primary; then the memory taken back to an earlier state (as a replica that "
        "missed writes holds it) and other writers gave its last ids again",
        engine="valkey-cluster",
        promise="a compare-and-set read before a failover is refused (the new primary's "
        "replication id differs: the memory gets a new incarnation)",
        operations=1,
        acknowledged=went_through,
        lost=len(set(before) - set(after)),
        duplicated=0,
        observed=f"ConflictError; the {len(after)} messages (other writers' ids 9 and 10 "
        "included) unchanged",
    )


def quiet(mem: MemoryInstance) -> MemoryInstance:
    """A handle that leaves indexing alone: the test takes keys back to an earlier state by
    DUMP/RESTORE, which an index built meanwhile would contradict."""
    mem.indexer.background = False
    return mem


def _owner_port(port: int, slot: int) -> int:
    """The port of the primary serving ``slot`` (CLUSTER SLOTS, asked of any node)."""
    with SyncRedis(port=port) as node:
        for start, end, primary, *_ in node.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(primary[1])
    raise AssertionError(f"no node serves slot {slot}")
