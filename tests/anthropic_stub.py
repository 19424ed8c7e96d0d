"""A local stand-in for the Anthropic Messages API, for tests of the real client.

``POST /v1/messages`` answers with the scripted replies in turn. ``POST
/v1/messages/count_tokens`` answers with its own scripted replies (``count_replies``), and
once they run out counts :data:`COUNT_FRAMING` plus one token per whitespace-separated word
of the messages' text, so tests can tell an API count from a local one.
"""

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
    #: For count_tokens: the input_tokens to answer instead of the stub's own count.
    tokens: int | None = None


# What the stub's count_tokens adds to every request, as the real API adds its framing.
COUNT_FRAMING = 7


def stub_count(body: dict[str, Any]) -> int:
    """The stub's count of a count_tokens request: framing, then a token a word."""
    words = 0
    for message in body.get("messages", []):
        content = message.get("content", "")
        if isinstance(content, list):
            content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
        words += len(str(content).split())
    return COUNT_FRAMING + words


@dataclass
class Stub:
    replies: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    count_replies: list[Reply] = field(default_factory=list)

    @property
    def count_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == "/v1/messages/count_tokens"]


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
            counting = self.path == "/v1/messages/count_tokens"
            queue = stub.count_replies if counting else stub.replies
            reply = queue.pop(0) if queue else Reply()
            if reply.hang:
                time.sleep(reply.hang)
            if counting and reply.status == 200:
                tokens = reply.tokens if reply.tokens is not None else stub_count(body)
                payload: dict[str, Any] = {"input_tokens": tokens}
            elif reply.status == 200:
                payload = {
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
def anthropic_stub(*replies: Reply, counts: tuple[Reply, ...] = ()) -> Iterator[Stub]:
    stub = Stub(list(replies), count_replies=list(counts))
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
