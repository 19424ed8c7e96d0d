"""What importing the package costs: nothing of the library's dependencies until a name is
used, so the pytest plugin (loaded by every pytest run where compozy-memory is installed) and
the CLI's start stay cheap. Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import compozy_memory

HEAVY = ["redis", "pydantic", "jinja2", "tiktoken", "prometheus_client", "compozy_memory._store"]


def _loaded_after(statement: str) -> list[str]:
    probe = (
        f"import sys, json\n{statement}\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_importing_the_package_loads_none_of_its_dependencies() -> None:
    assert _loaded_after("import compozy_memory") == []


def test_loading_the_pytest_plugin_loads_none_of_them() -> None:
    assert _loaded_after("import compozy_memory.testing.plugin") == []


def test_every_exported_name_resolves_to_its_object() -> None:
    assert set(compozy_memory.__all__) == {*compozy_memory._LAZY, "__version__"}
    for name in compozy_memory.__all__:
        assert getattr(compozy_memory, name) is not None
    assert compozy_memory.MemoryInstance.__module__ == "compozy_memory._store.instance"
    assert compozy_memory.instrument_opentelemetry.__name__ == "instrument"
    assert compozy_memory.errors.UsageError.__name__ == "UsageError"
    assert set(compozy_memory.__all__) <= set(dir(compozy_memory))


def test_a_name_that_is_not_exported_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        compozy_memory.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_the_command_line_starts_without_the_library() -> None:
    """Its commands import what they use when they run: --help, a usage error and the start
    of `mcp` (whose `initialize` answers before the library loads) pay only for typer."""
    assert _loaded_after("import compozy_memory._ops.cli") == []
    assert _loaded_after("import compozy_memory._ops.entry") == []
