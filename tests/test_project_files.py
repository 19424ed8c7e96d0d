"""The files users run by hand stay in step with the code."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_docker_compose_is_valid_and_points_at_real_files() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert set(compose) == {"services", "volumes"}
    services = compose["services"]
    assert {"valkey", "demo"} <= set(services)
    for name, service in services.items():
        assert isinstance(service.get("image"), str), name
    assert services["demo"]["depends_on"]["valkey"]["condition"] == "service_healthy"
    command = " ".join(services["demo"]["command"])
    assert "examples/replicas_demo.py" in command
    assert (ROOT / "examples" / "replicas_demo.py").is_file()
    assert "valkey-data" in compose["volumes"]


def test_readme_quick_start_names_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "./scripts/demo" in readme
    assert "./scripts/test" in readme
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_readme_shows_the_acl_line_the_cli_prints(capsys: pytest.CaptureFixture[str]) -> None:
    from compozy_memory._ops.cli import main

    assert main(["acl", "--project", "acme", "--user", "support-bot", "--read-only"]) == 0
    line = capsys.readouterr().out.strip()
    assert line in (ROOT / "README.md").read_text()
