"""How fast ``compozy-memory ls`` is with 100,000 memories in a project.

Writes 100,000 real memories (one append each, 2 messages, 1 h TTL) on an embedded server,
each recorded in the project's session index as MemoryManager records it (pipelined
``lua/sessions/session_touch.lua``), then times the whole command, in process, output discarded:
``ls`` (the 50 most recently active, from the index), ``ls --all --json`` (every memory, from
the index) and ``ls --scan --all --json`` (every memory, by SCAN). Each run connects, PINGs,
reads and prints; the last line times ``ls`` as a new process, Python's start-up and imports
included. Printed, never asserted.

Run: ``python benchmarks/bench_cli_ls.py [--memories 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from redis.asyncio import Redis

from compozy_memory import HeuristicCounter, InstanceKeys, MemoryPolicy
from compozy_memory._ops.cli import main
from compozy_memory._sessions.index import SessionIndex
from compozy_memory._store.encoding import encode_messages
from compozy_memory._wire.gateway import message_args
from compozy_memory._wire.scripts import script
from compozy_memory._wire.steps import Steps
from compozy_memory.embedded import start_server

PROJECT = "bench"
CLI = "compozy_memory._ops.cli"
T = TypeVar("T")


def _done(steps: Steps[T]) -> T:
    """What steps that yield no effect return (messages that carry their token counts)."""
    try:
        next(steps)
    except StopIteration as done:
        result: T = done.value
        return result
    raise AssertionError("encoding counted tokens: every message carries its count")


async def fill(url: str, n: int) -> None:
    """``n`` memories of 2 messages (1 h TTL), each one ``lua/append.lua`` call exactly as a
    handle makes it, then its session-index entry as the manager writes it: both pipelined,
    1,000 memories a round trip."""
    client = Redis.from_url(url)
    policy = MemoryPolicy(ttl=timedelta(hours=1))
    counter = HeuristicCounter()
    index = SessionIndex(client, PROJECT)
    append, touch = script("append"), script("session_touch")
    for code in (append, touch):
        await client.script_load(code.source)
    for start in range(0, n, 1000):
        pipe = client.pipeline(transaction=False)
        names = []
        for i in range(start, min(n, start + 1000)):
            keys = InstanceKeys.build(PROJECT, f"chat:user-{i}")
            names.append(keys.key)
            body = _done(encode_messages(
                [{"role": "user", "content": f"question {i}", "tokens": 4},
                 {"role": "assistant", "content": f"answer {i}", "tokens": 3}],
                policy, counter, keys.prefix,
            ))  # fmt: skip
            values: dict[str, str | bytes | int] = {
                "ttl_ms": 3_600_000,
                "max_tokens": 0,
                "dedupe_key": f"fill-{i}",
                "n": 2,
            }
            args = append.contract.argv_for(values, message_args(body))
            parts = [getattr(keys, part) for part in append.contract.keys]
            pipe.execute_command("EVALSHA", append.sha, len(parts), *parts, *args)
        replies = await pipe.execute()
        pipe = client.pipeline(transaction=False)
        for i, (key, reply) in enumerate(zip(names, replies, strict=True), start):
            agent = f"agent-{i % 10}"
            last_id, tokens, count = int(reply[1]), int(reply[2]), int(reply[3])
            pipe.execute_command(
                "EVALSHA", touch.sha, 3, index.all_key, index.agent_key(agent), index.info_key,
                key, agent, last_id, count, tokens,
            )  # fmt: skip
        await pipe.execute()
    await client.aclose()


def timed(label: str, argv: list[str], repeat: int) -> int:
    samples = []
    rows = 0
    for _ in range(repeat):
        sink = io.StringIO()
        began = time.perf_counter()
        with contextlib.redirect_stdout(sink):
            code = main(argv)
        samples.append((time.perf_counter() - began) * 1000)
        assert code == 0, code
        text = sink.getvalue()
        rows = json.loads(text)["count"] if "--json" in argv else len(text.splitlines()) - 1
    print(f"{label:<42} {rows:>7,} rows  median {statistics.median(samples):8.1f} ms  "
          f"min {min(samples):8.1f} ms  ({repeat} runs)", flush=True)  # fmt: skip
    return rows


def run(n: int) -> None:
    with start_server() as server:
        began = time.perf_counter()
        asyncio.run(fill(server.url, n))
        print(f"wrote {n:,} memories (+ index entries) in {time.perf_counter() - began:.1f} s")
        base = ["--url", server.url, "ls", "-p", PROJECT]
        timed("compozy-memory ls (50 newest, index)", base, 20)
        timed("compozy-memory ls --agent agent-3", [*base, "--agent", "agent-3"], 20)
        timed("compozy-memory ls --all --json (index)", [*base, "--all", "--json"], 3)
        timed("compozy-memory ls --scan --all --json", [*base, "--scan", "--all", "--json"], 3)
        script_ = Path(sys.executable).parent / "compozy-memory"
        command = [str(script_)] if script_.exists() else [sys.executable, "-m", CLI]
        samples = []
        for _ in range(5):
            began = time.perf_counter()
            subprocess.run([*command, *base], check=True, capture_output=True)
            samples.append((time.perf_counter() - began) * 1000)
        print(f"{'the same ls as a new process (start-up too)':<42} {50:>7,} rows  median "
              f"{statistics.median(samples):8.1f} ms  (5 runs)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=100_000)
    run(parser.parse_args().memories)
