"""The LlamaIndex chat store adapter, on a real Valkey, with the real llama-index-core."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ImageBlock, TextBlock
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.storage.chat_store.base import BaseChatStore

from compozy_memory import (
    MemoryInstance,
    MemoryManager,
    MemoryRegistry,
    UsageError,
    connect,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory.adapters.llama_index import ChatKeyListing, CompozyChatStore
from compozy_memory.embedded import EmbeddedServer
from integration.adapter_fleet import APPENDS, WRITERS, in_writer_order, run_fleet, tally
from integration.adapter_workers import PROJECT, close_unused, llama_index_writer
from integration.memories import COUNTER

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "project"


def every_kind() -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="Hi", additional_kwargs={"user_id": 7, "tags": ["a"]}),
        ChatMessage(
            role="assistant",
            content="",
            additional_kwargs={
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f"}}]
            },
        ),
        ChatMessage(role="tool", content="42", additional_kwargs={"tool_call_id": "call_1"}),
        ChatMessage(role="chatbot", blocks=[TextBlock(text="one"), TextBlock(text="two")]),
        ChatMessage(
            role="user",
            blocks=[TextBlock(text="see"), ImageBlock(url="https://example.invalid/cat.png")],
        ),
        ChatMessage(role="function", content="legacy result"),
    ]


@pytest.fixture
async def client(valkey_server: EmbeddedServer) -> AsyncIterator[RedisClient]:
    redis = connect(valkey_server.url)
    yield redis
    await redis.aclose()


@pytest.fixture
def store(client: RedisClient) -> CompozyChatStore:
    prefix = f"li-{uuid.uuid4().hex}:"
    return CompozyChatStore.from_client(client, project=PROJECT, key_prefix=prefix, counter=COUNTER)


async def test_it_is_a_llama_index_chat_store(store: CompozyChatStore) -> None:
    assert isinstance(store, BaseChatStore)
    assert store.class_name() == "CompozyChatStore"
    assert await store.aget_messages("nobody") == []
    assert await store.aget_keys() == []


async def test_every_kind_of_message_reads_back_equal(store: CompozyChatStore) -> None:
    sent = every_kind()
    for message in sent:
        await store.async_add_message("chat", message)
    assert await store.aget_messages("chat") == sent
    memory = await store.memory("chat")
    assert isinstance(memory, MemoryInstance)
    stored = await memory.read()
    assert [m.role for m in stored] == [
        "system", "user", "assistant", "tool", "assistant", "user", "user",
    ]  # fmt: skip
    assert stored[3].tool_result_ids == ("call_1",)
    assert stored[4].content == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert stored[5].content == "see"  # the text of a message with an image


async def test_set_get_and_delete(store: CompozyChatStore) -> None:
    sent = [ChatMessage(role="user", content=f"m{i}") for i in range(5)]
    await store.aset_messages("k", sent[:2])
    await store.aset_messages("k", sent)  # replaces
    assert await store.aget_messages("k") == sent
    assert await store.adelete_message("k", 1) == sent[1]
    assert await store.adelete_message("k", -1) == sent[4]
    assert await store.adelete_message("k", 3) is None  # out of range: as SimpleChatStore
    assert await store.adelete_last_message("k") == sent[3]
    assert await store.aget_messages("k") == [sent[0], sent[2]]
    assert await store.adelete_messages("k") == [sent[0], sent[2]]
    assert await store.adelete_messages("k") is None
    assert await store.adelete_last_message("k") is None
    await store.aset_messages("k", [])
    assert await store.aget_messages("k") == []


async def test_get_keys_lists_the_chats_with_messages(client: RedisClient) -> None:
    prefix = f"li-{uuid.uuid4().hex}:"
    store = CompozyChatStore.from_client(client, project=PROJECT, key_prefix=prefix)
    other = CompozyChatStore.from_client(client, project=PROJECT, key_prefix=prefix + "x")
    names = ["alice", "user 1", "user/1", "张伟", "a_x41", "*?[glob]"]
    for name in names:
        await store.async_add_message(name, ChatMessage(role="user", content="hi"))
    await other.async_add_message("zed", ChatMessage(role="user", content="hi"))
    await store.async_add_message("emptied", ChatMessage(role="user", content="hi"))
    await store.adelete_messages("emptied")
    assert await store.aget_keys() == sorted([*names, "xzed"])  # "x" + "zed" is under prefix
    assert await other.aget_keys() == ["zed"]
    # A prefix that ends in "_": the encoded key of prefix + key may escape that "_".
    tricky = CompozyChatStore.from_client(client, project=PROJECT, key_prefix=prefix + "t_")
    await tricky.async_add_message("x41", ChatMessage(role="user", content="hi"))
    assert await tricky.aget_keys() == ["x41"]


async def test_a_plain_factory_has_no_key_listing(client: RedisClient) -> None:
    store = CompozyChatStore(
        memory_for=lambda key: MemoryInstance.open(client, project=PROJECT, key="plain:" + key)
    )
    with pytest.raises(UsageError, match="get_keys needs a listing"):
        await store.aget_keys()
    listed = CompozyChatStore(
        memory_for=store.memory_for, listing=ChatKeyListing(client, PROJECT, "plain:")
    )
    key = f"plain-{uuid.uuid4().hex}"
    await listed.async_add_message(key, ChatMessage(role="user", content="hi"))
    assert key in await listed.aget_keys()
    await listed.adelete_messages(key)


async def test_from_manager_uses_the_memory_resource(client: RedisClient) -> None:
    manager = MemoryManager(MemoryRegistry.load(EXAMPLES), client, counter=COUNTER)
    store = CompozyChatStore.from_manager(manager, "customer-support")
    key = f"chat {uuid.uuid4().hex}"
    await store.async_add_message(key, ChatMessage(role="user", content="my order"))
    memory = await store.memory(key)
    assert memory.policy.max_tokens == 4000  # the resource's policy
    assert memory.key.endswith("{customer-support:chat_x20" + key[5:] + "}")
    assert key in await store.aget_keys()
    await store.adelete_messages(key)


async def test_sync_methods_inside_a_running_loop_store(store: CompozyChatStore) -> None:
    """Sync methods go by the memory's blocking twin: they work inside a running loop too."""
    store.add_message("k", ChatMessage(role="user", content="from the loop"))
    assert store.get_keys() == ["k"]
    assert [m.content for m in await store.aget_messages("k")] == ["from the loop"]


