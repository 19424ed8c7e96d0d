"""The exporter: the in-process one and ``compozy-memory serve-metrics``, each an HTTP server
answered on loopback (so here, not in tests/, which starts no server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from compozy_memory import start_metrics_server


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our http:// URL
        assert response.status == 200
        return str(response.read().decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_in_process_exporter_serves_its_registry_and_stops() -> None:
    registry = CollectorRegistry()
    Counter("compozy_memory_test_total", "a test counter", registry=registry).inc(3)
    server = start_metrics_server(0, registry=registry)
    with server:
        assert server.addr == "127.0.0.1"
        assert server.port > 0
        assert "compozy_memory_test_total 3.0" in fetch(server.url)
    with pytest.raises(urllib.error.URLError):
        fetch(server.url)
    server.stop()  # idempotent


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "compozy-memory"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "compozy_memory._ops.cli"]  # pragma: no cover


def test_serve_metrics_answers_metrics_until_terminated() -> None:
    port = free_port()
    process = subprocess.Popen(
        [*_cli(), "serve-metrics", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        text = poll(f"http://127.0.0.1:{port}/metrics", process)
        # Standalone: the families, no samples (no memory is used in that process).
        assert "# TYPE compozy_memory_operation_latency_seconds histogram" in text
        assert "# TYPE compozy_memory_messages_total counter" in text
    finally:
        process.terminate()
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert f"http://127.0.0.1:{port}/metrics" in out


def test_serve_metrics_serves_what_an_applications_processes_wrote(tmp_path: Path) -> None:
    """prometheus-client's multiprocess mode: two application processes count, the exporter
    process serves the sum."""
    writer = (
        "from prometheus_client import CollectorRegistry\n"
        "from compozy_memory import MemoryMetrics\n"
        "metrics = MemoryMetrics(CollectorRegistry())\n"
        "metrics.count_messages('support', [2, 2, 0])\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", writer], env=env, check=True, timeout=60)
    port = free_port()
    process = subprocess.Popen(
        [*_cli(), "serve-metrics", "--port", str(port), "--multiprocess-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        text = poll(f"http://127.0.0.1:{port}/metrics", process)
    finally:
        process.terminate()
        process.communicate(timeout=10)
    assert 'compozy_memory_messages_total{memory="support",priority="2"} 4.0' in text
    assert 'compozy_memory_messages_total{memory="support",priority="0"} 2.0' in text


def poll(url: str, process: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 20
    while True:
        try:
            return fetch(url)
        except (urllib.error.URLError, ConnectionError):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "serve-metrics never answered"
            time.sleep(0.1)


def test_serve_metrics_reports_a_port_it_cannot_bind() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [*_cli(), "serve-metrics", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert run.returncode == 1
    assert "cannot serve" in run.stderr
