"""tests/ needs no server: no unit test imports integration/ (whose fixtures start the real
engines), asks for a server fixture, or starts a server itself (the embedded engines, the
metrics exporter, a long-running process). Those tests live in integration/."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# The pytest plugin's fixtures that start or reach a server.
SERVER_FIXTURES = {"compozy_server", "compozy_client", "compozy_container"}
# What starts a server when called.
SERVER_STARTERS = {"start_server", "start_cluster", "start_metrics_server", "Popen"}


def server_uses(path: Path) -> list[str]:
    """How ``path`` reaches a server: imports of integration/ or the embedded engines, server
    fixtures asked for, server starters called."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [
                f"line {node.lineno}: imports {m}"
                for m in modules
                if m.split(".")[0] == "integration" or m == "compozy_memory.embedded"
            ]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.args + node.args.kwonlyargs
            found += [
                f"line {node.lineno}: fixture {a.arg}" for a in args if a.arg in SERVER_FIXTURES
            ]
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            name = node.func.id if isinstance(node.func, ast.Name) else name
            if name in SERVER_STARTERS:
                found.append(f"line {node.lineno}: calls {name}")
    return found


def test_no_unit_test_needs_a_server() -> None:
    problems = [
        f"{path.name} {use}"
        for path in sorted(TESTS.glob("*.py"))
        if path.name != Path(__file__).name
        for use in server_uses(path)
    ]
    assert problems == []


def test_the_check_sees_each_way_of_reaching_a_server(tmp_path: Path) -> None:
    path = tmp_path / "planted.py"
    path.write_text(
        "import subprocess\n"
        "from integration.faults import FaultProxy\n"
        "from compozy_memory import embedded\n"
        "import compozy_memory.embedded\n"
        "async def test_a(compozy_client): ...\n"
        "def test_b():\n"
        "    subprocess.Popen(['x'])\n"
        "    start_metrics_server(0)\n"
        "    subprocess.run(['true'])\n"  # runs and ends: not a server
    )
    assert server_uses(path) == [
        "line 2: imports integration.faults",
        "line 2: imports integration.faults.FaultProxy",
        "line 3: imports compozy_memory.embedded",
        "line 4: imports compozy_memory.embedded",
        "line 5: fixture compozy_client",
        "line 7: calls Popen",
        "line 8: calls start_metrics_server",
    ]
