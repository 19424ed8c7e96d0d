"""The compose fleet's worker, run as processes here: replicas share memories and lose nothing.

Two ``examples/worker.py`` processes serve the same conversations against one embedded
Valkey, asking ``examples/stub_messages_api.py`` through the real ``anthropic`` client, while
the memories flush. Afterwards every message each worker says it wrote is in Redis exactly
once (live, or archived by a flush whose summary covers it), and each worker's ``/metrics``
counted what it stored.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pytest

from compozy_memory import MemoryInstance, MemoryManager, MemoryRegistry, connect
from compozy_memory.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WORKERS = 2
TURNS = 30
SESSIONS = 3

pytestmark = pytest.mark.slow


def load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_worker", EXAMPLES / "worker.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_line(stream: IO[str] | None, prefix: str) -> str:
    assert stream is not None
    line = stream.readline()
    assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}"
    return line[len(prefix) :].strip()


@pytest.fixture
def stub() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "stub_messages_api.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield read_line(process.stdout, "listening on ")
    finally:
        process.terminate()
        process.communicate(timeout=10)


def scrape(url: str) -> dict[str, float]:
    """``compozy_memory_messages_total`` samples of one /metrics page, by label text."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (a local URL)
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("compozy_memory_messages_total{"):
            labels, value = line.rsplit(" ", 1)
            samples[labels] = float(value)
    return samples


async def everything_stored(
    server: EmbeddedServer, prefix: str
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Per session: the metadata of every message live or archived; and the summaries."""
    worker = load_worker()
    client = connect(server.url)
    manager = MemoryManager(MemoryRegistry.load(worker.PROJECT_DIR), client)
    stored: dict[str, list[dict[str, Any]]] = {}
    summaries = 0
    try:
        for n in range(SESSIONS):
            session = f"{prefix}-{n}"
            (memory,) = await manager.for_agent(worker.AGENT, worker.session_context(session))
            stored[session] = await all_messages(memory)
            snapshot = await memory.snapshot()
            covered = {i for s in snapshot.summaries for i in s.covered_ids}
            archived = {m["id"] for m in stored[session] if m["archived"]}
            assert covered <= archived  # what a summary covers is kept in the archive
            summaries += len(snapshot.summaries)
    finally:
        await manager.aclose()
        await client.aclose()
    return stored, summaries


async def all_messages(memory: MemoryInstance) -> list[dict[str, Any]]:
    found = [{"id": m.id, "archived": False, **(m.metadata or {})} for m in await memory.read()]
    offset = 0
    while batch := await memory.recall(offset, 500):
        found += [{"id": m.id, "archived": True, **(m.metadata or {})} for m in batch]
        offset += len(batch)
    health = await memory.health()
    assert sum(1 for m in found if not m["archived"]) == health.message_count
    return found


def test_worker_replicas_share_memories_and_lose_no_message(
    valkey_server: EmbeddedServer, stub: str
) -> None:
    prefix = f"fleet-{uuid.uuid4().hex[:8]}"
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLES / "worker.py"),
                *("--redis-url", valkey_server.url, "--messages-url", stub),
                *("--turns", str(TURNS), "--sessions", str(SESSIONS)),
                *("--session-prefix", prefix, "--worker-id", f"w{n}", "--seed", str(n)),
                *("--metrics-port", "0", "--linger", "60", "--concurrency", "3"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(WORKERS)
    ]
    reports = []
    try:
        for process in workers:
            metrics_url = read_line(process.stdout, "metrics on ")
            report = json.loads(read_line(process.stdout, ""))
            # The worker is done and lingers: its /metrics counted what it stored.
            samples = scrape(metrics_url)
            stored = sum(v for k, v in samples.items() if 'memory="customer-support"' in k)
            assert stored == report["messages"], samples
            reports.append(report)
    finally:
        for process in workers:
            process.terminate()
        errors = [p.communicate(timeout=30)[1] for p in workers]
    assert [p.returncode for p in workers] == [0] * WORKERS, errors

    assert [r["turns"] for r in reports] == [TURNS] * WORKERS
    sessions, summaries = asyncio.run(everything_stored(valkey_server, prefix))
    # Turns landed on every replica and every conversation got turns from more than one.
    for session in sessions:
        writers = {r["worker"] for r in reports if r["sessions"].get(session)}
        assert len(writers) >= 2, (session, writers)
    for session, messages in sessions.items():
        ids = [m["id"] for m in messages]
        assert len(ids) == len(set(ids)), "a message is both live and archived"
        written = Counter((m["worker"], m["seq"]) for m in messages if "worker" in m)
        expected = sum(r["sessions"].get(session, 0) for r in reports)
        assert sum(1 for m in messages if "worker" in m) == 2 * expected
        assert set(written.values()) <= {2}, "a turn's user or assistant message is missing"
    seen = Counter(
        (m["worker"], m["seq"], m["id"]) for ms in sessions.values() for m in ms if "worker" in m
    )
    per_turn = Counter((worker, seq) for worker, seq, _ in seen)
    assert len(per_turn) == WORKERS * TURNS  # every turn of every worker, in some session
    assert set(per_turn.values()) == {2}  # its user message and its reply, once each
    assert summaries > 0  # the memories flushed while the replicas wrote
