"""``compozy-memory init``: the project inside the package is examples/project (the docs and
tests use that one), plus a history to import, and init writes it where asked, or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compozy_memory._config.loader import load_project
from compozy_memory._ops.cli import main
from compozy_memory._ops.starter_cmd import starter_files

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "project"


def test_the_packaged_project_is_examples_project() -> None:
    packaged = starter_files()
    examples = {
        str(p.relative_to(EXAMPLES)): p.read_bytes() for p in EXAMPLES.rglob("*") if p.is_file()
    }
    history = packaged.pop("example-history.jsonl")
    assert packaged == examples
    for line in history.decode().splitlines():
        message = json.loads(line)
        assert message["role"] in ("system", "user", "assistant")


def test_init_writes_a_project_that_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "mine"
    assert main(["init", str(target), "-p", "shop", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["project"] == "shop"
    assert sorted(Path(f).relative_to(target).as_posix() for f in report["files"]) == [
        "compozy.yaml", "example-history.jsonl", "memory/customer-support.yaml",
        "memory/sql-agent.yaml",
    ]  # fmt: skip
    project = load_project(target)
    assert project.id == "shop"
    assert sorted(project.resources) == ["customer-support", "project-knowledge", "sql-agent"]


def test_init_never_writes_over_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["init", str(tmp_path / "taken")]) == 1
    assert "exists and is not an empty folder: nothing was written" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    assert main(["init", str(tmp_path / "x"), "-p", "bad id!"]) == 2
    assert not (tmp_path / "x").exists()
    (tmp_path / "empty").mkdir()
    assert main(["init", str(tmp_path / "empty")]) == 0  # an empty folder is fine