async def test_add_message_at_an_index(store: CompozyChatStore) -> None:
    sent = [ChatMessage(role="user", content=f"m{i}") for i in range(3)]
    await store.aset_messages("k", [sent[0], sent[2]])
    await store.async_add_message("k", sent[1], idx=1)
    store.add_message("k", ChatMessage(role="user", content="first"), idx=0)
    store.add_message("k", ChatMessage(role="user", content="last"), idx=99)
    store.add_message("k", ChatMessage(role="user", content="before last"), idx=-1)
    assert [m.content for m in store.get_messages("k")] == [
        "first", "m0", "m1", "m2", "before last", "last",
    ]  # fmt: skip


async def test_achat_keeps_each_turn_in_the_store(store: CompozyChatStore) -> None:
    """``await chat_engine.achat``: ChatMemoryBuffer.aget runs the sync get in a thread while
    aput runs on the caller's loop, on one client."""
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms import MockLLM

    buffer = ChatMemoryBuffer.from_defaults(
        chat_store=store, chat_store_key="chat", token_limit=2000, tokenizer_fn=str.split
    )
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=5), memory=buffer)
    first = await engine.achat("hello there")
    await engine.achat("and again")
    engine.chat("now synchronously")  # the sync engine, inside this running loop
    stored = await store.aget_messages("chat")
    assert [m.role.value for m in stored] == ["user", "assistant"] * 3
    assert stored[0].content == "hello there"
    assert stored[1].content == str(first)
    assert stored[4].content == "now synchronously"


async def test_the_memory_class_keeps_its_queue_in_compozy(client: RedisClient) -> None:
    """LlamaIndex's Memory (it wants an AsyncDBChatStore): its FIFO queue is the memory's
    live messages, what it archives moves to the memory's archive."""
    from llama_index.core.memory import Memory
    from llama_index.core.storage.chat_store.base_db import MessageStatus

    from compozy_memory.adapters.llama_index_memory import CompozyDBChatStore

    prefix = f"li-{uuid.uuid4().hex}:"
    db = CompozyDBChatStore.from_client(client, project=PROJECT, key_prefix=prefix, counter=COUNTER)
    memory = Memory.from_defaults(
        session_id="s1", chat_store=db, token_limit=60, token_flush_size=10,
        tokenizer_fn=str.split,
    )  # fmt: skip
    for i in range(12):
        role = "user" if i % 2 == 0 else "assistant"
        await memory.aput(ChatMessage(role=role, content=f"turn {i} " + "word " * 5))
    active = await db.get_messages("s1")
    archived = await db.get_messages("s1", status=MessageStatus.ARCHIVED)
    assert 0 < len(active) < 12
    assert len(active) + len(archived) == 12
    assert [m.content for m in archived + active] == [f"turn {i} " + "word " * 5 for i in range(12)]
    assert await db.count_messages("s1") == len(active)
    assert await db.count_messages("s1", status=None) == 12
    assert active[0].role.value == "user"  # Memory keeps whole turns
    got = await memory.aget()
    assert [m.content for m in got][-1] == active[-1].content
    assert await db.get_keys() == ["s1"]
    await memory.areset()
    assert await db.count_messages("s1", status=None) == 0


