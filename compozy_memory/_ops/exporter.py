"""The HTTP exporter: ``/metrics`` in prometheus-client's text format.

:func:`start_metrics_server` serves a registry from a daemon thread of the calling process:
that is where the metrics of the memories it uses live, so it is how an application exposes
them. ``compozy-memory serve-metrics`` runs the same server as a process of its own (see
:mod:`compozy_memory._ops.cli` for what it shows there).

It is built on prometheus-client's WSGI app rather than ``start_http_server``, whose return
value changed across the versions this package allows (``None`` before 0.17, a
``(server, thread)`` pair since), whose default address is every interface, and which has no
way to say which port an ephemeral ``port=0`` got.
"""

from __future__ import annotations

import threading
from socketserver import ThreadingMixIn
from types import TracebackType
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

__all__ = ["MetricsServer", "start_metrics_server"]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper does not keep the process alive


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No access log on stderr for every scrape."""


class MetricsServer:
    """A running exporter; :meth:`stop` (or leaving its ``with`` block) shuts it down."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self.thread = thread
        host, port = server.server_address[:2]
        #: The address and port it listens on (the one chosen when asked for port 0).
        self.addr = str(host)
        self.port = int(port)

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and close the socket; waits for the serving thread (idempotent)."""
        if self.thread.is_alive():
            self._server.shutdown()
            self.thread.join()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<MetricsServer {self.url}>"


def start_metrics_server(
    port: int, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` (prometheus-client's global one by default, where compozy-memory's
    metrics are) on ``http://addr:port/metrics`` from a daemon thread; ``port=0`` picks a
    free port (see :attr:`MetricsServer.port`). Listens on localhost unless ``addr`` says
    otherwise: pass ``"0.0.0.0"`` for a scraper on another host."""
    app = make_wsgi_app(registry if registry is not None else REGISTRY)
    server = make_server(addr, port, app, server_class=_Server, handler_class=_QuietHandler)
    thread = threading.Thread(
        target=server.serve_forever, name="compozy-memory-metrics", daemon=True
    )
    thread.start()
    return MetricsServer(server, thread)
