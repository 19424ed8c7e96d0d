"""The parts of docs/ that describe code (the CLI reference, the tables of lua/ and of the
package's modules) are what ``scripts/gen_docs`` writes from the code now."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import typer

from compozy_memory._ops.cli import app

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def docgen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docgen", ROOT / "scripts" / "docgen.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docgen"] = module  # dataclasses and typing look modules up by name
    spec.loader.exec_module(module)
    return module


def test_no_generated_part_is_stale(docgen: ModuleType) -> None:
    stale = [p.relative_to(ROOT).as_posix() for p in docgen.stale()]
    assert not stale, f"run scripts/gen_docs: {stale}"


def test_every_generator_is_used_by_a_page(docgen: ModuleType) -> None:
    used = {m.group("name") for p in docgen.pages() for m in docgen.PART.finditer(p.read_text())}
    assert used == set(docgen.GENERATORS)


def test_a_changed_command_makes_the_reference_stale(docgen: ModuleType) -> None:
    page = (ROOT / "docs" / "cli-reference.md").read_text()
    assert docgen.regenerate(page) == page
    edited = page.replace("| `--json` |", "| `--jsonish` |", 1)
    assert edited != page
    assert docgen.regenerate(edited) == page  # the generator puts the real option back


def test_the_reference_names_every_command_and_option() -> None:
    """Read from the typer app without the generator: a generator that dropped a command or
    an option would otherwise pass its own check."""
    page = (ROOT / "docs" / "cli-reference.md").read_text()
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for name, command in group.commands.items():
        if command.hidden:
            continue
        section = re.search(rf"^### {re.escape(name)}\n(.*?)(?=^### |\Z)", page, re.S | re.M)
        assert section, f"no section for `{name}`"
        for param in command.params:
            shown = not getattr(param, "hidden", False) and param.opts[0].startswith("-")
            for opt in param.opts if shown else []:
                assert f"`{opt}`" in section.group(1), f"{name}: {opt} missing"
