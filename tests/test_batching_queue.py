"""The batchers' shared queue: what one event-loop iteration gathers, and who gets what."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from compozy_memory._io.pipelining import Call, Queue, fail_all, settle
from compozy_memory._wire.scripts import Script, ScriptArg, script

APPEND = script("append")


class Recorder:
    """A flush that answers each call with its own key, one iteration later."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.direct: list[str] = []

    def flush(self, calls: list[Call]) -> None:
        self.batches.append([call.key for call in calls])
        for call in calls:
            if not call.future.done():
                call.future.set_result(f"reply:{call.key}")

    async def alone(
        self, code: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
    ) -> Any:
        self.direct.append(key)
        return f"direct:{key}"


async def test_calls_of_one_iteration_go_out_together_and_each_gets_its_own_reply() -> None:
    recorder = Recorder()
    queue = Queue(recorder.flush, recorder.alone)
    first = await asyncio.gather(*(queue.run(APPEND, ["k"], [], f"m{i}") for i in range(5)))
    second = await asyncio.gather(*(queue.run(APPEND, ["k"], [], f"n{i}") for i in range(3)))
    assert first == [f"reply:m{i}" for i in range(5)]
    assert second == [f"reply:n{i}" for i in range(3)]
    assert recorder.batches == [[f"m{i}" for i in range(5)], [f"n{i}" for i in range(3)]]
    assert recorder.direct == []


def test_a_call_from_another_loop_while_calls_are_queued_goes_alone() -> None:
    recorder = Recorder()
    queue = Queue(recorder.flush, recorder.alone)
    first = asyncio.new_event_loop()
    try:
        waiting = first.create_task(queue.run(APPEND, ["k"], [], "here"))
        first.call_soon(first.stop)
        first.run_forever()  # one iteration: the call is queued, its flush not yet run
        assert not waiting.done()
        assert asyncio.run(queue.run(APPEND, ["k"], [], "there")) == "direct:there"
        assert first.run_until_complete(waiting) == "reply:here"
    finally:
        first.close()
    assert recorder.direct == ["there"]
    assert recorder.batches == [["here"]]


async def test_settle_and_fail_all_never_touch_a_cancelled_caller() -> None:
    loop = asyncio.get_running_loop()
    gone, waiting, failed = loop.create_future(), loop.create_future(), loop.create_future()
    gone.cancel()

    async def answer() -> str:
        return "mine"

    await settle(gone, answer())
    await settle(waiting, answer())
    assert gone.cancelled()
    assert waiting.result() == "mine"
    calls = [Call(APPEND, [], [], "k", f) for f in (gone, waiting, failed)]
    fail_all(calls, RuntimeError("lost"))
    assert gone.cancelled()
    assert waiting.result() == "mine"
    with pytest.raises(RuntimeError, match="lost"):
        failed.result()
    cancelled = loop.create_future()
    fail_all([Call(APPEND, [], [], "k", cancelled)], asyncio.CancelledError())
    assert cancelled.cancelled()


async def test_every_client_has_one_shared_batcher_of_its_kind() -> None:
    """Made without a server: a client connects on its first command, never here."""
    from redis.asyncio import Redis, RedisCluster

    from compozy_memory._io.batching import ScriptBatcher, batcher_for
    from compozy_memory._io.cluster_batching import CLUSTER_BATCHING, ClusterBatcher

    standalone, other = Redis(host="127.0.0.1", port=1), Redis(host="127.0.0.1", port=1)
    cluster = RedisCluster(host="127.0.0.1", port=1)
    try:
        batcher = batcher_for(standalone)
        assert batcher is batcher_for(standalone)
        assert isinstance(batcher, ScriptBatcher)
        clustered = batcher_for(cluster)
        assert clustered is batcher_for(cluster)
        assert isinstance(clustered, ClusterBatcher) if CLUSTER_BATCHING else clustered is None
        assert batcher_for(other) is not batcher  # one per client, not per server
    finally:
        await standalone.aclose()
        await other.aclose()
        await cluster.aclose()
