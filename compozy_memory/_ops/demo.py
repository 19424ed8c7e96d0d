"""``demo``: agent replicas behind a load balancer, sharing memories and flushing as they go.

``--replicas`` OS processes play replicas of one support agent. Each conversation's turns are
dealt round-robin across them, as a load balancer would: the replica that gets turn n waits
until the memory shows turn n-1 (written by another process), then writes the user's message
and its answer. The memory has a small token budget, so it flushes in the background
(extractive summaries: no API key, no network) while the other replicas keep writing. A live
table shows each replica's appends and flushes; at the end every memory is checked from Redis:
every turn arrived exactly once (live, or archived by a flush).

It runs on an embedded server (the ``embedded`` extra, or a ``valkey-server``/``redis-server``
on PATH) unless ``--url`` is given before the command.

Ctrl-C stops it at once, with one line: the replicas ignore SIGINT (it reaches the whole
process group from a terminal), so only this process sees it; it ends them with SIGTERM, stops
the embedded server and exits 130.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import multiprocessing
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from compozy_memory._ops.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    Settings,
    open_client,
    settings,
)
from compozy_memory._ops.output import Column, Out, key_column, number_column
from compozy_memory.embedded import start_server

if TYPE_CHECKING:
    from compozy_memory._model.messages import Message
    from compozy_memory._store.instance import MemoryInstance

__all__ = ["demo"]

PROJECT = """\
project: demo
memories:
  - id: conversation
    type: token_based
    max_tokens: 600
    flushing_strategy: {type: hybrid_summary, summarize_threshold: 0.8, summary_tokens: 120}
    persistence: {type: redis, ttl: 1h}
    default_key_template: "user:{{ .workflow.input.user_id }}"
    summarizer: {type: extractive}
agents:
  - id: support-bot
    memory: conversation
    memory_key: "user:{{ .workflow.input.user_id }}"
"""
_STATS = 3  # appends, flushes committed, flushes skipped (another replica held the lock)


def demo(
    ctx: typer.Context,
    replicas: Annotated[int, typer.Option(min=1, max=16, help="replica processes")] = 4,
    conversations: Annotated[int, typer.Option(min=1, max=50, help="conversations")] = 3,
    turns: Annotated[int, typer.Option(min=1, max=1000, help="turns a conversation")] = 40,
    json_mode: Annotated[bool, typer.Option("--json", help="the final report as JSON")] = False,
) -> None:
    """Run a fleet of replica processes that share memories (embedded server by default)."""
    out = Out(json_mode)
    root = ctx.find_root()
    source = root.get_parameter_source("url")
    given = source is not None and source.name != "DEFAULT"
    if given:  # one line and exit 3 for a server it cannot reach, as every command
        asyncio.run(_reachable(settings(ctx)))
    server = None if given else start_server()
    options = settings(ctx) if server is None else Settings(server.url, False)
    users = [f"user-{uuid.uuid4().hex[:8]}" for _ in range(conversations)]
    try:
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "compozy.yaml").write_text(PROJECT)
            stats = _run_fleet(options, folder, users, replicas, turns, out)
            rows = asyncio.run(_check(options, folder, users, turns))
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted: the replicas and the embedded server are stopped\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if server is not None:
            with contextlib.suppress(KeyboardInterrupt):
                server.stop()
    complete = all(row["complete"] for row in rows)
    if json_mode:
        out.data({"url": options.url, "replicas": stats, "memories": rows, "complete": complete})
    else:
        fleet = [(str(n), str(r["appends"]), str(r["flushes"]), str(r["skipped"]))
                 for n, r in enumerate(stats)]  # fmt: skip
        if not out.stderr.is_terminal:  # on a terminal the live table showed them
            names = ("REPLICA", "APPENDS", "FLUSHES", "SKIPPED (LOCK HELD)")
            out.table([number_column(c) for c in names], fleet)
        table = [
            (r["key"], str(r["last_id"]), str(r["messages"]), str(r["tokens"]),
             str(r["summaries"]), str(r["flushes"]), "yes" if r["complete"] else "NO")
            for r in rows
        ]  # fmt: skip
        numbers = ("LAST ID", "LIVE", "TOKENS", "SUMMARIES", "FLUSHES")
        columns: list[Column | str] = [key_column("MEMORY"), *map(number_column, numbers)]
        columns.append("COMPLETE")
        out.table(columns, table, title="memories, read back from Redis")
    if not complete:
        raise typer.Exit(EXIT_FAILED)


async def _reachable(options: Settings) -> None:
    async with open_client(options):
        pass


def _run_fleet(
    options: Settings, folder: str, users: list[str], replicas: int, turns: int, out: Out
) -> list[dict[str, int]]:
    spawn = multiprocessing.get_context("spawn")
    counters = spawn.Array("q", replicas * _STATS)
    processes = [
        spawn.Process(
            target=_replica,
            args=(options.url, options.cluster, folder, users, number, replicas, turns, counters),
        )
        for number in range(replicas)
    ]
    # The replicas inherit an ignored SIGINT (kept across exec): Ctrl-C at the terminal reaches
    # the whole process group, and only this process is to act on it.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for process in processes:
            process.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        live = Live(_table(counters, replicas), console=out.stderr, refresh_per_second=8)
        if out.stderr.is_terminal and not out.json:
            with live:
                while any(p.is_alive() for p in processes):
                    live.update(_table(counters, replicas))
                    time.sleep(0.1)
                live.update(_table(counters, replicas))
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        _stop(processes)
        raise
    if any(p.exitcode for p in processes):
        raise typer.Exit(EXIT_FAILED)
    return [
        dict(zip(("appends", "flushes", "skipped"), counters[n * _STATS : (n + 1) * _STATS],
                 strict=True))
        for n in range(replicas)
    ]  # fmt: skip


def _stop(processes: list[Any]) -> None:
    """End the replicas now (SIGTERM, then SIGKILL for one still running after 5 s)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + 5
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _table(counters: Any, replicas: int) -> Table:
    table = Table("REPLICA", "APPENDS", "FLUSHES", "SKIPPED (LOCK HELD)", title="replica fleet")
    for n in range(replicas):
        appends, flushes, skipped = counters[n * _STATS : (n + 1) * _STATS]
        table.add_row(str(n), str(appends), str(flushes), str(skipped))
    return table


