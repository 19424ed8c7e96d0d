"""compozy-memory's commands on a 3-master Valkey cluster: memories spread over every node."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from redis.crc import key_slot

from compozy_memory import MemoryManager, MemoryRegistry, connect
from compozy_memory._ops.cli import main
from compozy_memory.embedded import EmbeddedCluster
from integration.memories import COUNTER

pytestmark = pytest.mark.cluster

PROJECT = """\
project: {project}
memories:
  - id: chat
    type: token_based
    max_tokens: 4000
    persistence: {{type: redis, ttl: 1h}}
    default_key_template: "user:{{{{ .user }}}}"
agents:
  - id: bot
    memory: chat
"""


async def test_ls_show_and_purge_on_a_cluster(
    valkey_cluster: EmbeddedCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = f"cli-{uuid.uuid4().hex[:10]}"
    (tmp_path / "compozy.yaml").write_text(PROJECT.format(project=project))
    client = connect(valkey_cluster.url, cluster=True)
    manager = MemoryManager(MemoryRegistry.load(tmp_path), client, counter=COUNTER, flushing=False)
    users = [f"u{n}" for n in range(30)]
    for n, user in enumerate(users):
        (memory,) = await manager.for_agent("bot", {"user": user, "agent": "bot"})
        await memory.append_many([{"role": "user", "content": "hi", "tokens": 2}] * (n % 3 + 1))
    await manager.sessions.flushed()  # `ls` reads the index: its last entries are sent
    slots = {key_slot(f"compozy:{project}:memory:{{chat:user:{u}}}:meta".encode()) for u in users}
    assert len({s * 3 // 16384 for s in slots}) == 3  # keys on every third of the slots
    base = ["--url", valkey_cluster.url, "--cluster"]

    def run(*argv: str) -> int:
        return main([*base, *argv])

    expected = {f"chat:user:{u}": (n % 3 + 1, 2 * (n % 3 + 1)) for n, u in enumerate(users)}
    for source in ([], ["--scan"]):
        assert await asyncio.to_thread(run, "ls", "-p", project, "--all", "--json", *source) == 0
        rows = json.loads(capsys.readouterr().out)["memories"]
        assert {r["key"]: (r["messages"], r["tokens"]) for r in rows} == expected
        assert all(r["ttl_ms"] > 0 for r in rows)
    assert await asyncio.to_thread(run, "show", "-p", project, "chat:user:u2", "--json") == 0
    assert json.loads(capsys.readouterr().out)["health"]["message_count"] == 3
    assert await asyncio.to_thread(run, "purge", "-p", project, "chat:user:u2", "--yes") == 0
    assert "purged chat:user:u2" in capsys.readouterr().out
    assert await asyncio.to_thread(run, "show", "-p", project, "chat:user:u2") == 5
    assert await asyncio.to_thread(run, "ls", "-p", project, "--all", "--scan", "--json") == 0
    assert len(json.loads(capsys.readouterr().out)["memories"]) == 29
    await manager.aclose()
    await client.aclose()
