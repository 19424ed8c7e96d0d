"""Fuzzing the configuration surface: any YAML, agent config or template context gives a
result or a typed ConfigurationError, never another exception."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compozy_memory._config.agents import resolve_agent_memories
from compozy_memory._config.loader import load_project
from compozy_memory._config.templates import render_key
from compozy_memory.errors import ConfigurationError
from reliability_rows import Row, record_row, reproduce

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "project"

# Keys the schema knows, mixed with near misses, so generated documents reach deep checks.
KNOWN = [
    "resource", "id", "type", "max_tokens", "max_messages", "max_context_ratio",
    "persistence", "ttl", "wait", "replicas", "aof", "timeout", "flushing_strategy",
    "summarize_threshold", "summary_tokens", "priority_blocks", "priority", "content_types",
    "token_allocation", "short_term", "long_term", "system", "summarizer", "model",
    "compression", "workload_profile", "locking", "default_key_template", "memroy", "",
]  # fmt: skip
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    TEXT,
    st.sampled_from(["24h", "1h30m", "500ms", "-1s", "token_based", "hybrid_summary", "memory"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KNOWN), TEXT), inner, max_size=5),
    ),
    max_leaves=25,
)
RESOURCES = st.fixed_dictionaries(
    {"resource": st.just("memory"), "id": st.sampled_from(["m1", "m 2", "", "x" * 300])},
    optional={k: VALUES for k in KNOWN if k not in ("resource", "id")},
)


TALLY = {"examples": 0, "refused": 0}


@pytest.fixture(scope="module", autouse=True)
def _record_the_fuzzing() -> Iterator[None]:
    """Once the properties of this module have run, save their counts as a RELIABILITY.md row."""
    yield
    if TALLY["examples"] == 0:
        return
    nodeid = "tests/test_fuzz_config.py"
    accepted = TALLY["examples"] - TALLY["refused"]
    row = Row(
        group="input",
        fault="fuzzed configuration: memory YAML files, raw bytes as compozy.yaml, agent "
        "configs, template contexts",
        engine="none (loader)",
        promise="loads, or a ConfigurationError with a message; rendered keys stay in their "
        "namespace",
        operations=TALLY["examples"],
        acknowledged=accepted,
        lost=0,
        duplicated=0,
        observed=f"{accepted} accepted, {TALLY['refused']} refused with a typed error, 0 other "
        "exceptions",
        command=reproduce(nodeid),
    )
    record_row(row, nodeid)


def typed_outcome(call: Callable[[], object]) -> str | None:
    """None if ``call`` succeeded, its message if it raised ConfigurationError ("" would be a
    message-less error); any other exception propagates and fails the test."""
    TALLY["examples"] += 1
    try:
        call()
    except ConfigurationError as exc:
        TALLY["refused"] += 1
        return str(exc).strip()
    return None


SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow
@SETTINGS
@given(st.one_of(RESOURCES, VALUES))
def test_any_memory_file_loads_or_says_why(document: Any) -> None:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-project-"))
    try:
        shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True)
        (folder / "memory" / "fuzzed.yaml").write_text(yaml.safe_dump(document, allow_unicode=True))
        assert typed_outcome(lambda: load_project(folder)) != ""
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_as_compozy_yaml_load_or_say_why(raw: bytes) -> None:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-project-"))
    try:
        (folder / "compozy.yaml").write_bytes(raw)
        assert typed_outcome(lambda: load_project(folder)) != ""
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@SETTINGS
@given(VALUES)
def test_any_agent_config_resolves_or_says_why(config: Any) -> None:
    project = load_project(EXAMPLE)
    known = {memory_id: entry.resource for memory_id, entry in project.resources.items()}
    assert typed_outcome(lambda: resolve_agent_memories(config, known)) != ""


@SETTINGS
@given(
    st.sampled_from(
        [
            "user:{{ .workflow.input.user_id }}",
            "{{ project.id }}:{{ agent.id }}",
            "{{ .a.b.c }}",
            "{{ x | upper }}-{{ y }}",
            "{{ x.__class__ }}",
            "{% for i in x %}{{ i }}{% endfor %}",
        ]
    ),
    VALUES,
)
def test_any_template_context_renders_a_safe_key_or_says_why(template: str, context: Any) -> None:
    keys: list[str] = []
    context = context if isinstance(context, dict) else {"x": context}
    outcome = typed_outcome(lambda: keys.append(render_key(template, context)))
    assert outcome != ""
    for key in keys:
        assert "{" not in key
        assert "}" not in key
        assert len(key) <= 512