def _replica(
    url: str,
    cluster: bool,
    folder: str,
    users: list[str],
    number: int,
    replicas: int,
    turns: int,
    counters: Any,
) -> None:
    asyncio.run(_serve(url, cluster, folder, users, number, replicas, turns, counters))


async def _serve(
    url: str,
    cluster: bool,
    folder: str,
    users: list[str],
    number: int,
    replicas: int,
    turns: int,
    counters: Any,
) -> None:
    from prometheus_client import CollectorRegistry

    from compozy_memory._config.registry import MemoryRegistry
    from compozy_memory._flush.extractive import ExtractiveSummarizer
    from compozy_memory._io.connection import connect
    from compozy_memory._manager import MemoryManager
    from compozy_memory._metrics import MemoryMetrics
    from compozy_memory._model.tokens import HeuristicCounter

    client = connect(url, cluster=cluster)
    registry = CollectorRegistry()
    counter = HeuristicCounter()
    manager = MemoryManager(
        MemoryRegistry.load(folder),
        client,
        counter=counter,
        summarizer=ExtractiveSummarizer(counter),
        metrics=MemoryMetrics(registry),
    )
    base = number * _STATS

    def flushed(kind: str) -> int:
        labels = {"memory": "conversation", "type": kind}
        return int(registry.get_sample_value("compozy_memory_flush_total", labels) or 0)

    async def converse(user: str) -> None:
        context = {"workflow": {"input": {"user_id": user}}}
        (memory,) = await manager.for_agent("support-bot", context)
        for turn in range(number, turns, replicas):
            # Polling Redis on purpose: the turn before is written by another process.
            while await _last_turn(memory) != turn - 1:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            meta = {"replica": number, "turn": turn}
            await memory.append_many(
                [
                    {"role": "user", "content": f"Turn {turn}: where is order #{1000 + turn}?",
                     "metadata": meta},
                    {"role": "assistant", "metadata": meta,
                     "content": f"(replica {number}) Order #{1000 + turn} ships on day "
                                f"{turn % 28 + 1}; I noted it for you."},
                ],
                dedupe_key=f"{user}:{turn}",
            )  # fmt: skip
            counters[base] += 2
            counters[base + 1] = flushed("summary") + flushed("eviction")
            counters[base + 2] = flushed("skipped")
        if memory.flusher is not None:
            await memory.flusher.wait_idle()
        counters[base + 1] = flushed("summary") + flushed("eviction")
        counters[base + 2] = flushed("skipped")

    try:
        await asyncio.gather(*(converse(user) for user in users))
    finally:
        await manager.aclose()
        await client.aclose()


async def _last_turn(memory: MemoryInstance) -> int:
    """The turn of the newest message (a flush removes the oldest ones, never the newest)."""
    newest = await memory.read(-1)
    if newest and newest[0].metadata and "turn" in newest[0].metadata:
        return int(str(newest[0].metadata["turn"]))
    return -1


def _turns(messages: list[Message]) -> collections.Counter[int]:
    return collections.Counter(
        int(str(m.metadata["turn"])) for m in messages if m.metadata and "turn" in m.metadata
    )


async def _check(options: Settings, folder: str, users: list[str], turns: int) -> list[Any]:
    from compozy_memory._config.registry import MemoryRegistry
    from compozy_memory._manager import MemoryManager
    from compozy_memory._model.tokens import HeuristicCounter

    rows = []
    async with open_client(options) as client:
        manager = MemoryManager(
            MemoryRegistry.load(folder), client, counter=HeuristicCounter(), flushing=False
        )
        for user in users:
            context = {"workflow": {"input": {"user_id": user}}}
            (memory,) = await manager.for_agent("support-bot", context)
            health = await memory.health()
            # Every turn arrived once: two messages a turn, live or archived by a flush.
            seen = _turns(await memory.read()) + _turns(await memory.recall(0, 100_000))
            rows.append(
                {
                    "key": memory.keys.key,
                    "last_id": health.last_id,
                    "messages": health.message_count,
                    "tokens": health.token_count,
                    "summaries": health.summaries,
                    "flushes": health.flush_count,
                    "complete": seen == collections.Counter(dict.fromkeys(range(turns), 2)),
                }
            )
    return rows
