from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from compozy_memory._config.loader import load_project
from compozy_memory._config.registry import MemoryRegistry
from compozy_memory._ops.cli import main
from compozy_memory.errors import ConfigFileError, ConfigurationError, MemoryNotFoundError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "project"


def write(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def problems(folder: Path) -> list[str]:
    with pytest.raises(ConfigFileError) as info:
        load_project(folder)
    return [str(p) for p in info.value.problems]


def test_the_example_project_loads() -> None:
    project = load_project(EXAMPLES)
    assert project.id == "acme"
    assert sorted(project.resources) == ["customer-support", "project-knowledge", "sql-agent"]
    assert project.resources["project-knowledge"].file == "compozy.yaml"
    assert project.resources["sql-agent"].file == "memory/sql-agent.yaml"
    assert {a: e.level for a, e in project.agents.items()} == {
        "support-bot": 1, "triage-bot": 2, "sql-analyst": 3, "knowledge-curator": 3,
        "greeter": None,
    }  # fmt: skip
    assert project.resources["sql-agent"].resource.effective_max_tokens == 60_000


def test_every_problem_names_file_line_and_key(tmp_path: Path) -> None:
    write(tmp_path, "compozy.yaml", """
        project: acme
        memories:
          - id: inline
            max_tokens: 100
            flushing_strategy:
              summarize_threshold: 2
        agents:
          - id: bot
            memory: missing
            memory_key: "k"
        """)  # fmt: skip
    write(tmp_path, "memory/a.yaml", """
        id: a
        max_tokens: 100
        persistance:
          ttl: 24h
        summarizer:
          type: anthropic
          timeout: soon
        """)  # fmt: skip
    assert problems(tmp_path) == [
        "compozy.yaml:6: memories[0].flushing_strategy.summarize_threshold: Input should be "
        "less than or equal to 1",
        "memory/a.yaml:7: summarizer.timeout: 'soon' is not a duration: write e.g. '24h', "
        "'30m', '1h30m', '500ms'",
        "memory/a.yaml:3: persistance: unknown key 'persistance'; did you mean 'persistence'?",
        "compozy.yaml:9: agents[0].memory: unknown memory 'missing'; the project defines: a, "
        "inline",
    ]


def test_duplicates_are_reported_with_both_locations(tmp_path: Path) -> None:
    write(tmp_path, "compozy.yaml", """
        project: acme
        memories:
          - id: shared
            max_tokens: 100
        agents:
          - id: bot
          - id: bot
        """)  # fmt: skip
    write(tmp_path, "memory/shared.yaml", """
        # the same id again
        id: shared
        max_tokens: 5
        max_tokens: 6
        """)  # fmt: skip
    assert problems(tmp_path) == [
        "memory/shared.yaml:4: max_tokens: appears twice (first on line 3)",
        "memory/shared.yaml:2: memory id 'shared' is already defined at compozy.yaml:3",
        "compozy.yaml:7: agents[1]: agent id 'bot' is already defined at compozy.yaml:6",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memories: []\n", ["compozy.yaml:1: project: is required: the project id, used as the "
                            "Redis namespace"]),
        ("project: 'a:b'\n", ["compozy.yaml:1: project: 'a:b' is invalid: use 1-128 letters, "
                              "digits, '-', '_' or '.', starting with a letter or digit"]),
        ("project: acme\nworkflows: []\n", ["compozy.yaml:2: workflows: unknown key "
                                            "'workflows'"]),
        ("project: acme\nmemories: {id: x}\n", ["compozy.yaml:2: memories: must be a list"]),
        ("project: [acme\n", ["compozy.yaml:2: is not valid YAML: expected ',' or ']', but got "
                              "'<stream end>'"]),
        ("", ["compozy.yaml:1: is empty"]),
        ("project: acme\nagents:\n  - memory: x\n", ["compozy.yaml:3: agents[0].id: is required: "
                                                     "every agent needs an id"]),
    ],
)  # fmt: skip
def test_project_file_problems(tmp_path: Path, text: str, expected: list[str]) -> None:
    (tmp_path / "compozy.yaml").write_text(text)
    assert problems(tmp_path) == expected


