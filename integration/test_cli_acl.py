"""The ACL lines `compozy-memory acl` prints, against every command of the CLI they are meant
to allow: a real server, the user made with the printed line, the command run as that user.

Read-only line: ls, ls --agent, show, tail, tail -f, export (Markdown, JSON Lines, to a file),
and ls --scan when the line was made with --allow-scan; flush, clear and purge are refused
(exit 7) and change nothing. Read-write line: all of them. The same on a Cluster with the
line `--cluster acl` prints, set on every node.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from compozy_memory import MemoryManager, MemoryRegistry
from compozy_memory._io.delivery import install
from compozy_memory._ops.cli import main
from integration.engines import EngineSpec, spec_for
from integration.memories import COUNTER
from integration.projects import chat_project

READS: list[list[str]] = [
    ["ls"],
    ["ls", "--agent", "bot"],
    ["show", "{key}", "-n", "2"],
    ["tail", "{key}", "-n", "2"],
    ["tail", "{key}", "-n", "1", "-f", "--timeout", "0.2", "--interval", "0.05"],
    ["export", "{key}"],
    ["export", "{key}", "--json"],
    ["export", "{key}", "--format", "jsonl", "-o", "{file}"],
]
SCAN = ["ls", "--scan", "--all"]
WRITES: list[list[str]] = [
    ["flush", "{key}", "--max-tokens", "20"],
    ["clear", "{key}", "--yes"],
    ["purge", "{key}", "--yes"],
]


@dataclass
class Tenant:
    engine: EngineSpec
    project: str
    folder: Path

    def line(self, user: str, *extra: str) -> list[str]:
        """The ACL SETUSER line `compozy-memory acl` prints, as tokens."""
        flags = ["--cluster"] if self.engine.cluster else []
        argv = [*flags, "acl", "-p", self.project, "--user", user, "--password", "pw", "--json"]
        code, out = run_cli([*argv, *extra])
        assert code == 0, out
        command: list[str] = json.loads(out)["command"]
        return command

    async def create(self, user: str, *extra: str) -> str:
        """Run the printed line on every node; return the user's URL."""
        line = self.line(user, *extra)
        for node in self.engine.node_clients():
            await node.execute_command(*line)  # type: ignore[no-untyped-call]
            await node.aclose()
        return self.engine.url.replace("redis://", f"redis://{user}:pw@")

    async def seed(self, user: str, turns: int = 4) -> str:
        """A memory of ``user``'s, written through the manager as the admin; its stored key."""
        client = self.engine.client()
        manager = MemoryManager(
            MemoryRegistry.load(self.folder), client, counter=COUNTER, flushing=False
        )
        (memory,) = await manager.for_agent("bot", {"user": user})
        for turn in range(turns):
            await memory.append_many(
                [
                    {"role": "user", "content": f"question {turn} " * 6, "tokens": 12},
                    {"role": "assistant", "content": f"answer {turn} " * 6, "tokens": 12},
                ]
            )
        await manager.aclose()  # sends the session-index entries still pending
        await client.aclose()
        return memory.keys.key

    def run(self, url: str, argv: list[str], key: str, file: Path) -> tuple[int, str]:
        flags = ["--url", url, *(["--cluster"] if self.engine.cluster else [])]
        command, *rest = argv
        filled = [a.replace("{key}", key).replace("{file}", str(file)) for a in rest]
        return run_cli([*flags, command, "-p", self.project, *filled])


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in this process; (exit code, what it printed on stdout and stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


async def installed(engine: EngineSpec) -> None:
    """The operator's step: project users may not load the functions."""
    for node in engine.node_clients():
        await install(node)
        await node.aclose()


@pytest.fixture(params=["valkey", "redis7", pytest.param("cluster", marks=pytest.mark.cluster)])
async def tenant(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Tenant]:
    name = {"cluster": "valkey_cluster"}.get(request.param, f"{request.param}_server")
    engine = spec_for(request.param, request.getfixturevalue(name))
    project = f"acl{uuid.uuid4().hex[:10]}"
    chat_project(tmp_path, project, max_tokens=400)
    await installed(engine)
    yield Tenant(engine, project, tmp_path)
    for node in engine.node_clients():
        users = [u if isinstance(u, str) else u.decode() for u in await node.acl_users()]
        for user in users:
            if user.startswith(project):
                await node.acl_deluser(user)
        await node.aclose()


async def test_the_read_only_line_allows_every_read_command(tenant: Tenant, tmp_path: Path) -> None:
    key = await tenant.seed("ann")
    url = await tenant.create(f"{tenant.project}-reader", "--read-only", "--allow-scan")
    for argv in [*READS, SCAN]:
        code, out = await asyncio.to_thread(tenant.run, url, argv, key, tmp_path / "t.jsonl")
        assert code == 0, (argv, out)
        if argv[0] == "ls":
            assert key in out, (argv, out)
    assert (tmp_path / "t.jsonl").read_text().count("\n") == 1 + 8  # a header, the messages
    before = await health_of(tenant, key)
    for argv in WRITES:
        code, out = await asyncio.to_thread(tenant.run, url, argv, key, tmp_path / "x")
        assert code == 7, (argv, out)
        assert out.startswith("error: permission denied: "), out
        assert "@user_function" not in out  # no internals
    assert await health_of(tenant, key) == before


async def test_without_allow_scan_ls_scan_is_refused_with_the_way_out(tenant: Tenant) -> None:
    key = await tenant.seed("bob", turns=1)
    url = await tenant.create(f"{tenant.project}-plain", "--read-only")
    code, out = await asyncio.to_thread(tenant.run, url, SCAN, key, Path("unused"))
    assert code == 7
    assert "acl --allow-scan" in out
    assert len(out.splitlines()) == 1


async def test_the_read_write_line_allows_every_command(tenant: Tenant, tmp_path: Path) -> None:
    key = await tenant.seed("cy")
    url = await tenant.create(f"{tenant.project}-writer", "--allow-scan")
    for argv in [*READS, SCAN, *WRITES]:
        code, out = await asyncio.to_thread(tenant.run, url, argv, key, tmp_path / "t.jsonl")
        assert code == 0, (argv, out)
    client = tenant.engine.client()
    assert await client.exists(f"compozy:{tenant.project}:memory:{{{key}}}:meta") == 0  # purged
    await client.aclose()


async def health_of(tenant: Tenant, key: str) -> tuple[int, int, int]:
    client = tenant.engine.client()
    meta = f"compozy:{tenant.project}:memory:{{{key}}}:meta"
    tokens, count, last_id = await client.hmget(meta, "tokens", "count", "last_id")
    await client.aclose()
    return int(tokens or 0), int(count or 0), int(last_id or 0)