def test_the_memory_class_from_sync_code(valkey_server: EmbeddedServer) -> None:
    """Memory's sync wrappers run its coroutines on a loop of their own, each call."""
    from llama_index.core.memory import Memory

    from compozy_memory.adapters.llama_index_memory import CompozyDBChatStore

    client = connect(valkey_server.url)
    db = CompozyDBChatStore.from_client(
        client, project=PROJECT, key_prefix=f"li-{uuid.uuid4().hex}:"
    )
    memory = Memory.from_defaults(session_id="s", chat_store=db, token_limit=1000)
    try:
        memory.put(ChatMessage(role="user", content="one"))
        memory.put(ChatMessage(role="assistant", content="two"))
        assert [m.content for m in memory.get()] == ["one", "two"]
        assert [m.content for m in memory.get_all()] == ["one", "two"]
    finally:
        close_unused(client)


async def test_the_db_store_edits(client: RedisClient) -> None:
    from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus

    from compozy_memory.adapters.llama_index_memory import CompozyDBChatStore

    db = CompozyDBChatStore.from_client(
        client, project=PROJECT, key_prefix=f"li-{uuid.uuid4().hex}:"
    )
    assert isinstance(db, AsyncDBChatStore)
    sent = [ChatMessage(role="user", content=f"m{i}") for i in range(6)]
    await db.add_messages("k", sent)
    assert await db.get_messages("k", limit=2, offset=1) == sent[1:3]
    assert await db.delete_oldest_messages("k", 2) == sent[:2]
    assert await db.archive_oldest_messages("k", 1) == [sent[2]]
    archived = await db.get_messages("k", status=MessageStatus.ARCHIVED)
    assert archived == sent[:3]
    assert await db.count_messages("k", status=MessageStatus.ARCHIVED) == 3
    assert await db.delete_message("k", 1) == sent[4]
    assert await db.delete_message("k", 9) is None
    assert await db.get_messages("k") == [sent[3], sent[5]]
    # The archive, then the active messages: delete_message's replace archived the three it
    # replaced (two of them kept).
    assert await db.get_messages("k", status=None) == [*sent, sent[3], sent[5]]
    await db.set_messages("k", [sent[0]])
    assert await db.get_messages("k") == [sent[0]]
    with pytest.raises(UsageError, match="ACTIVE"):
        await db.add_message("k", sent[1], status=MessageStatus.ARCHIVED)
    await db.delete_messages("k", status=MessageStatus.ACTIVE)
    assert await db.count_messages("k") == 0
    assert await db.count_messages("k", status=None) > 0  # the archive keeps them
    await db.delete_messages("k")
    assert await db.count_messages("k", status=None) == 0


def test_sync_methods_outside_a_loop(valkey_server: EmbeddedServer) -> None:
    client = connect(valkey_server.url)
    store = CompozyChatStore.from_client(
        client, project=PROJECT, key_prefix=f"li-{uuid.uuid4().hex}:"
    )
    try:
        sent = every_kind()
        store.set_messages("k", sent[:3])
        store.add_message("k", sent[3])
        assert store.get_messages("k") == sent[:4]
        assert store.get_keys() == ["k"]
        assert store.delete_message("k", 0) == sent[0]
        assert store.delete_last_message("k") == sent[3]
        assert store.delete_messages("k") == sent[1:3]
        assert store.get_keys() == []
    finally:
        close_unused(client)


def test_chat_memory_buffer_keeps_its_history_in_the_store(valkey_server: EmbeddedServer) -> None:
    """LlamaIndex's own chat memory, with a word tokenizer (no tokenizer download)."""
    client = connect(valkey_server.url)
    store = CompozyChatStore.from_client(
        client, project=PROJECT, key_prefix=f"li-{uuid.uuid4().hex}:"
    )
    try:
        buffer = ChatMemoryBuffer.from_defaults(
            chat_store=store, chat_store_key="user-1", token_limit=8, tokenizer_fn=str.split
        )
        for i in range(6):
            buffer.put(ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"w{i} x"))
        assert len(store.get_messages("user-1")) == 6
        window = buffer.get()
        assert [m.content for m in window] == ["w2 x", "w3 x", "w4 x", "w5 x"]
        buffer.reset()
        assert store.get_messages("user-1") == []
    finally:
        close_unused(client)


# Four spawned processes import the framework before writing: minutes on a loaded 2-core
# machine (adapter_fleet.START_TIMEOUT is 300 s), so this test's limit is above that.
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_writer_processes_add_messages_through_the_adapter_losing_nothing(
    valkey_server: EmbeddedServer, client: RedisClient
) -> None:
    key = f"li-fleet:{uuid.uuid4().hex}"
    run = await run_fleet(llama_index_writer, valkey_server.url, key)
    store = CompozyChatStore.from_client(client, project=PROJECT, counter=COUNTER)
    got = await store.aget_messages(key)
    pairs = [(int(m.additional_kwargs["writer"]), int(m.additional_kwargs["seq"])) for m in got]
    lost, duplicated = tally(pairs)
    print(f"llama-index: {run.acknowledged} acknowledged, {len(got)} stored, lost {lost}, "
          f"duplicated {duplicated}, {run.seconds:.1f}s")  # fmt: skip
    assert run.acknowledged == WRITERS * APPENDS == len(got)
    assert (lost, duplicated) == (0, 0)
    assert in_writer_order(pairs)