def test_a_missing_project_file(tmp_path: Path) -> None:
    assert problems(tmp_path) == [f"{tmp_path / 'compozy.yaml'}: no such file"]


def test_yaml_merge_keys_work(tmp_path: Path) -> None:
    write(tmp_path, "compozy.yaml", """
        project: acme
        memories:
          - &base {id: one, max_tokens: 100}
          - <<: *base
            id: two
        """)  # fmt: skip
    assert sorted(load_project(tmp_path).resources) == ["one", "two"]


def test_registry_get_exists_list_and_agents() -> None:
    registry = MemoryRegistry.load(EXAMPLES)
    assert registry.project == "acme"
    assert registry.exists("sql-agent")
    assert not registry.exists("nope")
    assert [r.id for r in registry.list()] == ["customer-support", "project-knowledge", "sql-agent"]
    assert registry.get("sql-agent").summarizer.type == "anthropic"
    with pytest.raises(MemoryNotFoundError) as info:
        registry.get("sql-agnet")
    assert str(info.value) == (
        "unknown memory 'sql-agnet' (did you mean 'sql-agent'?); the project defines: "
        "customer-support, project-knowledge, sql-agent"
    )
    assert [r.id for r in registry.agent("sql-analyst")] == ["sql-agent", "project-knowledge"]
    assert registry.resolve({"memory": "sql-agent"})[0].key is None  # default template


def test_reload_swaps_atomically_and_keeps_the_old_set_on_error(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "p")
    root = tmp_path / "p"
    registry = MemoryRegistry.load(root)
    before = registry.get("customer-support")
    text = (root / "memory" / "customer-support.yaml").read_text()
    (root / "memory" / "customer-support.yaml").write_text(
        text.replace("max_tokens: 4000", "max_tokens: 8000")
    )
    registry.reload()
    assert registry.generation == 1
    assert registry.get("customer-support").max_tokens == 8000
    assert before.max_tokens == 4000  # objects already handed out are unchanged
    (root / "memory" / "sql-agent.yaml").write_text("id: sql-agent\nmax_tokns: 1\n")
    with pytest.raises(ConfigFileError, match="max_tokns"):
        registry.reload()
    assert registry.generation == 1
    assert registry.exists("sql-agent")  # the failed reload changed nothing
    shutil.copy(EXAMPLES / "memory" / "sql-agent.yaml", root / "memory" / "sql-agent.yaml")
    (root / "compozy.yaml").write_text(
        (root / "compozy.yaml").read_text().replace("project: acme", "project: other")
    )
    with pytest.raises(ConfigurationError, match="reload changed the project id"):
        registry.reload()


def test_cli_validate_prints_resources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "project acme" in out
    assert "  sql-agent  [memory/sql-agent.yaml:2]" in out
    assert "      max_tokens: 60000" in out
    assert "      compression: data_intensive: L1 2-6, 50%/70%, batches 2/4/6" in out
    assert "  sql-analyst  (level 3) [compozy.yaml:35]" in out
    assert "      project-knowledge: read-only, key project:{{ .project.id }} (default)" in out
    assert out.rstrip().endswith("OK: 3 memories, 5 agents")


