"""The CLI on a real terminal: tmux runs it at 80 and 200 columns, its screen is captured.

Keys are whole on the screen (the column an operator copies), and what memories hold reaches
the terminal as text: an OSC title change in a message or an agent name does not retitle the
pane, escapes show as ``\\x1b``, Rich markup and emoji codes print as written. The same data
piped (``show``, ``tail``, ``ls``, ``export``) carries no raw control character either.

tmux comes from Debian (``.ci/run`` installs it); without it these tests skip, saying so,
except where ``COMPOZY_REQUIRE_TMUX=1`` (``.ci/run`` sets it when it could install tmux).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compozy_memory import MemoryManager, MemoryRegistry, connect
from compozy_memory._ops.cli import main
from compozy_memory.embedded import EmbeddedServer
from integration.memories import COUNTER
from integration.projects import chat_project

HOSTILE_TEXT = (  # title, clipboard (OSC 52), C1 CSI, clear screen, markup, emoji codes
    "hi \x1b]0;PWNED\x07 \x1b]52;c;cm0gLXJm\x07 \x9b31m \x1b[2J\x1b[H "
    "[red]x[/red] ticket:T-1: :smile:"
)
HOSTILE_AGENT = "bot\x1b]2;PWNED\x07[b]"
USERS = [
    "alice-with-a-very-long-user-identifier-0000000001",
    "alice-with-a-very-long-user-identifier-0000000002",
    "b" * 60,  # a key wider than 80 columns
]
CLI = str(Path(sys.executable).parent / "compozy-memory")
ROWS = "150"  # all the output fits: a line gone from the top means the screen was cleared


def tmux_binary() -> str:
    found = shutil.which("tmux")
    if found is None:
        if os.environ.get("COMPOZY_REQUIRE_TMUX") == "1":
            pytest.fail("COMPOZY_REQUIRE_TMUX=1 but tmux is not on PATH")
        pytest.skip("tmux is not on PATH (apt-get install tmux; .ci/run installs it)")
    return found


@pytest.fixture
async def seeded(valkey_server: EmbeddedServer, tmp_path: Path) -> tuple[str, str]:
    """(project, URL) with three memories of long keys, hostile text and agent names."""
    project = f"term-{uuid.uuid4().hex[:8]}"
    chat_project(tmp_path, project, key="customer-support:user:{{ .user }}")
    client = connect(valkey_server.url)
    manager = MemoryManager(MemoryRegistry.load(tmp_path), client, counter=COUNTER, flushing=False)
    for user in USERS:
        (memory,) = await manager.for_agent("bot", {"user": user, "agent": HOSTILE_AGENT})
        for n in range(2):
            await memory.append({"role": "user", "content": f"{HOSTILE_TEXT} {n}", "tokens": 7})
    await manager.aclose()
    await client.aclose()
    return project, valkey_server.url


def keys() -> list[str]:
    return [f"chat:customer-support:user:{user}" for user in USERS]


class Tmux:
    """A tmux server of this test's own (its own socket), killed at the end."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.socket = f"compozy-test-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [self.binary, "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def run(self, width: int, command: str, until: str, timeout: float = 60) -> str:
        """Run ``command`` in a fresh window ``width`` columns wide; return its screen (wrapped
        lines joined) once ``until`` shows, with the pane's title after it."""
        name = f"w{width}"
        # A fixed size, set before the command starts (a detached window may be resized
        # after its first command has read the size otherwise).
        self("-f", "/dev/null", "new-session", "-d", "-s", name, "-x", str(width), "-y", ROWS)
        self("set-option", "-t", name, "window-size", "manual")
        self("resize-window", "-t", name, "-x", str(width), "-y", ROWS)
        self("respawn-pane", "-k", "-t", name, f"stty size; {command}")
        deadline = time.monotonic() + timeout
        while True:
            screen = self("capture-pane", "-p", "-J", "-t", name)
            if until in screen or time.monotonic() > deadline:
                title = self("display-message", "-p", "-t", name, "#{pane_title}")
                return screen + "\n[title] " + title
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run([self.binary, "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    server = Tmux(tmux_binary())
    yield server
    server.close()


@pytest.mark.faults
@pytest.mark.parametrize("width", [80, 200])
async def test_keys_are_whole_and_data_is_text_at_80_and_200_columns(
    seeded: tuple[str, str], tmux: Tmux, width: int, record: Any
) -> None:
    project, url = seeded
    base = f"{CLI} --url {url}"
    verbs = ["ls", "show", "tail", "export"]
    command = (
        f"{base} ls -p {project}; {base} show -p {project} {keys()[2]} -n 1; "
        f"{base} tail -p {project} {keys()[0]} -n 1; {base} export -p {project} {keys()[1]}; "
        "echo DONE-MARK; sleep 60"
    )
    screen = await asyncio.to_thread(tmux.run, width, command, "DONE-MARK")
    assert "DONE-MARK" in screen, screen
    title = screen.rsplit("[title]", 1)[1]
    acted = [
        *(["the pane retitled"] if "PWNED" in title else []),
        *(["the screen cleared"] if not screen.startswith(f"{ROWS} {width}\n") else []),
        *(["markup or emoji rendered"] if "[red]x[/red] ticket:T-1: :smile:" not in screen else []),
    ]
    for key in keys():
        assert key in screen, screen  # whole, on one (joined) line
    assert "…" not in screen
    assert acted == [], screen
    assert "\\x1b]0;PWNED\\x07" in screen  # shown as text instead
    assert "\\x1b]2;PWNED\\x07[b]" in screen  # the agent name too
    for escape in ("\\x1b]52;c;", "\\x9b31m", "\\x1b[2J"):
        assert escape in screen, screen
    shown = screen.count("\\x1b]0;PWNED\\x07")
    record(
        group="adversarial-2",
        item=8,
        fault="message text and agent names holding OSC 52 clipboard write, title change, "
        f"clear screen, C1 CSI, Rich markup and emoji codes: {', '.join(verbs)} on a "
        f"{width}-column terminal (tmux)",
        engine="valkey",
        promise="what memories hold reaches the terminal as text: escapes shown escaped, "
        "markup and emoji codes as written",
        operations=len(verbs),
        acknowledged=len(verbs),
        lost=len(acted),
        duplicated=0,
        observed=f"the hostile message shown escaped {shown} times, the agent name escaped; "
        "pane title unchanged, screen not cleared, 'ticket:T-1: :smile:' printed as written",
    )
    if width == 200:  # the keys fit: a boxed table, numbers right-aligned under the header
        header = next(line for line in screen.splitlines() if "MESSAGES" in line)
        assert header.startswith("┃ KEY"), screen
        row = next(line for line in screen.splitlines() if keys()[0] in line)
        end = header.index("MESSAGES") + len("MESSAGES")
        assert row[end - 1] == "2", (header, row)
    else:  # they do not: one record a memory, the key alone on its line
        assert keys()[2] in screen.splitlines()


@pytest.mark.parametrize(
    "command",
    [
        ["ls"],
        ["ls", "--json"],
        ["ls", "--scan", "--json"],
        ["show", "{key}"],
        ["show", "{key}", "--json"],
        ["tail", "{key}"],
        ["tail", "{key}", "--json"],
        ["export", "{key}"],
        ["export", "{key}", "--format", "jsonl"],
    ],
)
def test_piped_output_carries_no_raw_control_character(
    seeded: tuple[str, str], command: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    project, url = seeded
    verb, *rest = command
    argv = [verb, "-p", project, *(a.replace("{key}", keys()[0]) for a in rest)]
    assert main(["--url", url, *argv]) == 0
    out = capfd.readouterr().out
    raw = [c for c in out if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    assert raw == []
    if ("--json" in command or "jsonl" in command) and "--scan" not in command:
        found = json.dumps([json.loads(line) for line in out.splitlines()])
        assert "\\u001b]" in found  # the same data to a parser, escapes included
