"""The tables of docs/ written by hand that describe code agree with it: the caps named in
Design, the extras, the CLI's commands, the metrics, and the tests a page names as proof.
(The tables generated from the code are checked by tests/test_docs_generated.py.)"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import typer

from compozy_memory._model import limits
from compozy_memory._ops.cli import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def test_the_caps_named_in_design_are_the_code_s() -> None:
    named = re.findall(r"\| ([\d,]+) \(`([A-Z_]+)`\) \|", page("design.md"))
    assert len(named) >= 3
    for shown, constant in named:
        assert getattr(limits, constant) == int(shown.replace(",", "")), constant


def test_the_extras_table_names_every_extra_a_user_installs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    # dev, docs, bench and framework-tests are for working on the project itself.
    for_users = set(extras) - {"dev", "docs", "bench", "framework-tests"}
    text = page("getting-started.md")
    table = set(re.findall(r"^\| `([\w-]+)` \|", text, re.M))
    assert table == for_users
    for extra in for_users:
        assert f"compozy-memory[{extra}]" in text, f"no pip install line for {extra}"
    for extra in for_users:
        for requirement in extras[extra]:
            name = re.match(r"[\w.-]+", requirement)
            assert name is not None
            assert name.group(0) in text, f"{extra}: {requirement} not named"


def test_the_command_line_page_lists_every_command() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    table = page("cli.md").split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)[ `]", table, re.M)
    shown = {name for name, command in group.commands.items() if not command.hidden}
    assert set(rows) == shown


def test_every_metric_in_the_operations_tables_is_defined() -> None:
    source = (ROOT / "compozy_memory" / "_metrics.py").read_text()
    defined = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    rows = re.findall(r"^\| `compozy_memory_(\w+)` \|", page("operations.md"), re.M)
    assert len(rows) >= 12  # the spec's twelve at least
    missing = [r for r in rows if r not in defined and f"compozy_memory_{r}" not in defined]
    assert not missing, missing


def test_the_tests_named_as_proof_exist() -> None:
    texts = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    named = {
        (path, test)
        for text in texts
        for path, test in re.findall(r"((?:tests|integration)/[\w/]+\.py)::(\w+)", text.read_text())
    }
    assert len(named) >= 10
    for path, test in sorted(named):
        source = ROOT / path
        assert source.is_file(), path
        assert re.search(rf"^\s*(async )?def {test}\(", source.read_text(), re.M), f"{path}::{test}"
