"""compozy-memory's command line without a server: options, usage errors, exit codes,
render-key and validate --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from redis import exceptions as redis_errors

from compozy_memory._ops.cli import main
from compozy_memory._ops.common import exit_code, redact
from compozy_memory._ops.render_key import parse_context
from compozy_memory.errors import (
    BackendPermissionError,
    BackendUnavailableError,
    ConfigFileError,
    MemoryNotFoundError,
    TemplateError,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "project"


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"compozy-memory {version('compozy-memory')}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["no-such-command"],
        ["ls"],  # no --project
        ["ls", "-p", "acme", "--limit", "0"],
        ["show", "-p", "acme"],  # no key
        ["export", "-p", "acme", "k", "--format", "pdf"],
        ["render-key", str(EXAMPLES), "support-bot", "--set", "novalue"],
        ["render-key", str(EXAMPLES), "support-bot", "--context", "[1]"],
        ["ls", "-p", "acme", "--scan", "--agent", "bot"],
    ],
)
def test_usage_errors_exit_2_before_any_connection(argv: list[str]) -> None:
    # The URL would refuse (exit 3): exit 2 shows nothing was attempted.
    assert main(["--url", "redis://127.0.0.1:1/0", *argv]) == 2


def test_the_url_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COMPOZY_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("COMPOZY_PROJECT", "acme")
    assert main(["ls"]) == 3
    assert "cannot reach redis://127.0.0.1:1/0" in capsys.readouterr().err


def test_render_key_shows_each_memory_key_of_an_agent(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["render-key", str(EXAMPLES), "sql-analyst", "--set", "workflow.id=wf 7", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["context"] == {"workflow": {"id": "wf 7"}}
    assert report["memories"] == [
        {
            "memory": "sql-agent",
            "mode": "read-write",
            "template": "session:{{ .workflow.id }}",
            "text": "sql-agent:session:wf 7",
            "key": "sql-agent:session:wf_x207",
            "prefix": "compozy:acme:memory:{sql-agent:session:wf_x207}",
        },
        {
            "memory": "project-knowledge",
            "mode": "read-only",
            "template": "project:{{ .project.id }}",
            "text": "project-knowledge:project:acme",
            "key": "project-knowledge:project:acme",
            "prefix": "compozy:acme:memory:{project-knowledge:project:acme}",
        },
    ]
    assert (
        main(["render-key", str(EXAMPLES), "support-bot", "-s", "workflow.input.user_id=al"]) == 0
    )
    out = capsys.readouterr().out
    assert "compozy:acme:memory:{customer-support:user:al}" in out


def test_render_key_reports_a_missing_variable_and_an_unknown_agent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["render-key", str(EXAMPLES), "support-bot"]) == 2
    assert "needs workflow.input.user_id" in capsys.readouterr().err
    assert main(["render-key", str(EXAMPLES), "nobody"]) == 5
    assert "nobody" in capsys.readouterr().err


def test_parse_context_nests_dotted_names() -> None:
    context = parse_context(["a.b=1", "a.c=x=y", "d=2"], '{"e": {"f": true}}')
    assert context == {"e": {"f": True}, "a": {"b": "1", "c": "x=y"}, "d": "2"}


def test_validate_json_lists_memories_and_agents(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert report["project"] == "acme"
    assert sorted(report["memories"]) == ["customer-support", "project-knowledge", "sql-agent"]
    assert report["memories"]["sql-agent"]["max_tokens"] == 60000
    assert report["agents"]["greeter"]["memories"] == []


def test_validate_json_lists_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "compozy.yaml").write_text("project: acme\nmemories: 3\n")
    assert main(["validate", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["problems"]
    assert all(p.startswith("compozy.yaml") for p in report["problems"])


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BackendPermissionError("connect: WRONGPASS invalid username-password pair"), 4),
        (BackendPermissionError("connect: Authentication required."), 4),
        (BackendPermissionError("purge: NOPERM User bot has no permissions"), 7),
        (BackendUnavailableError("connect: Error 111 connecting"), 3),
        (redis_errors.AuthenticationError("invalid password"), 4),
        (redis_errors.RedisClusterException("Redis Cluster cannot be connected"), 3),
        (MemoryNotFoundError("no memory 'x'"), 5),
        (TemplateError("needs user"), 2),
        (ConfigFileError([]), 1),
    ],
)
def test_errors_map_to_their_exit_codes(error: BaseException, code: int) -> None:
    assert exit_code(error) == code


def test_passwords_are_not_shown_in_messages() -> None:
    assert redact("redis://bot:s3cret@host:6379/0") == "redis://bot:***@host:6379/0"
    assert redact("rediss://:s3cret@host/0") == "rediss://:***@host/0"
    assert redact("redis://host:6379/0") == "redis://host:6379/0"


def test_acl_json_gives_the_line_as_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acl", "--project", "acme", "--user", "bot", "--read-only", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["command"][:4] == ["ACL", "SETUSER", "bot", "reset"]
    assert "%R~compozy:acme:memory:*" in report["command"]


def test_a_short_flag_means_one_thing_in_every_command() -> None:
    import typer

    from compozy_memory._ops.cli import app

    meanings: dict[str, set[str]] = {}
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    for command in [root, *root.commands.values()]:
        for param in command.params:
            longs = [o for o in param.opts if o.startswith("--")]
            for short in (o for o in param.opts if not o.startswith("--")):
                meanings.setdefault(short, set()).update(longs)
    # -n is "how many" everywhere: rows in ls (--limit), messages in show and tail (--last).
    assert meanings.pop("-n") == {"--limit", "--last"}
    assert {s: m for s, m in meanings.items() if len(m) > 1} == {}
    assert meanings["-p"] == {"--project"}
    assert meanings["-f"] == {"--follow"}


def test_acl_takes_p_and_the_global_cluster_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acl", "-p", "acme", "--user", "bot", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["command"]
    assert "~compozy:acme:memory:*" in plain
    assert "+cluster|slots" not in plain
    assert "+scan" not in plain  # SCAN would show every project's key names
    assert main(["--cluster", "acl", "-p", "acme", "--user", "bot", "--json"]) == 0
    assert "+cluster|slots" in json.loads(capsys.readouterr().out)["command"]
    assert main(["acl", "-p", "acme", "--user", "bot", "--allow-scan", "--json"]) == 0
    assert "+scan" in json.loads(capsys.readouterr().out)["command"]


def test_acl_reads_the_project_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COMPOZY_PROJECT", "envproj")
    assert main(["acl", "--user", "bot"]) == 0
    assert "~compozy:envproj:memory:*" in capsys.readouterr().out


def test_export_to_a_missing_folder_is_one_line_before_any_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing" / "dir" / "out.md"
    argv = ["--url", "redis://127.0.0.1:1/0", "export", "-p", "acme", "k", "-o", str(target)]
    assert main(argv) == 2  # not 3: nothing was sent
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: --output ")
    assert "Traceback" not in err


def test_server_internals_are_kept_out_of_error_text() -> None:
    from compozy_memory._ops.messages import operator_text

    said = (
        "health: ACL failure in script: User t1 has no permissions to run the 'hgetall' "
        "command script: cm_154ae4366d6e_health, on @user_function:759."
    )
    assert operator_text(said) == (
        "health: User t1 has no permissions to run the 'hgetall' command"
    )
    piped = (
        "ls --scan: Command # 1 (HMGET compozy:a:memory:{k}:meta tokens count) of pipeline "
        "caused error: (\"User t2 has no permissions to run the 'hmget' command\",)"
    )
    assert (
        operator_text(piped) == "ls --scan: User t2 has no permissions to run the 'hmget' command"
    )
    assert operator_text("cm_0123456789ab_context failed") == "context failed"
    assert operator_text("bad \x1b]0;x\x07") == "bad \\x1b]0;x\\x07"


def test_a_stored_value_of_no_accepted_type_is_one_clear_line() -> None:
    from pydantic import ValidationError

    from compozy_memory import Message
    from compozy_memory._ops.messages import describe_invalid

    with pytest.raises(ValidationError) as caught:
        Message.model_validate_json('{"id":4,"ts":1,"role":"user","content":5}')
    text = describe_invalid(caught.value)
    assert text == (
        "stored data this version cannot read (Message): content: int is none of its accepted types"
    )
    assert "\n" not in text
    assert "pydantic" not in text


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_shell_completion_completes_commands_and_options(
    shell: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """typer's completion protocol, as the script `--install-completion` adds calls it."""
    monkeypatch.setenv("_COMPOZY_MEMORY_COMPLETE", f"complete_{shell}")
    for words, expected in (
        ("compozy-memory ta", "tail"),
        ("compozy-memory tail --fo", "--follow"),
    ):
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - 1))
        monkeypatch.setenv("_TYPER_COMPLETE_ARGS", words)
        with pytest.raises(SystemExit) as done:
            main([])
        assert done.value.code == 0
        assert expected in capsys.readouterr().out


def test_flags_show_no_value_placeholder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flag takes no value, so its help row has none (typer would print `<bool>`)."""
    monkeypatch.setenv("COLUMNS", "160")
    from compozy_memory._ops.cli import app

    names = ["", *(c.name or "" for c in app.registered_commands)]
    assert "ls" in names
    for name in names:
        assert main([name, "--help"] if name else ["--help"]) == 0
        text = capsys.readouterr().out
        assert "--help" in text
        assert "<bool>" not in text, name
    assert main(["ls", "--help"]) == 0
    # Options that take a value still say which (typer 0.29 writes <int>, 0.26 INTEGER).
    text = capsys.readouterr().out
    assert "<int" in text or "INTEGER" in text
