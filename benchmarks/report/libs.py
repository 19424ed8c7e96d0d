"""Every way of storing a conversation that the report compares, called as its users call it.

A contender opens one conversation (outside the timing) and hands back a function that appends
message ``seq`` to it. Async ones share the run's redis-py asyncio client (same parser, same
pool size); the sync one (LangChain's history builds its own client from a URL) runs on
threads. The other libraries are optional (the ``bench`` extra): one that is not installed is
left out of the report, and the report says so.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import secrets
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from benchmarks.report.common import MESSAGE_TOKENS, turn
from compozy_memory import CachedCounter, MemoryInstance, SuppliedCounter, TiktokenCounter
from compozy_memory._io.translate import RedisClient

AsyncAppend = Callable[[int], Awaitable[None]]
SyncAppend = Callable[[int], None]


@dataclass(frozen=True)
class Contender:
    name: str  # the key in report.json
    label: str  # what the tables and charts print
    how: str  # one line: what a call does
    open_async: Callable[[RedisClient, str, int], AsyncAppend] | None = None
    open_sync: Callable[[str, str, int], SyncAppend] | None = None
    threads: int = 0


# -- the baseline and this project --------------------------------------------------------


def _raw(client: RedisClient, run: str, s: int) -> AsyncAppend:
    key = f"bench:raw:{run}:{s}"

    async def append(seq: int) -> None:
        body = json.dumps(turn(s, seq), separators=(",", ":"), ensure_ascii=False)
        await client.rpush(key, body)

    return append


def _compozy(client: RedisClient, run: str, s: int) -> AsyncAppend:
    memory = MemoryInstance.open(client, project="bench", key=f"{run}:{s}")

    async def append(seq: int) -> None:
        await memory.append(turn(s, seq))

    return append


_TIKTOKEN = CachedCounter(TiktokenCounter(engine="tiktoken"))


def _compozy_tiktoken(client: RedisClient, run: str, s: int) -> AsyncAppend:
    memory = MemoryInstance.open(client, project="bench", key=f"{run}:{s}", counter=_TIKTOKEN)

    async def append(seq: int) -> None:
        await memory.append(turn(s, seq))

    return append


def _compozy_supplied(client: RedisClient, run: str, s: int) -> AsyncAppend:
    memory = MemoryInstance.open(
        client, project="bench", key=f"{run}:{s}", counter=SuppliedCounter()
    )

    async def append(seq: int) -> None:
        await memory.append({**turn(s, seq), "tokens": MESSAGE_TOKENS})

    return append


# -- the spec's design (Compozy's memory specification): a lock around every append --------

_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)
_SPEC_COUNTER = TiktokenCounter(engine="tiktoken")


def _spec(client: RedisClient, run: str, s: int) -> AsyncAppend:
    """Lock (``SET NX PX``, the spec's 30 s ``locking.append_ttl``), count the tokens, then
    ``RPUSH`` the JSON, ``HINCRBY`` the totals and ``EXPIRE`` both in one ``MULTI``, unlock
    with a compare-and-delete script."""
    base = f"bench:spec:{{{run}:{s}}}"
    messages, meta, lock = f"{base}:messages", f"{base}:metadata", f"{base}:lock"

    async def append(seq: int) -> None:
        token = secrets.token_hex(16)
        # The design under test spins on the lock; that is what is being measured.
        while not await client.set(lock, token, nx=True, px=30_000):  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        try:
            message = turn(s, seq)
            tokens = _SPEC_COUNTER.count(message["content"])
            body = json.dumps({**message, "token_count": tokens}, separators=(",", ":"))
            pipe = client.pipeline(transaction=True)
            pipe.rpush(messages, body)
            pipe.hincrby(meta, "token_count", tokens)
            pipe.hincrby(meta, "message_count", 1)
            pipe.expire(messages, 86_400)
            pipe.expire(meta, 86_400)
            await pipe.execute()
        finally:
            await client.eval(_RELEASE, 1, lock, token)

    return append


# -- other libraries ----------------------------------------------------------------------


def _llama(client: RedisClient, run: str, s: int) -> AsyncAppend:
    from llama_index.core.llms import ChatMessage
    from llama_index.storage.chat_store.redis import RedisChatStore

    store = _LLAMA_STORES.get(id(client))
    if store is None:  # one store per client, as an application keeps one
        store = RedisChatStore(aredis_client=client, redis_client=_SyncStandIn())
        _LLAMA_STORES[id(client)] = store
    key = f"bench:llama:{run}:{s}"

    async def append(seq: int) -> None:
        message = turn(s, seq)
        await store.async_add_message(
            key, ChatMessage(role=message["role"], content=message["content"])
        )

    return append


_LLAMA_STORES: dict[int, Any] = {}


class _SyncStandIn:
    """RedisChatStore wants a sync client too and would otherwise build one for localhost:6379
    (it is never called here: only the async methods are)."""


def _openai(client: RedisClient, run: str, s: int) -> AsyncAppend:
    from agents.extensions.memory import RedisSession

    session = RedisSession(f"{run}:{s}", redis_client=client, key_prefix="bench:openai")

    async def append(seq: int) -> None:
        await session.add_items([cast(Any, turn(s, seq))])

    return append


def _langchain(url: str, run: str, s: int) -> SyncAppend:
    from langchain_core.messages import AIMessage, HumanMessage

    RedisChatMessageHistory = langchain_history()

    history = RedisChatMessageHistory(f"{run}:{s}", url=url, key_prefix="bench:langchain:")

    def append(seq: int) -> None:
        message = turn(s, seq)
        kind = HumanMessage if message["role"] == "user" else AIMessage
        history.add_message(kind(content=message["content"]))

    return append


def langchain_history() -> Any:
    """langchain-community's class, imported without its sunset warning. Its maintained
    successor, langchain-redis, stores JSON documents behind a search index: it needs the
    RedisJSON and RediSearch modules, which a plain Redis 7 does not have."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.chat_message_histories import RedisChatMessageHistory
    return RedisChatMessageHistory


def _installed(name: str) -> bool:
    """Whether a contender's package is here, without importing it (langchain-community warns
    on import that it is being sunset)."""
    if name == "openai_agents":  # a dev dependency, but RedisSession came in a later release
        try:
            return importlib.util.find_spec("agents.extensions.memory.redis_session") is not None
        except ImportError:
            return False
    try:
        importlib.metadata.version(_DISTRIBUTIONS[name])
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


RAW = Contender(
    "raw_rpush",
    "raw RPUSH (baseline)",
    "redis-py RPUSH of the message JSON: the cheapest possible write",
    open_async=_raw,
)
COMPOZY = Contender(
    "compozy",
    "compozy-memory (default)",
    "MemoryInstance.open(...).append(message): default counter (rs-bpe with the fast extra, "
    "else tiktoken), batching on",
    open_async=_compozy,
)
COMPOZY_TIKTOKEN = Contender(
    "compozy_tiktoken",
    "compozy-memory (tiktoken engine)",
    'the same counted by TiktokenCounter(engine="tiktoken"), as without the fast extra',
    open_async=_compozy_tiktoken,
)
COMPOZY_SUPPLIED = Contender(
    "compozy_supplied",
    "compozy-memory (counts supplied)",
    'the same with SuppliedCounter() and "tokens" in each message (no tokenizer)',
    open_async=_compozy_supplied,
)
SPEC = Contender(
    "spec_lock",
    "spec: lock per append",
    "SET NX PX lock, tiktoken count, MULTI(RPUSH, HINCRBY x2, EXPIRE x2), compare-and-delete",
    open_async=_spec,
)
LLAMA = Contender(
    "llama_index",
    "LlamaIndex RedisChatStore",
    "llama-index-storage-chat-store-redis: await store.async_add_message(key, ChatMessage)",
    open_async=_llama,
)
OPENAI = Contender(
    "openai_agents",
    "OpenAI Agents RedisSession",
    "openai-agents: await RedisSession(id, redis_client=client).add_items([item])",
    open_async=_openai,
)
LANGCHAIN = Contender(
    "langchain",
    "LangChain RedisChatMessageHistory (16 threads)",
    "langchain-community: RedisChatMessageHistory(id, url=...).add_message(msg), 16 threads",
    open_sync=_langchain,
    threads=16,
)

_DISTRIBUTIONS = {
    "llama_index": "llama-index-storage-chat-store-redis",
    "langchain": "langchain-community",
}


def contenders() -> tuple[list[Contender], list[str]]:
    """Everything installed here, baseline first; and the names of those left out."""
    present, missing = [RAW, COMPOZY, COMPOZY_TIKTOKEN, COMPOZY_SUPPLIED, SPEC], []
    for contender in (LLAMA, OPENAI, LANGCHAIN):
        if _installed(contender.name):
            present.append(contender)
        else:
            missing.append(contender.label)
    return present, missing
