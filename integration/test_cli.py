"""compozy-memory's commands against a live embedded Valkey: every command, and its errors."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compozy_memory import (
    MemoryInstance,
    MemoryManager,
    MemoryRegistry,
    connect,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import ttl_slack
from compozy_memory._ops.cli import main
from compozy_memory.embedded import EmbeddedServer, start_server
from integration.memories import COUNTER

CLI = "compozy_memory._ops.cli"
PROJECT = """\
project: {project}
memories:
  - id: chat
    type: token_based
    max_tokens: 400
    flushing_strategy: {{type: hybrid_summary, summarize_threshold: 0.8, summary_tokens: 60}}
    persistence: {{type: redis, ttl: 1h}}
    default_key_template: "user:{{{{ .user }}}}"
    summarizer: {{type: extractive}}
agents:
  - id: bot
    memory: chat
    memory_key: "user:{{{{ .user }}}}"
"""


@dataclass
class Fleet:
    url: str
    project: str
    folder: Path
    client: RedisClient
    manager: MemoryManager

    async def memory(self, user: str, turns: int, agent: str = "bot") -> MemoryInstance:
        """``user``'s memory, written through the manager (so it is in the session index)."""
        (handle,) = await self.manager.for_agent("bot", {"user": user, "agent": agent})
        for turn in range(turns):
            await handle.append_many(
                [
                    {"role": "user", "content": f"{user} asks question {turn}", "tokens": 5},
                    {"role": "assistant", "content": f"answer {turn} for {user}", "tokens": 5},
                ]
            )
        await self.manager.sessions.flushed()  # `ls` runs in another process
        return handle

    def run(self, *argv: str) -> int:
        return main(["--url", self.url, *argv])


@pytest.fixture
async def fleet(valkey_server: EmbeddedServer, tmp_path: Path) -> AsyncIterator[Fleet]:
    project = f"cli-{uuid.uuid4().hex[:10]}"
    (tmp_path / "compozy.yaml").write_text(PROJECT.format(project=project))
    client = connect(valkey_server.url)
    manager = MemoryManager(MemoryRegistry.load(tmp_path), client, counter=COUNTER, flushing=False)
    yield Fleet(valkey_server.url, project, tmp_path, client, manager)
    await manager.aclose()
    await client.aclose()


