"""A stand-in for the Anthropic Messages API, so the fleet runs with no API key.

Speaks enough of the API for the official ``anthropic`` client:

- ``POST /v1/messages`` answers an assistant message that quotes the last user turn and adds
  ``--reply-words`` words about it, with ``usage`` counted as one token a word;
- ``POST /v1/messages/count_tokens`` answers ``input_tokens`` (one a word, plus 7 of framing);
- ``GET /health`` answers ``ok`` (the compose healthcheck).

Anything else is a 404 in the API's error shape. Standard library only, so it runs in any
Python 3.11 image. It prints ``listening on http://HOST:PORT`` once it accepts connections
(``--port 0`` takes a free port).

Run: ``python examples/stub_messages_api.py --port 8080``, then point the client at it:
``anthropic.Anthropic(base_url="http://127.0.0.1:8080", api_key="stub")``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FRAMING_TOKENS = 7
FILLER_TEXT = (
    "I have noted the order, the dates and what you prefer for next time, and I will keep "
    "you posted by email."
)
_ids = itertools.count(1)


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif block.get("type") == "tool_result":
                    parts.append(text_of(block.get("content", "")))
        return " ".join(parts)
    return ""


def count_tokens(body: dict[str, Any]) -> int:
    """One token a whitespace-separated word of the system prompt and messages."""
    words = len(text_of(body.get("system", "")).split())
    for message in body.get("messages", []):
        if isinstance(message, dict):
            words += len(text_of(message.get("content", "")).split())
    return FRAMING_TOKENS + words


def reply_text(body: dict[str, Any], words: int) -> str:
    """A deterministic answer to the last user turn: its first words, then filler."""
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    asked = " ".join(text_of(last_user.get("content", "")).split()[:12]) if last_user else ""
    filler = FILLER_TEXT.split()
    tail = [filler[i % len(filler)] for i in range(max(0, words))]
    return f"About '{asked}': " + " ".join(tail)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def make_handler(reply_words: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, _error("not_found_error", f"no route GET {self.path}"))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as error:
                self._send(400, _error("invalid_request_error", f"body is not JSON: {error}"))
                return
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                self._send(400, _error("invalid_request_error", "messages: a list is required"))
                return
            path = self.path.split("?", 1)[0]
            if path == "/v1/messages/count_tokens":
                self._send(200, {"input_tokens": count_tokens(body)})
            elif path == "/v1/messages":
                text = reply_text(body, min(reply_words, int(body.get("max_tokens", 1024))))
                self._send(
                    200,
                    {
                        "id": f"msg_stub_{next(_ids)}",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model", "stub"),
                        "content": [{"type": "text", "text": text}],
                        "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": {
                            "input_tokens": count_tokens(body),
                            "output_tokens": len(text.split()),
                        },
                    },
                )
            else:
                self._send(404, _error("not_found_error", f"no route POST {path}"))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_stub_{next(_ids)}")
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def serve(host: str, port: int, reply_words: int) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (not yet serving: call ``serve_forever``)."""
    server = ThreadingHTTPServer((host, port), make_handler(reply_words))
    server.daemon_threads = True
    return server


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in compose)")
    parser.add_argument("--port", type=int, default=8080, help="port; 0 takes a free one")
    parser.add_argument("--reply-words", type=int, default=40, help="words of filler a reply")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    server = serve(options.host, options.port, options.reply_words)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on http://{options.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
