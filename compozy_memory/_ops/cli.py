"""``compozy-memory``: the operator's command line (typer + rich).

Global options, before the command: ``--url`` (default ``$COMPOZY_REDIS_URL``, else
``redis://localhost:6379/0``; credentials and TLS in the URL, as :func:`connect` reads it),
``--cluster`` (the URL names any node of a Redis Cluster) and ``--version``. Every command
that prints data takes ``--json``: one JSON document with stable keys (``tail --json``: one
object a line). Tables and colour are for a terminal only; piped output is plain columns.

Set-up: ``validate PATH``, ``acl --project ID --user NAME [--read-only]``, ``install``
(the Functions library, on every primary of a Cluster), ``serve-metrics --port N``,
``mcp --project ID [--transport stdio|http]`` (read-only MCP tools on one project's memories).
Memories (``--project/-p`` or ``$COMPOZY_PROJECT``; KEY is the stored key ``ls`` shows, or
text to encode with ``--text``): ``ls``, ``show``, ``tail [-f]``, ``export``, ``flush``,
``clear``, ``purge``. Debugging: ``render-key PATH AGENT --set name=value``. ``demo``: a fleet
of replica processes sharing memories, on an embedded server unless ``--url`` is given.

Exit codes:

* 0: done
* 1: failed (the server refused, a project has problems, a flush was skipped...)
* 2: usage error (a bad option or value: a project id, a key, a template variable)
* 3: the server cannot be reached (refused, timed out, Cluster down)
* 4: authentication failed (wrong or missing password: WRONGPASS, NOAUTH)
* 5: no such memory (nothing stored under that key, or no memory resource or agent by that id)
* 6: not confirmed (``clear``/``purge`` answered no, or no answer)
* 7: permission denied (the ACL user may not: NOPERM)
* 130: interrupted (Ctrl-C, at a confirmation prompt too); the commands that run until
  stopped (``tail -f``, ``serve-metrics``, ``mcp --transport http``) end with 0 on Ctrl-C

Shell completion (typer's): ``compozy-memory --install-completion`` adds it to the current
shell's start-up file (bash, zsh, fish, PowerShell); ``--show-completion`` prints it instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard

import typer

from compozy_memory._ops import (
    demo,
    import_cmd,
    inspect_cmds,
    maintain_cmds,
    render_key,
    setup_cmds,
    starter_cmd,
)
from compozy_memory._ops.common import (
    EXIT_ABORTED,
    EXIT_AUTH,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PERMISSION,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    Settings,
    exit_code,
)
from compozy_memory._ops.messages import describe_invalid, operator_text
from compozy_memory.errors import CompozyMemoryError

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["app", "main"]

# Recent typer releases carry their own copy of click: take its classes from typer's.
_CLICK_ERRORS = {c.__name__: c for c in typer.BadParameter.__mro__}
_UsageError: type[Exception] = _CLICK_ERRORS["UsageError"]
_ClickException: type[Exception] = _CLICK_ERRORS["ClickException"]

app = typer.Typer(
    name="compozy-memory",
    help="Operate compozy-memory: check projects, list, inspect, flush and purge memories.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version() -> str:
    try:
        return package_version("compozy-memory")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        print(f"compozy-memory {_version()}")
        raise typer.Exit(0)


@app.callback()
def _options(
    ctx: typer.Context,
    url: Annotated[
        str,
        typer.Option(
            envvar="COMPOZY_REDIS_URL", help="the server (any node of a Cluster)", show_default=True
        ),
    ] = "redis://localhost:6379/0",
    cluster: Annotated[bool, typer.Option("--cluster", help="the server is a Redis Cluster")] = (
        False
    ),
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    ctx.obj = Settings(url, cluster)


app.command("init")(starter_cmd.init)
app.command("validate")(setup_cmds.validate)
app.command("acl")(setup_cmds.acl)
app.command("install")(setup_cmds.install_library)
app.command("serve-metrics")(setup_cmds.serve_metrics)
app.command("mcp")(setup_cmds.mcp)
app.command("ls")(inspect_cmds.ls)
app.command("show")(inspect_cmds.show)
app.command("tail")(inspect_cmds.tail)
app.command("export")(inspect_cmds.export)
app.command("flush")(maintain_cmds.flush)
app.command("clear")(maintain_cmds.clear)
app.command("purge")(maintain_cmds.purge)
app.command("prune")(maintain_cmds.prune)
app.command("import")(import_cmd.import_history)
app.command("render-key")(render_key.render_key)
app.command("demo")(demo.demo)


_LABELS = {
    EXIT_UNREACHABLE: "server unreachable: ",
    EXIT_AUTH: "authentication failed: ",
    EXIT_PERMISSION: "permission denied: ",
}


@functools.cache
def _command() -> Any:
    """The click command typer builds from ``app`` (built once: it reads every signature),
    its flags shown without a value placeholder."""
    command = typer.main.get_command(app)
    _flags_take_no_value(command)
    return command


def _flags_take_no_value(command: Any) -> None:
    """Give every flag (``--json``, ``--yes``, ``--help``...) an empty metavar: typer's help
    would otherwise show ``<bool>`` beside options that take no value."""
    context = typer.Context(command, help_option_names=["-h", "--help"])
    help_option = command.get_help_option(context)
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _flags_take_no_value(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: the process's arguments); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = _command().main(args=args, prog_name="compozy-memory", standalone_mode=False)
    except _UsageError as exc:
        exc.show()  # type: ignore[attr-defined]
        return EXIT_USAGE
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return EXIT_ABORTED
    except _ClickException as exc:
        exc.show()  # type: ignore[attr-defined]
        return int(exc.exit_code)  # type: ignore[attr-defined]
    except CliError as exc:
        print(f"error: {operator_text(str(exc))}", file=sys.stderr)
        return exc.code
    except CompozyMemoryError as exc:
        code = exit_code(exc)
        print(f"error: {_LABELS.get(code, '')}{operator_text(str(exc))}", file=sys.stderr)
        return code
    except KeyboardInterrupt:  # Ctrl-C outside a command (typer ends those with 130)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_gone()
    except SystemExit as exc:  # typer's own way out when the reader went away
        if isinstance(exc.__context__, BrokenPipeError):
            return _reader_gone()
        raise
    except Exception as exc:
        if _stored_data_unreadable(exc):  # stored data this version cannot read
            print(f"error: {describe_invalid(exc)}", file=sys.stderr)
            return EXIT_FAILED
        raise
    return result if isinstance(result, int) else 0


def _stored_data_unreadable(exc: Exception) -> TypeGuard[ValidationError]:
    """Whether ``exc`` is pydantic's ValidationError (pydantic is loaded only by commands
    that read stored data: if it is not loaded, ``exc`` cannot be one)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(exc, pydantic.ValidationError)


def _reader_gone() -> int:
    """The reader went away (`| head`): stop quietly, without a traceback at exit."""
    with contextlib.suppress(OSError, ValueError):  # a stdout without a file descriptor
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