def out_json(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


async def test_ls_lists_the_index_newest_first(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    for user, turns in (("ann", 1), ("bob", 2), ("cy", 3)):
        await fleet.memory(user, turns, agent="bot" if user != "cy" else "other")
        await asyncio.sleep(0.01)  # distinct last-active times
    assert await asyncio.to_thread(fleet.run, "ls", "-p", fleet.project, "--json") == 0
    listed = out_json(capsys)
    assert listed["source"] == "index"
    rows = listed["memories"]
    assert [r["key"] for r in rows] == ["chat:user:cy", "chat:user:bob", "chat:user:ann"]
    assert [(r["messages"], r["tokens"]) for r in rows] == [(6, 30), (4, 20), (2, 10)]
    assert all(0 < r["ttl_ms"] <= 3_600_000 + ttl_slack(3_600_000) and r["exists"] for r in rows)
    assert rows[0]["last_active_ms"] >= rows[1]["last_active_ms"] >= rows[2]["last_active_ms"]
    assert set(rows[0]) == {"key", "agent", "messages", "tokens", "ttl_ms", "last_active_ms",
                            "exists"}  # fmt: skip
    assert await asyncio.to_thread(fleet.run, "ls", "-p", fleet.project, "--agent", "bot") == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split() == ["KEY", "AGENT", "MESSAGES", "TOKENS", "TTL", "LAST", "ACTIVE",
                               "(UTC)"]  # fmt: skip
    assert [line.split()[:4] for line in text[1:]] == [
        ["chat:user:bob", "bot", "4", "20"],
        ["chat:user:ann", "bot", "2", "10"],
    ]
    assert await asyncio.to_thread(fleet.run, "ls", "-p", fleet.project, "-n", "1", "--json") == 0
    assert [r["key"] for r in out_json(capsys)["memories"]] == ["chat:user:cy"]


async def test_ls_scan_finds_memories_the_index_does_not_know(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    await fleet.memory("indexed", 1)
    direct = MemoryInstance.open(fleet.client, project=fleet.project, key="direct key/1")
    result = await direct.append_many([{"role": "user", "content": "hi", "tokens": 3}] * 4)
    newest = (await direct.read(-1))[0]
    assert await asyncio.to_thread(fleet.run, "ls", "-p", fleet.project, "--json") == 0
    assert [r["key"] for r in out_json(capsys)["memories"]] == ["chat:user:indexed"]
    argv: tuple[str, ...] = ("ls", "-p", fleet.project, "--scan", "--all", "--json")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    rows = {r["key"]: r for r in out_json(capsys)["memories"]}
    argv = ("ls", "-p", fleet.project, "--scan", "-n", "1", "--json")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    assert [r["key"] for r in out_json(capsys)["memories"]] == ["direct_x20key_x2f1"]  # newest
    assert set(rows) == {"chat:user:indexed", "direct_x20key_x2f1"}
    row = rows["direct_x20key_x2f1"]
    assert (row["messages"], row["tokens"], row["ttl_ms"]) == (4, result.total_tokens, None)
    assert row["last_active_ms"] == newest.ts


async def test_prune_drops_only_the_entries_of_memories_that_are_gone(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = await fleet.memory("kept", 1)
    gone = await fleet.memory("gone", 1)
    expired = await fleet.memory("expired", 1)
    await fleet.client.unlink(*gone.keys.data)  # deleted by hand: the index still lists it
    await expired.set_ttl(0.05)
    await asyncio.sleep(0.2)
    assert await asyncio.to_thread(fleet.run, "ls", "-p", fleet.project, "--json") == 0
    rows = {r["key"]: r["exists"] for r in out_json(capsys)["memories"]}
    assert rows == {"chat:user:kept": True, "chat:user:gone": False, "chat:user:expired": False}
    assert await asyncio.to_thread(fleet.run, "prune", "-p", fleet.project, "--json") == 0
    assert out_json(capsys) == {"project": fleet.project, "pruned": 2, "entries_read": 3}
    assert await asyncio.to_thread(fleet.run, "ls", "-p", fleet.project, "--json") == 0
    assert [r["key"] for r in out_json(capsys)["memories"]] == ["chat:user:kept"]
    assert await kept.len() == 2  # untouched
    assert await asyncio.to_thread(fleet.run, "prune", "-p", fleet.project) == 0
    assert "pruned 0 entries" in capsys.readouterr().out


async def test_show_prints_health_and_the_last_messages(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    await fleet.memory("ann lee", 3)
    argv: tuple[str, ...] = (
        "show",
        "-p",
        fleet.project,
        "chat:user:ann_x20lee",
        "-n",
        "2",
        "--json",
    )
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    shown = out_json(capsys)
    assert shown["key"] == "chat:user:ann_x20lee"
    assert shown["health"]["message_count"] == 6
    assert shown["health"]["token_count"] == 30
    assert shown["health"]["ttl_ms"] > 0
    assert [m["text"] for m in shown["messages"]] == ["ann lee asks question 2",
                                                      "answer 2 for ann lee"]  # fmt: skip
    assert [m["id"] for m in shown["messages"]] == [5, 6]
    # By its text instead of its stored key; plain columns when not on a terminal.
    argv = ("show", "-p", fleet.project, "chat:user:ann lee", "--text", "-n", "1")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    text = capsys.readouterr().out
    assert "messages   6" in text
    assert "tokens     30" in text
    assert text.rstrip().endswith("assistant [5 tok] answer 2 for ann lee")
    assert "#6 " in text


async def test_tail_follows_new_messages_until_its_count(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await fleet.memory("ann", 1)
    argv: tuple[str, ...] = ("tail", "-p", fleet.project, "chat:user:ann", "-n", "1", "-f",
                             "--count", "3", "--timeout", "20", "--interval", "0.02",
                             "--json")  # fmt: skip
    follower = asyncio.create_task(asyncio.to_thread(fleet.run, *argv))
    await asyncio.sleep(0.5)
    for n in range(4):
        await memory.append({"role": "user", "content": f"live {n}", "tokens": 2})
        await asyncio.sleep(0.05)
    assert await follower == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [m["text"] for m in lines] == ["answer 0 for ann", "live 0", "live 1", "live 2"]
    # --timeout ends a follow that sees nothing new.
    argv = ("tail", "-p", fleet.project, "chat:user:ann", "-n", "0", "-f", "--timeout", "0.3")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    assert capsys.readouterr().out == ""


async def test_export_writes_markdown_and_jsonl_that_imports_back(
    fleet: Fleet, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    await fleet.memory("ann", 2)
    argv: tuple[str, ...] = ("export", "-p", fleet.project, "chat:user:ann")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    markdown = capsys.readouterr().out
    assert "ann asks question 1" in markdown
    assert "answer 1 for ann" in markdown
    target = tmp_path / "ann.jsonl"
    argv = ("export", "-p", fleet.project, "chat:user:ann", "--format", "jsonl", "-o", str(target))
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    argv = ("export", "-p", fleet.project, "chat:user:ann", "--json")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    assert capsys.readouterr().out == target.read_text()  # --json: JSON Lines to stdout
    copy = MemoryInstance.open(fleet.client, project=fleet.project, key="copy")
    assert await copy.import_transcript(target.read_text()) == 4
    assert await copy.export_transcript("jsonl") == target.read_text()


async def test_flush_runs_a_flush_and_reports_it(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await fleet.memory("ann", 40)  # 400 tokens: over the 80% threshold of 400
    argv: tuple[str, ...] = (
        "flush",
        "-p",
        fleet.project,
        "chat:user:ann",
        "--config",
        str(fleet.folder),
        "--json",
    )
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    report = out_json(capsys)
    assert report["outcome"] == "summarised"
    assert report["committed"] is True
    assert report["summarized_count"] > 0
    health = await memory.health()
    assert (health.flush_count, health.summaries) == (1, 1)
    assert health.token_count == 400 - report["removed_tokens"]
    argv = ("flush", "-p", fleet.project, "chat:user:ann", "--max-tokens", "50")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    assert "outcome           summarised" in capsys.readouterr().out
    assert (await memory.health()).flush_count == 2
    assert await asyncio.to_thread(fleet.run, "flush", "-p", fleet.project, "chat:user:ann") == 2


async def test_clear_and_purge_ask_first(
    fleet: Fleet, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await fleet.memory("ann", 2)
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert await asyncio.to_thread(fleet.run, "clear", "-p", fleet.project, "chat:user:ann") == 6
    assert "not confirmed" in capsys.readouterr().err
    assert await memory.len() == 4
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no answer at all: no
    assert await asyncio.to_thread(fleet.run, "purge", "-p", fleet.project, "chat:user:ann") == 6
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert await asyncio.to_thread(fleet.run, "clear", "-p", fleet.project, "chat:user:ann") == 0
    assert "4 live messages removed" in capsys.readouterr().out
    assert await memory.len() == 0
    assert (await memory.health()).last_id == 4  # meta stays: ids stay monotonic
    await memory.append({"role": "user", "content": "again", "tokens": 1})
    argv: tuple[str, ...] = ("purge", "-p", fleet.project, "chat:user:ann", "--yes", "--json")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    assert out_json(capsys)["deleted_keys"] >= 2
    assert await fleet.client.keys(f"compozy:{fleet.project}:memory:*") == []
    assert await asyncio.to_thread(fleet.run, "ls", "-p", fleet.project, "--json") == 0
    assert out_json(capsys)["memories"] == []  # and out of the session index


async def test_purge_removes_big_keys_through_one_function(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    """lua/purge.lua UNLINKs every key: the server frees big ones in the background."""
    memory = MemoryInstance.open(fleet.client, project=fleet.project, key="big")
    await memory.append_many(
        [{"role": "user", "content": f"m {i}", "tokens": 1} for i in range(300)]
    )
    await memory.trim(keep_messages=50)  # 250 to the archive and its index
    argv: tuple[str, ...] = ("purge", "-p", fleet.project, "big", "--yes", "--json")
    assert await asyncio.to_thread(fleet.run, *argv) == 0
    report = out_json(capsys)
    assert report["items"] >= 300
    assert await fleet.client.keys(f"compozy:{fleet.project}:memory:*") == []


@pytest.mark.parametrize(
    "command",
    [
        ["show"],
        ["tail"],
        ["export"],
        ["flush", "--max-tokens", "10"],
        ["clear", "--yes"],
        ["purge", "--yes"],
    ],
)
def test_a_missing_memory_is_exit_5(
    valkey_server: EmbeddedServer, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    argv = ["--url", valkey_server.url, command[0], "-p", "nobody", "no-such-key", *command[1:]]
    assert main(argv) == 5
    assert "no memory 'no-such-key' in project 'nobody'" in capsys.readouterr().err


UNREACHABLE = [["ls", "-p", "acme"], ["show", "-p", "acme", "k"], ["install"],
               ["purge", "-p", "acme", "k", "--yes"]]  # fmt: skip


@pytest.mark.parametrize("command", UNREACHABLE)
def test_an_unreachable_server_is_exit_3(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main(["--url", "redis://127.0.0.1:1/0", *command]) == 3
    assert "cannot reach redis://127.0.0.1:1/0" in capsys.readouterr().err


@pytest.fixture(scope="module")
def locked_server() -> Any:
    with start_server() as server:

        async def protect() -> None:
            client = connect(server.url)
            await client.config_set("requirepass", "s3cret")
            await client.aclose()

        asyncio.run(protect())
        yield server


def test_a_wrong_or_missing_password_is_exit_4(
    locked_server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    port = locked_server.port
    for url in (f"redis://:wrong@127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/0"):
        assert main(["--url", url, "ls", "-p", "acme"]) == 4
        err = capsys.readouterr().err
        assert err.startswith("error: authentication failed at redis://")
        assert "wrong" not in err  # the password is not printed
    assert main(["--url", f"redis://:s3cret@127.0.0.1:{port}/0", "ls", "-p", "acme"]) == 0


def test_an_acl_user_refused_a_command_is_exit_7(
    valkey_server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    async def setup() -> None:
        client = connect(valkey_server.url)
        await client.execute_command(
            "ACL", "SETUSER", "cli-reader", "reset", "on", ">pw", "~compozy:acme:*", "+@read",
            "+ping",
        )  # fmt: skip
        await MemoryInstance.open(client, project="acme", key="ro").append(
            {"role": "user", "content": "hi", "tokens": 1}
        )
        await client.aclose()

    asyncio.run(setup())
    url = f"redis://cli-reader:pw@127.0.0.1:{valkey_server.port}/0"
    # Reads are allowed (EXISTS, TYPE), the scripts and deletes are not.
    assert main(["--url", url, "show", "-p", "acme", "ro"]) == 7
    assert main(["--url", url, "purge", "-p", "acme", "ro", "--yes"]) == 7
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: permission denied: health: User cli-reader has no perm")
    assert err[1].startswith("error: permission denied: purge: User cli-reader has no perm")

    async def teardown() -> None:
        client = connect(valkey_server.url)
        await client.execute_command("ACL", "DELUSER", "cli-reader")
        await client.aclose()

    asyncio.run(teardown())


def test_usage_errors_are_exit_2(
    valkey_server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", valkey_server.url]
    assert main([*url, "ls", "-p", "bad project"]) == 2
    assert "project id 'bad project' is invalid" in capsys.readouterr().err
    assert main([*url, "show", "-p", "acme", "user 1"]) == 2
    assert "add --text" in capsys.readouterr().err
    assert main([*url, "ls"]) == 2  # no --project
    assert main([*url, "flush", "-p", "acme", "k", "--max-tokens", "0"]) == 2
    assert main(["--url", "http://x", "ls", "-p", "acme"]) == 2


def test_install_loads_the_library_and_reports_as_json(
    valkey_server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--url", valkey_server.url, "install", "--json"]) == 0
    report = out_json(capsys)
    assert report["library"].startswith("compozy")
    assert main(["install", "--url", valkey_server.url]) == 0  # the command's own --url


def test_demo_runs_a_fleet_on_an_embedded_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--replicas", "2", "--conversations", "2", "--turns", "30", "--json"]) == 0
    report = out_json(capsys)
    assert report["complete"] is True
    assert [r["appends"] for r in report["replicas"]] == [60, 60]
    assert all(r["flushes"] >= 1 for r in report["memories"])  # 30 turns pass the budget
    assert sum(r["flushes"] + r["skipped"] for r in report["replicas"]) >= 1


async def test_tail_follows_until_ctrl_c(fleet: Fleet) -> None:
    """A real process: -f prints what lands, and Ctrl-C (SIGINT) ends it with exit 0."""
    memory = await fleet.memory("ann", 1)
    script = Path(sys.executable).parent / "compozy-memory"
    command = [str(script)] if script.exists() else [sys.executable, "-m", CLI]
    process = await asyncio.create_subprocess_exec(
        *command, "--url", fleet.url, "tail", "-p", fleet.project, "chat:user:ann", "-n", "1",
        "-f", "--interval", "0.02", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    first = await asyncio.wait_for(process.stdout.readline(), 60)
    assert first.decode().rstrip().endswith("answer 0 for ann")
    await memory.append({"role": "user", "content": "landed", "tokens": 1})
    landed = await asyncio.wait_for(process.stdout.readline(), 30)
    assert landed.decode().rstrip().endswith("user [1 tok] landed")
    process.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err


@pytest.mark.faults
async def test_clear_keeps_the_memorys_ttl(fleet: Fleet, record: Any) -> None:
    memory = await fleet.memory("ann", 2)  # the resource's TTL: 1 h
    before = await fleet.client.pttl(memory.keys.meta)
    assert 3_500_000 < before <= 3_600_000 + ttl_slack(3_600_000)
    argv: tuple[str, ...] = ("clear", "-p", fleet.project, "chat:user:ann", "--yes")
    exits = [await asyncio.to_thread(fleet.run, *argv)]
    after = await fleet.client.pttl(memory.keys.meta)
    assert 0 < after <= before  # still expiring, not later than it would have
    assert await memory.len() == 0
    plain = MemoryInstance.open(fleet.client, project=fleet.project, key="no-ttl")
    await plain.append({"role": "user", "content": "x", "tokens": 1})
    exits.append(await asyncio.to_thread(fleet.run, "clear", "-p", fleet.project, "no-ttl", "-y"))
    assert exits == [0, 0]
    plain_after = await fleet.client.pttl(plain.keys.meta)
    assert plain_after == -1  # none before, none after
    record(
        group="adversarial-2",
        item=9,
        fault="compozy-memory clear of a memory whose meta had a 1 h TTL, and of one with none",
        engine="valkey",
        promise="clear keeps the memory's TTL: it still expires, no later than before; one "
        "without a TTL gets none",
        operations=len(exits),
        acknowledged=exits.count(0),
        lost=int(after < 0),  # a TTL clear dropped
        duplicated=int(plain_after >= 0),  # a TTL clear made up
        observed=f"TTL {before / 3_600_000:.3f} h before clear, {after / 3_600_000:.3f} h after; "
        f"the memory without a TTL still has none (PTTL {plain_after})",
    )


async def test_ctrl_c_at_a_confirmation_prompt_aborts_with_130(fleet: Fleet) -> None:
    memory = await fleet.memory("ann", 1)
    script = Path(sys.executable).parent / "compozy-memory"
    command = [str(script)] if script.exists() else [sys.executable, "-m", CLI]
    for verb in ("clear", "purge"):
        process = await asyncio.create_subprocess_exec(
            *command, "--url", fleet.url, verb, "-p", fleet.project, "chat:user:ann",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, preexec_fn=_interruptible,
        )  # fmt: skip
        assert process.stderr is not None
        asked = await asyncio.wait_for(process.stderr.readuntil(b"[y/N]: "), 60)
        assert b"chat:user:ann" in asked
        process.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 130, err
        assert err.decode().strip() == "aborted"
    assert await memory.len() == 2  # nothing was cleared or purged


def _interruptible() -> None:
    """In the child: Ctrl-C as a terminal gives it, even when this test runs where SIGINT is
    ignored (a background job), which the child would otherwise inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_demo_against_an_unreachable_server_is_one_line_and_exit_3(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--url", "redis://127.0.0.1:1/0", "demo", "--replicas", "2"]) == 3
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("error: cannot reach redis://127.0.0.1:1/0")
    assert captured.out == ""
