"""Adversarial review 15 on real engines: callers resumed in turns, and warm()'s probe."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

from redis.asyncio import Redis

from compozy_memory import HeuristicCounter, MemoryInstance
from compozy_memory._ops.acl import acl_setuser
from compozy_memory._store.warmup import warm
from compozy_memory._wire.delivery import install
from compozy_memory._wire.translate import RedisClient
from integration.engines import EngineSpec

CALLERS = 600  # more than two pipelines' worth (MAX_PIPELINE is 256)


async def stored(client: RedisClient, mem: MemoryInstance) -> dict[str, int]:
    return {
        json.loads(e)["content"]: json.loads(e)["id"]
        for e in await client.lrange(mem.keys.msgs, 0, -1)
    }


async def test_callers_cancelled_between_turns_never_swap_or_hang(
    engine: EngineSpec, client: RedisClient
) -> None:
    """Many callers in one tick, some cancelled after 0..40 loop turns (while replies are
    handed out in groups), the scripts flushed mid-run: every caller that finishes has its
    own reply, a cancelled append ran at most once, and nothing waits forever."""
    prefix = uuid.uuid4().hex
    mems = [
        MemoryInstance.open(
            client,
            project="adv15",
            key=f"{prefix}:{i}",
            counter=HeuristicCounter(),
            background_index=False,  # the callers' calls alone
        )
        for i in range(CALLERS)
    ]
    rng = random.Random(15)
    nodes = engine.node_clients()
    for round_ in range(4):
        tasks = [
            asyncio.create_task(m.append({"role": "user", "content": f"c{i}-r{round_}"}))
            for i, m in enumerate(mems)
        ]
        doomed = rng.sample(range(CALLERS), CALLERS // 5)
        for turn in range(41):
            if round_ == 2 and turn == 3:
                for node in nodes:
                    await node.function_flush()
                    await node.script_flush()
            for i in doomed:
                if i % 41 == turn:
                    tasks[i].cancel()
            await asyncio.sleep(0)
        _, pending = await asyncio.wait(tasks, timeout=30)
        assert not pending, f"{len(pending)} callers still wait"
        for i, task in enumerate(tasks):
            if task.cancelled():
                continue
            ids = await stored(client, mems[i])
            assert ids[f"c{i}-r{round_}"] == task.result().last_id
    for node in nodes:
        await node.aclose()
    for mem in mems:
        contents = list((await stored(client, mem)).keys())
        assert len(contents) == len(set(contents))


async def test_warm_succeeds_for_tenants_who_may_not_write_the_probe(
    standalone: EngineSpec,
) -> None:
    admin = Redis.from_url(standalone.url)
    await install(admin)
    names = []
    try:
        for read_only in (False, True):
            name = f"u{uuid.uuid4().hex[:12]}"
            await admin.execute_command(  # type: ignore[no-untyped-call]
                *acl_setuser(name, "acme", read_only=read_only, password="pw-" + name)
            )
            names.append(name)
            tenant = Redis.from_url(
                standalone.url.replace("redis://", f"redis://{name}:pw-{name}@")
            )
            try:
                await asyncio.wait_for(warm(tenant), 30)
                mem = MemoryInstance.open(
                    tenant, project="acme", key=name, counter=HeuristicCounter()
                )
                if not read_only:
                    assert (await mem.append({"role": "user", "content": "hi"})).first_id == 1
            finally:
                await tenant.aclose()
        async for key in admin.scan_iter(match="compozy:compozy-warm:*"):
            assert key.endswith(b":meta"), key
            assert 0 < await admin.pttl(key) <= 10_000, key
    finally:
        for name in names:
            await admin.acl_deluser(name)
        await admin.aclose()
