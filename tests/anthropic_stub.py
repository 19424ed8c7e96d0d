"""A local stand-in for the Anthropic Messages API, for tests of the real client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: an HTTP status with a text (200) or an error body, or a hang."""

    status: int = 200
    text: str = "Stub summary."
    hang: float = 0.0


@dataclass
class Stub:
    replies: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            stub.requests.append(
                {
                    "path": self.path,
                    "body": body,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                }
            )
            reply = stub.replies.pop(0) if stub.replies else Reply()
            if reply.hang:
                time.sleep(reply.hang)
            if reply.status == 200:
                payload: dict[str, Any] = {
                    "id": f"msg_{len(stub.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "stub"),
                    "content": [{"type": "text", "text": reply.text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
            else:
                kind = "rate_limit_error" if reply.status == 429 else "api_error"
                payload = {"type": "error", "error": {"type": kind, "message": "stub says no"}}
            data = json.dumps(payload).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout) before the hang ended

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def anthropic_stub(*replies: Reply) -> Iterator[Stub]:
    stub = Stub(list(replies))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
