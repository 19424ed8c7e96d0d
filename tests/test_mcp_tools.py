"""The MCP tools' argument models: their schemas state every bound, the bounds never exceed
the library's own limits, and a refusal names the argument and quotes little of it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from compozy_memory._model import limits
from compozy_memory._ops.mcp_calls import HANDLERS
from compozy_memory._ops.mcp_tools import BOUNDS, QUOTE, describe_invalid, quote, tool_specs


def test_the_bounds_fit_inside_the_librarys_limits() -> None:
    # Characters are bounded so that 4 bytes each (UTF-8's most) stay within a byte limit.
    assert BOUNDS["content_chars"] * 4 <= limits.MAX_MESSAGE_BYTES
    assert BOUNDS["dedupe_chars"] <= limits.MAX_DEDUPE_KEY  # printable ASCII: 1 byte each
    assert BOUNDS["search_limit"] == limits.MAX_SEARCH_LIMIT
    assert BOUNDS["fact_name_chars"] * 4 <= limits.MAX_FACT_KEY
    assert BOUNDS["fact_value_chars"] * 4 <= limits.MAX_FACT_VALUE
    assert BOUNDS["facts_per_call"] <= limits.MAX_FACTS_PER_CALL
    assert BOUNDS["recall_limit"] <= limits.MAX_READ


def _walk(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every leaf schema (a string, integer or enum) with where it is."""
    if not isinstance(schema, dict):
        return []
    found = []
    if schema.get("type") in ("string", "integer") or "enum" in schema:
        found.append((path, schema))
    for key in ("properties",):
        for name, sub in schema.get(key, {}).items():
            found += _walk(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties", "propertyNames"):
        found += _walk(schema.get(key), f"{path}[{key}]")
    for sub in schema.get("anyOf", []):
        found += _walk(sub, path)
    return found


@pytest.mark.parametrize("names", [None, ["customer-support"], ["a", "b"]])
def test_every_schema_states_every_bound(names: list[str] | None) -> None:
    specs = tool_specs(names, HANDLERS)
    assert set(specs) == set(HANDLERS)
    for spec in specs.values():
        schema = spec.schema()
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False, spec.name
        assert "title" not in schema
        for where, leaf in _walk(schema):
            if "enum" in leaf:
                continue
            if leaf["type"] == "integer":
                assert {"minimum", "maximum"} <= set(leaf), (spec.name, where)
            else:
                assert "maxLength" in leaf, (spec.name, where)
        for name in ("facts", "names", "roles"):
            if name in schema["properties"]:
                field = schema["properties"][name]
                field = next((s for s in field.get("anyOf", [field]) if s.get("type")), field)
                assert "maxItems" in field or "maxProperties" in field, (spec.name, name)
    if names is not None:
        memory = specs["search"].schema()["properties"]["memory"]
        assert memory["enum"] == names


def _refusal(tool: str, arguments: dict[str, Any]) -> str:
    spec = tool_specs(None, HANDLERS)[tool]
    with pytest.raises(ValidationError) as raised:
        spec.model.model_validate(arguments)
    return describe_invalid(tool, raised.value, spec.takes)


def test_strict_types_and_unknown_arguments_are_refused() -> None:
    assert "limit: must be an integer" in _refusal("recall", {"memory": "k", "limit": "5"})
    assert "limit: must be an integer" in _refusal("recall", {"memory": "k", "limit": True})
    assert "unknown argument 'x' (recall takes: memory, offset, limit)" in _refusal(
        "recall", {"memory": "k", "x": 1}
    )
    spec = tool_specs(None, HANDLERS)["recall"]
    assert spec.model.model_validate({"memory": "k", "limit": 5}).limit == 5  # type: ignore[attr-defined]


def test_quotes_are_short_whatever_the_size() -> None:
    assert quote("abc") == "'abc'"
    huge = quote("x" * 5_000_000)
    assert huge.endswith("... (5,000,000 characters)")
    assert len(huge) < QUOTE + 40
    assert quote(list(range(100_000))).endswith("... (100,000 items)")
    text = _refusal("search", {"memory": "k" * 1_000_000, "query": "q" * 2_000})
    assert "memory: must be at most 512 characters" in text
    assert "query: must be at most 1000 characters" in text
    assert len(text) < 500
