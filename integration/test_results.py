"""Large results by reference: offloaded appends, hash checks, namespaces, reference counts."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from compozy_memory import (
    MemoryInstance,
    MemoryPolicy,
    MemoryTools,
    MessageTooLargeError,
    Namespace,
    ResultCorruptError,
    ResultStore,
    UsageError,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._results.store import DataRef, result_key
from integration.memories import COUNTER

PROJECT = "results"
# Agent ids chosen to reach another agent's results, or to make two namespaces share a key.
HOSTILE_IDS = [
    "bob:x",  # a colon: bob's namespace with more after it?
    "bob}",  # close the hash tag early
    "{bob}",  # a hash tag of its own
    "}:{bob",
    "bob/../alice",  # a path trick
    "..",
    "../bob",
    "bob\u200b",  # zero-width space after bob
    "\uff42\uff4f\uff42",  # fullwidth letters that look like bob
    "b\u0430b",  # Cyrillic a
    "bob\x00",  # NUL
    "bob\n",
    "bob_x3a",  # what an escaped ':' looks like
    "bob_x7d",  # what an escaped '}' looks like
    "agent:bob",  # the encoded namespace's own text
    "global",
    "*",
    "bob " * 200,  # long enough to be shortened with a digest
    "\ud800",  # a lone surrogate (encoded as its surrogatepass bytes: a namespace of its own)
]


def five_megabytes() -> str:
    return "\n".join(f"row {i:07d}: " + "value " * 10 for i in range(72_000))


@pytest.mark.parametrize("max_tokens", [50, 40])
async def test_an_offloaded_stub_fits_a_small_budget(
    client: RedisClient, memory_key: str, max_tokens: int
) -> None:
    """With max_tokens 50, a 2,000-character line used to become a stub of ~200 tokens and
    raise MessageTooLargeError; the stub now shows less of its result until it fits."""
    mem = MemoryInstance.open(
        client,
        project=PROJECT,
        key=memory_key,
        counter=COUNTER,
        policy=MemoryPolicy(max_tokens=max_tokens),
    )
    line = "lorem ipsum dolor sit amet " * 75
    ack = await mem.append({"role": "user", "content": line}, offload=True)
    assert ack.total_tokens <= max_tokens
    (stub,) = await mem.read()
    assert isinstance(stub.content, str)
    assert stub.content.startswith("[stored result ")
    assert stub.metadata is not None
    ref = DataRef.from_json(stub.metadata["result_ref"])
    assert await mem.results.load_result(ref) == line.encode()
    small = await mem.append({"role": "user", "content": "hi"}, offload=True)
    assert small.total_tokens - ack.total_tokens == (await mem.read())[-1].tokens


async def test_a_budget_too_small_for_any_stub_is_a_typed_error_that_stores_nothing(
    client: RedisClient, memory_key: str
) -> None:
    mem = MemoryInstance.open(
        client,
        project=PROJECT,
        key=memory_key,
        counter=COUNTER,
        policy=MemoryPolicy(max_tokens=4, ttl=timedelta(minutes=5)),  # a TTL: results are pinned
    )
    payload = "x " * 500
    with pytest.raises(MessageTooLargeError, match="no room for even the stub"):
        await mem.append({"role": "user", "content": payload}, offload=True)
    assert await mem.read() == []
    sha = hashlib.sha256(payload.encode()).hexdigest()
    key = result_key(PROJECT, Namespace.global_().encoded, sha)
    assert await client.exists(key)
    assert await client.hget(key, "refs") in (None, b"0", "0")  # its pin was released
    assert await client.hlen(mem.keys.respins) == 0  # and the memory never recorded it


async def test_a_5mb_tool_result_is_offloaded_and_round_trips(
    client: RedisClient, memory_key: str
) -> None:
    mem = MemoryInstance.open(
        client,
        project=PROJECT,
        key=memory_key,
        counter=COUNTER,
        policy=MemoryPolicy(max_tokens=2_000, ttl=timedelta(minutes=5)),
        results=ResultStore(client, PROJECT, agent="alice"),
    )
    payload = five_megabytes()
    assert len(payload.encode()) > 5_000_000
    await mem.append({"role": "system", "content": "You analyse data.", "priority": 0})
    await mem.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "q"}}],
        }
    )
    tool = {"role": "tool", "tool_call_id": "c1", "content": payload}
    with pytest.raises(MessageTooLargeError):
        await mem.append(tool)
    await mem.append(tool, offload=True, namespace=Namespace.agent("alice"))

    context = await mem.context_layers()
    assert context.tokens <= 2_000
    (stub,) = [m for m in context.messages if m.role == "tool"]
    assert isinstance(stub.content, str)
    assert stub.content.startswith("[stored result agent:alice/")
    assert "row 0000000" in stub.content
    assert stub.tool_call_id == "c1"
    assert stub.metadata is not None
    ref = DataRef.from_json(stub.metadata["result_ref"])
    assert ref.size == len(payload.encode())

    loaded = await mem.results.load_result(ref)
    assert loaded == payload.encode()
    assert hashlib.sha256(loaded).hexdigest() == ref.sha256
    assert await mem.results.load_slice(ref, 0, 12) == b"row 0000000:"
    key = result_key(PROJECT, ref.namespace, ref.sha256)
    assert await client.hget(key, "enc") in (b"gzip", "gzip")
    assert await client.hget(key, "refs") in (b"1", "1")
    assert 0 < await client.pttl(key) <= 300_000  # pinned: lives with the memory

    # The recall tool reads a slice by the ref the stub names.
    tools = MemoryTools(mem)
    answer = await tools.call("load_result", {"ref": ref.token, "start": 13, "length": 5})
    assert '"text": "value"' in answer

    # A second memory pinning the same bytes keeps them pinned after the first is cleared.
    other = MemoryInstance.open(
        client,
        project=PROJECT,
        key=memory_key + ":other",
        counter=COUNTER,
        policy=MemoryPolicy(max_tokens=2_000),
        results=ResultStore(client, PROJECT, agent="alice"),
    )
    await other.append(tool, offload=True, namespace=Namespace.agent("alice"))
    assert await client.hget(key, "refs") in (b"2", "2")
    await other.clear()
    assert await client.hget(key, "refs") in (b"1", "1")

    # A flipped byte in the stored payload is detected.
    raw = await client.execute_command("HGET", key, "data", NEVER_DECODE=[])
    damaged = bytearray(raw)
    damaged[len(damaged) // 2] ^= 0x01
    await client.hset(key, "data", bytes(damaged))
    with pytest.raises(ResultCorruptError):
        await mem.results.load_result(ref)


async def test_a_changed_raw_result_fails_its_hash(client: RedisClient) -> None:
    store = ResultStore(client, PROJECT)
    ref = await store.store_result("small and plain", namespace=Namespace.global_())
    key = result_key(PROJECT, ref.namespace, ref.sha256)
    assert await client.hget(key, "enc") in (b"raw", "raw")
    assert await store.load_result(ref) == b"small and plain"
    await client.hset(key, "data", b"small and plaim")
    with pytest.raises(ResultCorruptError):
        await store.load_result(ref.token)


async def test_reference_counts_pin_and_release(client: RedisClient) -> None:
    store = ResultStore(client, PROJECT, workflow="wf-1")
    ns = Namespace.workflow("wf-1")
    ref = await store.store_result(b"pinned", namespace=ns, ttl=timedelta(seconds=5), pin=True)
    key = result_key(PROJECT, ns.encoded, ref.sha256)
    assert await client.pttl(key) == -1  # pinned, no pin TTL: kept
    await store.store_result(b"pinned", namespace=ns, ttl=timedelta(seconds=5), pin=True)
    assert await store.release(ref) == 1
    assert await client.pttl(key) == -1
    assert await store.release(ref) == 0
    assert 0 < await client.pttl(key) <= 5_000  # unpinned: its own TTL again
    assert await store.release(ref) == 0  # never below zero


async def test_an_agent_reaches_no_other_agents_results(client: RedisClient) -> None:
    bob = ResultStore(client, PROJECT, agent="bob")
    secret = await bob.store_result("bob's secret", namespace=Namespace.agent("bob"))
    bob_key = result_key(PROJECT, secret.namespace, secret.sha256)
    keys = {bob_key}
    for hostile in HOSTILE_IDS:
        mallory = ResultStore(client, PROJECT, agent=hostile)
        # Reading bob's result by its token or ref is refused before Redis is asked.
        for ref in (secret, secret.token):
            with pytest.raises(UsageError):
                await mallory.load_result(ref)
        # Storing under its own namespace lands on a key of its own, never bob's.
        ref = await mallory.store_result("bob's secret", namespace=Namespace.agent(hostile))
        key = result_key(PROJECT, ref.namespace, ref.sha256)
        assert key not in keys, hostile
        keys.add(key)
        assert key.count("{") == 1
        assert key.count("}") == 1
        assert ref.namespace == Namespace.agent(hostile).encoded
        assert await mallory.load_result(ref) == b"bob's secret"
        # And bob cannot read the hostile agent's result either.
        with pytest.raises(UsageError):
            await bob.load_result(ref)
        # Writing into bob's namespace is refused too.
        with pytest.raises(UsageError):
            await mallory.store_result("x", namespace=Namespace.agent("bob"))
    # Tokens forged by hand name nothing outside their namespace.
    alice = ResultStore(client, PROJECT, agent="alice")
    for forged in (
        f"agent:alice:../bob/{secret.sha256}",
        f"agent:alice}}:{{agent:bob/{secret.sha256}",
        f"agent:bob/{secret.sha256}",
        f"agent:alice/../{secret.sha256}",
        f"agent:ali_x63e/{secret.sha256}",  # 'alice' with an escaped 'c' is not alice's
    ):
        with pytest.raises(UsageError):
            await alice.load_result(forged)
