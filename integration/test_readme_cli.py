"""The README's command-line blocks, run as a user who ran `pip install compozy-memory` would:
in a fresh folder (no file of the repository at hand), each command in order, through the
console script, against a real server named by $COMPOZY_REDIS_URL. `tail -f` runs for a second
(it runs until Ctrl-C), `mcp` until its client closes its input (at once)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from compozy_memory.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "compozy-memory"


def readme_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    start = text.index("## The command line")
    end = text.index("## Guarantees")
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text[start:end], re.S | re.M):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPT.exists(), reason="no compozy-memory console script")
def test_every_readme_command_works_in_an_empty_folder(
    valkey_server: EmbeddedServer, tmp_path: Path
) -> None:
    commands = readme_commands()
    assert [c[1] for c in commands] == [
        "init", "validate", "import", "ls", "show", "tail", "acl", "mcp"
    ]  # fmt: skip
    env = {**os.environ, "COMPOZY_REDIS_URL": valkey_server.url, "COLUMNS": "200"}
    env.pop("COMPOZY_PROJECT", None)
    outputs = {}
    for words in commands:
        assert words[0] == "compozy-memory"
        argv = [str(SCRIPT), *words[1:]]
        if words[1] == "tail" and "-f" in words:
            argv += ["--timeout", "1"]
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, input="", capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, (words, done.stdout, done.stderr)
        outputs[words[1]] = done.stdout
    assert "OK: 3 memories, 5 agents" in outputs["validate"]
    assert "customer-support:user:42" in outputs["ls"]
    assert "ships to Lisbon within four days" in outputs["show"]
    assert "ships to Lisbon within four days" in outputs["tail"]
    assert outputs["acl"].startswith("ACL SETUSER support-bot reset on")