def test_cli_validate_stops_quietly_when_its_reader_goes_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` that has exited
    with os.fdopen(write_end, "w", buffering=1) as broken:
        monkeypatch.setattr(sys, "stdout", broken)
        assert main(["validate", str(EXAMPLES)]) == 0


def test_cli_validate_reports_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "broken")
    memory = tmp_path / "broken" / "memory" / "customer-support.yaml"
    memory.write_text(memory.read_text().replace("ttl: 24h", "ttl: 24 hours"))
    project = tmp_path / "broken" / "compozy.yaml"
    project.write_text(project.read_text().replace("mode: read-only", "mode: readonly"))
    assert main(["validate", str(tmp_path / "broken")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "memory/customer-support.yaml:24: persistence.ttl: '24 hours' is not a duration: write "
        "e.g. '24h', '30m', '1h30m', '500ms'",
        "compozy.yaml:41: agents[2].memories[1].mode: must be read-write or read-only, got "
        "'readonly'",
        f"2 problems: {tmp_path / 'broken'} is not valid",
    ]


def test_durations_past_ten_years_are_located_problems(tmp_path: Path) -> None:
    write(tmp_path, "compozy.yaml", "project: acme\n")
    write(tmp_path, "memory/a.yaml", f"""
        id: a
        max_tokens: 100
        persistence:
          ttl: .inf
        locking:
          flush_ttl: 99999999999d
          clear_ttl: .nan
        summarizer:
          type: anthropic
          timeout: {10**400}
        """)  # fmt: skip
    found = problems(tmp_path)
    assert [p.split(": ")[0:2] for p in found] == [
        ["memory/a.yaml:4", "persistence.ttl"],
        ["memory/a.yaml:7", "locking.clear_ttl"],  # pydantic's field order
        ["memory/a.yaml:6", "locking.flush_ttl"],
        ["memory/a.yaml:10", "summarizer.timeout"],
    ]
    assert "is not a number" in found[1]
    assert all("at most 10 years" in p for p in (found[0], *found[2:])), found


@pytest.mark.parametrize("project", ["acme\n", "acme\r\n", "\nacme"])
def test_a_project_id_with_a_newline_is_refused(tmp_path: Path, project: str) -> None:
    (tmp_path / "compozy.yaml").write_text(f"project: {project!r}\n".replace("'", '"'))
    assert problems(tmp_path) == [
        f"compozy.yaml:1: project: {project!r} is invalid: use 1-128 letters, digits, '-', '_' "
        "or '.', starting with a letter or digit"
    ]
    with pytest.raises(ConfigurationError, match="project id"):
        MemoryRegistry(project)


def test_key_templates_are_compiled_at_load(tmp_path: Path) -> None:
    write(tmp_path, "compozy.yaml", """
        project: acme
        agents:
          - id: one
            memory: a
            memory_key: "user:{{ .workflow.input.user"
          - id: two
            memory: true
            memories: [a, b]
            memory_key: "{{ .workflow._y }}"
          - id: three
            memories:
              - {id: a, key: "ok:{{ .workflow.id }}"}
              - {id: b, mode: read-only, key: "{{ ''.__class__ }}"}
          - id: four
            memory: a
            memory_key: "{{ x | attr('__class__') }}"
        """)  # fmt: skip
    write(tmp_path, "memory/a.yaml", """
        id: a
        max_tokens: 100
        default_key_template: "{{ .workflow.input['_secret'] }}"
        """)  # fmt: skip
    write(tmp_path, "memory/b.yaml", """
        id: b
        max_tokens: 100
        default_key_template: "b:{% if %}"
        """)  # fmt: skip
    assert problems(tmp_path) == [
        "memory/a.yaml:3: default_key_template: key template "
        "\"{{ .workflow.input['_secret'] }}\" refused: templates may not read private "
        "attributes ('_secret')",
        "memory/b.yaml:3: default_key_template: key template 'b:{% if %}' is not valid: "
        "Expected an expression, got 'end of statement block'",
        "compozy.yaml:5: agents[0].memory_key: key template 'user:{{ .workflow.input.user' is "
        "not valid: unexpected end of template, expected 'end of print statement'.",
        "compozy.yaml:9: agents[1].memory_key: key template '{{ .workflow._y }}' refused: "
        "templates may not read private attributes ('_y')",
        "compozy.yaml:13: agents[2].memories[1].key: key template \"{{ ''.__class__ }}\" "
        "refused: templates may not read private attributes ('__class__')",
        "compozy.yaml:16: agents[3].memory_key: key template \"{{ x | attr('__class__') }}\" "
        "refused: templates may not read private attributes ('__class__')",
    ]


def test_cli_validate_compiles_key_templates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "compozy.yaml", """
        project: acme
        memories:
          - {id: a, max_tokens: 100, default_key_template: "{{ x"}
        """)  # fmt: skip
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("compozy.yaml:3: memories[0].default_key_template: key template ")


def test_run_time_agent_settings_compile_their_templates() -> None:
    registry = MemoryRegistry.load(EXAMPLES)
    with pytest.raises(ConfigurationError, match=r"memories\[0\]\.key: .*private"):
        registry.resolve({"memories": [{"id": "sql-agent", "key": "{{ ''.__class__ }}"}]})


def test_tokenizer_mistakes_name_file_line_and_key(tmp_path: Path) -> None:
    write(tmp_path, "compozy.yaml", "project: acme\n")
    write(tmp_path, "memory/typo.yaml", """
        id: typo
        max_tokens: 100
        tokenizer:
          model: gpt-4o
          encodng: o200k_base
        """)  # fmt: skip
    write(tmp_path, "memory/model-as-text.yaml", """
        id: model-as-text
        max_tokens: 100
        tokenizer: gpt-4o
        """)  # fmt: skip
    write(tmp_path, "memory/unknown-model.yaml", """
        id: unknown-model
        max_tokens: 100
        description: a memory
        tokenizer: {model: llama-3}
        """)  # fmt: skip
    write(tmp_path, "memory/api-for-gpt.yaml", """
        id: api-for-gpt
        max_tokens: 100
        tokenizer: {model: gpt-4o, method: anthropic_api}
        """)  # fmt: skip
    write(tmp_path, "memory/timeout-without-api.yaml", """
        id: timeout-without-api
        max_tokens: 100
        tokenizer: {encoding: cl100k_base, timeout: 1s}
        """)  # fmt: skip
    assert sorted(problems(tmp_path)) == [
        "memory/api-for-gpt.yaml:3: tokenizer: method anthropic_api counts for a Claude "
        "model: set model",
        "memory/model-as-text.yaml:3: tokenizer: 'gpt-4o' is not an encoding we ship "
        "(cl100k_base, o200k_base); for a model write {model: gpt-4o}",
        "memory/timeout-without-api.yaml:3: tokenizer: timeout: only for method anthropic_api",
        "memory/typo.yaml:5: tokenizer.encodng: unknown key 'encodng'; did you mean 'encoding'?",
        "memory/unknown-model.yaml:4: tokenizer: model 'llama-3' has no encoding we know: "
        "set encoding (cl100k_base or o200k_base) instead",
    ]


def test_tokenizer_forms(tmp_path: Path) -> None:
    write(tmp_path, "compozy.yaml", """
        project: acme
        memories:
          - {id: a, max_tokens: 100, tokenizer: o200k_base}
          - {id: b, max_tokens: 100, tokenizer: {model: gpt-4o-mini}}
          - {id: c, max_tokens: 100, tokenizer: {model: claude-haiku-4-5}}
          - id: d
            max_tokens: 100
            tokenizer: {model: claude-sonnet-4-5, method: anthropic_api, timeout: 1500ms}
          - {id: e, max_tokens: 100}
        """)  # fmt: skip
    resources = {k: v.resource for k, v in load_project(tmp_path).resources.items()}
    tokenizers = {k: r.tokenizer for k, r in resources.items()}
    assert tokenizers["e"] is None  # cl100k, as before the setting existed
    described = {k: t.describe() for k, t in tokenizers.items() if t is not None}
    assert described == {
        "a": "o200k_base",
        "b": "o200k_base (gpt-4o-mini)",
        "c": "claude-haiku-4-5, estimated with cl100k_base",
        "d": "claude-sonnet-4-5 via count_tokens (timeout 1s500ms)",
    }
    assert resources["a"].summary()["tokenizer"] == "o200k_base"
