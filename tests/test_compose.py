"""docker-compose.yml and deploy/ hold together, checked without a Docker engine.

Every service's image is pinned or built here, every command names a file or module that
exists with options its program accepts, every healthcheck is well formed and asks the port
the service serves, Prometheus finds the worker replicas by DNS on the port they serve, and
the Grafana dashboard queries only metrics that compozy-memory exports (all twelve of the
specification's). ``docker compose config`` runs too when a docker CLI is on PATH.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from compozy_memory import MemoryMetrics

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
PYTHON_SERVICES = ("messages-stub", "worker", "demo")
# The spec's twelve (Compozy's memory specification), as docs/operations.md's table names them.
TWELVE = (
    "compozy_memory_messages_total",
    "compozy_memory_trim_total",
    "compozy_memory_flush_total",
    "compozy_memory_operation_latency_seconds",
    "compozy_memory_lock_acquire_total",
    "compozy_memory_lock_contention_total",
    "compozy_memory_lock_duration_seconds",
    "compozy_memory_lock_refresh_total",
    "compozy_memory_tokens_saved_total",
    "compozy_memory_priority_distribution",
    "compozy_memory_config_resolution_total",
    "compozy_memory_flush_optimization_hits_total",
)
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 (what the containers must bind)
_DEFAULTED = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: Any) -> Any:
    """Compose's ``${VAR:-default}`` with no variable set: the default, or ''."""
    if isinstance(value, str):
        return _DEFAULTED.sub(lambda m: m.group(2) or "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    compose = interpolate(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))
    assert isinstance(compose["services"], dict)
    return compose["services"]


def load_example(name: str) -> ModuleType:
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"compose_check_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_command(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The service's command parsed by its own script's ``parse_args``, in its environment."""
    command = service["command"]
    assert command[0] == "python", command
    assert command[1].startswith("examples/"), command
    assert (ROOT / command[1]).is_file(), command[1]
    for name, value in (service.get("environment") or {}).items():
        monkeypatch.setenv(name, str(value))
    return load_example(Path(command[1]).stem).parse_args(command[2:])


def test_the_fleet_is_there(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) >= {"redis", "messages-stub", "worker", "prometheus", "grafana"}
    redis = services["redis"]
    assert redis["image"] == "redis:7"
    command = redis["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "everysec"
    assert int(services["worker"]["deploy"]["replicas"]) == 3
    assert "ports" not in services["worker"]  # replicas would fight over a host port


def test_images_are_pinned_or_built_here(services: dict[str, dict[str, Any]]) -> None:
    built = {}
    for name, service in services.items():
        if "build" in service:
            build = service["build"]
            context = ROOT / build["context"]
            dockerfile = context / build["dockerfile"]
            assert dockerfile.is_file(), name
            for line in dockerfile.read_text().splitlines():
                if line.startswith("COPY "):
                    for source in line.split()[1:-1]:
                        assert (context / source).exists(), f"{dockerfile.name}: COPY {source}"
            built[service["image"]] = name
    assert built, "no service builds the Python image"
    for name, service in services.items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository, f"{name}: {image}"
        assert tag not in ("", "latest"), f"{name}: pin a tag ({image})"
        if tag == "local":  # never pulled: each service using it can build it
            assert "build" in service, f"{name}: {image} would be pulled"


@pytest.mark.parametrize("name", PYTHON_SERVICES)
def test_python_commands_name_files_and_options_that_exist(
    services: dict[str, dict[str, Any]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parse_command(services[name], monkeypatch)  # argparse exits on an unknown option


def test_workers_reach_the_services_they_name(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = parse_command(services["worker"], monkeypatch)
    stub = parse_command(services["messages-stub"], monkeypatch)
    assert worker.redis_url == "redis://redis:6379/0"
    assert worker.stub_url == f"http://messages-stub:{stub.port}"
    assert stub.host == ALL_INTERFACES  # reachable from the other containers
    assert worker.metrics_addr == ALL_INTERFACES
    assert worker.messages_url is None  # the stub, or Anthropic when a key is set
    assert worker.turns == 0
    assert worker.duration == 0
    depends = services["worker"]["depends_on"]
    assert depends["redis"]["condition"] == "service_healthy"
    assert depends["messages-stub"]["condition"] == "service_healthy"
    assert services["demo"]["command"][-1] == "redis://redis:6379/0"


@pytest.mark.parametrize("name", ["redis", "messages-stub", "worker", "prometheus", "grafana"])
def test_healthchecks_are_well_formed(
    services: dict[str, dict[str, Any]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = services[name]["healthcheck"]
    assert set(check) <= {"test", "interval", "timeout", "retries", "start_period"}
    test = check["test"]
    assert isinstance(test, list), test
    assert test[0] == "CMD", test
    assert len(test) > 1, test
    for key in ("interval", "timeout"):
        assert re.fullmatch(r"\d+(ms|s|m)", check[key]), f"{name}.{key}: {check[key]}"
    assert isinstance(check["retries"], int)
    assert check["retries"] > 0
    program = test[1]
    if program == "python":
        assert test[2] == "-c"
        compile(test[3], f"{name} healthcheck", "exec")
        port = int(re.findall(r"127\.0\.0\.1:(\d+)/", test[3])[0])
        options = parse_command(services[name], monkeypatch)
        assert port == getattr(options, "metrics_port", getattr(options, "port", None))
    elif program == "wget":
        port = int(re.findall(r"127\.0\.0\.1:(\d+)/", test[-1])[0])
        published = [int(str(p).split(":")[-1]) for p in services[name]["ports"]]
        assert port in published, f"{name} checks {port}, serves {published}"
    else:
        assert test[1:] == ["redis-cli", "ping"], test


def test_mounted_files_exist(services: dict[str, dict[str, Any]]) -> None:
    mounts = 0
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source}"
                mounts += 1
    assert mounts >= 3


def test_prometheus_finds_every_worker_replica_by_dns(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    mounted = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    assert mounted["/etc/prometheus/prometheus.yml"] == "./deploy/prometheus.yml"
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "compozy-worker"]
    (discovery,) = job["dns_sd_configs"]
    worker = parse_command(services["worker"], monkeypatch)
    assert discovery["names"] == ["worker"]
    assert "worker" in services
    assert discovery["type"] == "A"
    assert discovery["port"] == worker.metrics_port
    assert "static_configs" not in job  # a fixed target list would not follow --scale
    assert re.fullmatch(r"\d+s", config["global"]["scrape_interval"])


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(
    services: dict[str, dict[str, Any]],
) -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "9090:9090" in services["prometheus"]["ports"]
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "memory.yml").read_text())[
        "providers"
    ]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert mounts[provider["options"]["path"]] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "memory.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}


def exported_series() -> set[str]:
    """The series names compozy-memory's metrics expose, as PromQL names them."""
    names = set()
    for family in _families():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "count", "sum")}
        else:
            names.add(family.name)
    return names


def _families() -> list[Any]:
    registry = CollectorRegistry()
    MemoryMetrics(registry)
    return list(registry.collect())


def queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for variable in dashboard["templating"]["list"]:
        exprs.append(variable["query"]["query"])
    return exprs


def test_the_dashboard_queries_only_metrics_that_exist() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "memory.json").read_text())
    queried = {n for q in queries(dashboard) for n in re.findall(r"compozy_memory_\w+", q)}
    exported = exported_series()
    assert queried - exported == set()
    families = {f.name for f in _families()}
    for name in TWELVE:
        family = name.removesuffix("_total")
        assert family in families, f"{name} is not one of compozy-memory's metrics"
        assert any(q == name or q.startswith(f"{name}_") for q in queried), f"{name} not shown"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def compose_cli() -> list[str] | None:
    """``docker compose`` (the plugin), else ``docker-compose``, else None."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone is not None else None


def test_docker_compose_config_accepts_the_file() -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("no docker compose CLI (plugin or docker-compose): `config` not run")
    done = subprocess.run(
        [*cli, "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_python_image_runs_what_the_services_need() -> None:
    """The Dockerfile installs the package and copies examples/, as the commands expect."""
    dockerfile = (DEPLOY / "worker.Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1[1-9]", dockerfile, re.M)
    assert "RUN pip install ." in dockerfile
    assert "COPY examples ./examples" in dockerfile
    ignore = (DEPLOY / "worker.Dockerfile.dockerignore").read_text().split()
    for copied in ("pyproject.toml", "README.md", "compozy_memory/", "lua/", "examples/"):
        assert f"!{copied}" in ignore


@pytest.mark.parametrize(
    ("key", "messages_url", "expected"),
    [
        ("", None, "http://messages-stub:8080"),  # compose without a key: the stub
        ("sk-test", None, "https://api.anthropic.com"),  # with a key: Anthropic's API
        ("sk-test", "http://127.0.0.1:9/", "http://127.0.0.1:9/"),  # an explicit URL wins
    ],
)
def test_workers_ask_the_stub_unless_a_key_is_set(
    services: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    messages_url: str | None,
    expected: str,
) -> None:
    options = parse_command(services["worker"], monkeypatch)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    options.messages_url = messages_url
    client = load_example("worker").llm_client(options)
    assert str(client.base_url).rstrip("/") == expected.rstrip("/")
    assert client.api_key == (key or "stub")
