"""Many callers in one tick, some cancelled while replies are handed out in turns."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

from compozy_memory import MemoryInstance
from compozy_memory._io.translate import RedisClient
from integration.engines import EngineSpec
from integration.memories import COUNTER

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
            counter=COUNTER,
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
