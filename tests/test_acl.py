"""compozy-memory acl: every value that reaches the ACL line is one plain token."""

from __future__ import annotations

import re

import pytest

from compozy_memory._ops.acl import (
    CLIENT_CONNECTION,
    CLIENT_READS,
    CLIENT_WRITES,
    READ_COMMANDS,
    WRITE_COMMANDS,
    acl_setuser,
)
from compozy_memory._ops.cli import main
from compozy_memory._wire.scripts import SCRIPT_NAMES, script
from compozy_memory.errors import ConfigurationError, UsageError

BAD_PASSWORDS = ["s3cret nopass", "a\tb", "a\nb", "", "x\x00", 'a"b c"', "it's", "back\\slash",
                 "p\u00e4ss", "\x1b[0m"]  # fmt: skip
BAD_USERS = ["", "bot nopass", "bot\n", ">pw", "<pw", "#hash", "!x", "~*", "%RW~*", "&*", "+@all",
             "-@all", "@all", "bot\x00", "'bot'", "\u00e9"]  # fmt: skip


@pytest.mark.parametrize("password", BAD_PASSWORDS)
def test_passwords_that_would_become_other_rules_are_refused(password: str) -> None:
    with pytest.raises(UsageError, match="password"):
        acl_setuser("bot", "acme", read_only=True, password=password)


@pytest.mark.parametrize("user", BAD_USERS)
def test_user_names_that_are_not_one_plain_token_are_refused(user: str) -> None:
    with pytest.raises(UsageError, match="user name"):
        acl_setuser(user, "acme", read_only=True, password="pw")


@pytest.mark.parametrize("project", ["acme\n", "ac me", "acme:x", "*", "acme*", "-acme"])
def test_project_ids_are_checked_before_they_reach_a_key_pattern(project: str) -> None:
    with pytest.raises(ConfigurationError, match="project id"):
        acl_setuser("bot", project, read_only=True, password="pw")


def test_plain_values_pass_and_every_rule_is_one_token() -> None:
    line = acl_setuser("support-bot", "acme", read_only=False, password="Zx9!#$%&()*+,-./:;<=>?@")
    assert line[:6] == ["ACL", "SETUSER", "support-bot", "reset", "on", ">Zx9!#$%&()*+,-./:;<=>?@"]
    assert all(token and not any(c.isspace() for c in token) for token in line)
    assert acl_setuser("bot", "acme", read_only=True, password="<password>")[5] == "><password>"


@pytest.mark.parametrize(
    "args",
    [
        ["--password", "s3cret nopass"],
        ["--user", "bot nopass"],
        ["--user", "-@all"],
        ["--project", "acme\n"],
    ],
)
def test_the_cli_refuses_them_with_exit_2_and_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    options = {
        "--project": "acme",
        "--user": "bot",
        **dict(zip(args[::2], args[1::2], strict=True)),
    }
    argv = ["acl", *(f"{name}={value}" for name, value in options.items())]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ")
    assert err.count("\n") == 1, err


def test_the_acl_command_prints_a_usable_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acl", "--project", "acme", "--user", "bot", "--read-only"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("ACL SETUSER bot reset on ><password> ")
    assert "%R~compozy:acme:memory:*" in line
    assert "+rpush" not in line
    assert main(["acl", "--project", "bad project", "--user", "bot"]) == 2
    assert "project id" in capsys.readouterr().err


# -- the line grants what the library needs, and nothing else -------------------------------

_CALLED = re.compile(r"redis\.p?call\(\s*'([A-Z]+)'(?:\s*,\s*'([A-Za-z]+)')?")


def _called(source: str) -> set[str]:
    """The commands a script's source calls, as ACL rules name them."""
    out: set[str] = set()
    for command, sub in _CALLED.findall(source):
        if command in ("MEMORY", "INFO"):
            out.add(f"{command.lower()}|{sub.lower()}")
        else:
            out.add(command.lower())
    # Commands chosen at run time (lua/purge.lua's sizes).
    out |= {c.lower() for c in re.findall(r"\b(LLEN|HLEN|ZCARD) = \{", source)}
    return out


def test_the_lines_grant_what_the_functions_and_the_client_call_and_no_more() -> None:
    """Redis checks a function's commands against its caller's rules, so the read-only line
    holds every command a read-only script calls and the read-write line every command any
    script calls, plus what the client sends itself (CLIENT_READS, CLIENT_WRITES); a command
    nothing calls is not granted."""
    read_only = set().union(
        *(_called(script(n).source) for n in SCRIPT_NAMES if script(n).read_only)
    )
    writing = set().union(*(_called(script(n).source) for n in SCRIPT_NAMES))
    granted_read = set(READ_COMMANDS)
    granted_write = set(WRITE_COMMANDS)
    assert read_only <= granted_read, read_only - granted_read
    assert writing <= granted_read | granted_write, writing - granted_read - granted_write
    assert not granted_read & granted_write
    needed_read = read_only | set(CLIENT_READS) | set(CLIENT_CONNECTION)
    assert granted_read == needed_read, (granted_read - needed_read, needed_read - granted_read)
    needed_write = (writing | set(CLIENT_WRITES)) - granted_read
    assert granted_write == needed_write, (
        granted_write - needed_write,
        needed_write - granted_write,
    )
