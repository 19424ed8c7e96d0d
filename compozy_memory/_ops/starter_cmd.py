"""``init``: a project to start from, written from the copy inside the package, so that what
the README and the docs run works after ``pip install`` (no clone needed)."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Annotated

import typer

from compozy_memory._model.keys import validate_project
from compozy_memory._ops.common import EXIT_FAILED, EXIT_USAGE, fail
from compozy_memory._ops.inspect_cmds import Json
from compozy_memory._ops.output import Out
from compozy_memory.errors import ConfigurationError

__all__ = ["STARTER", "init", "starter_files"]

#: The package's copy of ``examples/project`` and a history to import (tests/test_starter.py
#: keeps the two the same).
STARTER = "starter"


def starter_files() -> dict[str, bytes]:
    """Every file of the starter project, by its path inside the project folder."""
    root = files("compozy_memory._ops").joinpath(STARTER)
    found: dict[str, bytes] = {}
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        for entry in folder.iterdir():
            name = f"{prefix}{entry.name}"
            if entry.is_dir():
                if entry.name != "__pycache__":
                    pending.append((entry, f"{name}/"))
            else:
                found[name] = entry.read_bytes()
    return dict(sorted(found.items()))


def init(
    path: Annotated[str, typer.Argument(help="the folder to create (or an empty one)")] = (
        "compozy-project"
    ),
    project: Annotated[
        str, typer.Option("--project", "-p", help="the project id its YAML declares")
    ] = "acme",
    json_mode: Json = False,
) -> None:
    """Write an example project to start from: three memories, agents at each configuration
    level, and a history to import (example-history.jsonl). Then: `validate PATH`."""
    try:
        validate_project(project)
    except ConfigurationError as exc:
        raise fail(str(exc), EXIT_USAGE) from exc
    folder = Path(path)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise fail(f"{path} exists and is not an empty folder: nothing was written", EXIT_FAILED)
    written = []
    try:
        for name, data in starter_files().items():
            if name == "compozy.yaml":
                data = re.sub(rb"(?m)^project: acme$", f"project: {project}".encode(), data)
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(str(target))
    except OSError as exc:
        raise fail(f"cannot write {path}: {exc.strerror or exc}", EXIT_FAILED) from exc
    if json_mode:
        Out(True).data({"path": str(folder), "project": project, "files": written})
        return
    for name in written:
        print(f"wrote {name}")
    print(f"next: compozy-memory validate {path}")
