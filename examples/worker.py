"""One replica of an agent worker fleet: simulated conversations sharing memories in Redis.

Every replica serves the same ``--sessions`` conversations of the ``support-bot`` agent of
``examples/project`` (memory ``customer-support``, key ``user:session-<n>``). Each turn goes to
a conversation picked at random, as a load balancer would send it to any replica: the replica
appends the user's message, builds the context (``memory.context``), asks the LLM through the
official ``anthropic`` client, and appends the reply with the token count from its ``usage``.
The memories flush in the background once they pass their threshold, while every replica
keeps writing. Each replica serves its metrics at ``http://ADDR:PORT/metrics``
(:func:`compozy_memory.start_metrics_server`), which Prometheus scrapes.

The LLM is ``--messages-url`` when given (``$COMPOZY_MESSAGES_URL``); else Anthropic's API when
``ANTHROPIC_API_KEY`` is set; else the stub of ``examples/stub_messages_api.py`` at
``--stub-url`` (``$COMPOZY_STUB_URL``, default http://127.0.0.1:8080).

Every message carries ``metadata`` ``{"worker": ID, "seq": N}`` and a dedupe key from them, so
a retried turn is stored once and a checker can count what each replica wrote. It runs
``--turns`` turns, or for ``--duration`` seconds, or until SIGTERM (neither given), then waits
for its flushes and prints one JSON line: ``{"worker", "turns", "messages", "sessions", ...}``.

Run: ``python examples/stub_messages_api.py &`` then
``python examples/worker.py --redis-url redis://localhost:6379/0 --turns 50``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anthropic

from compozy_memory import (
    MemoryInstance,
    MemoryManager,
    MemoryRegistry,
    connect,
    start_metrics_server,
    to_anthropic,
)

PROJECT_DIR = Path(__file__).resolve().parent / "project"
AGENT = "support-bot"
DEFAULT_STUB_URL = "http://127.0.0.1:8080"
SYSTEM_PROMPT = "You are a support agent for an online shop. Answer briefly."
QUESTIONS = (
    "My order #{n} arrived damaged, can I get a refund?",
    "When does order #{n} ship? I need it before the 12th.",
    "Please send order #{n} to my office in Berlin instead.",
    "I prefer email over phone calls for order #{n}.",
    "Can you cancel order #{n} and refund the 59.90 EUR?",
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    env = os.environ.get
    parser.add_argument(
        "--redis-url",
        default=env("COMPOZY_REDIS_URL", "redis://localhost:6379/0"),
        help="the shared Redis or Valkey (default $COMPOZY_REDIS_URL)",
    )
    parser.add_argument(
        "--messages-url",
        default=env("COMPOZY_MESSAGES_URL"),
        help="base URL of the Messages API to use, whatever the key (default "
        "$COMPOZY_MESSAGES_URL); without it: Anthropic's API when ANTHROPIC_API_KEY is set, "
        "else the stub at --stub-url",
    )
    parser.add_argument(
        "--stub-url",
        default=env("COMPOZY_STUB_URL", DEFAULT_STUB_URL),
        help=f"the stub Messages API (default $COMPOZY_STUB_URL, else {DEFAULT_STUB_URL})",
    )
    parser.add_argument("--model", default=env("COMPOZY_MODEL", "claude-haiku-4-5"))
    parser.add_argument("--sessions", type=int, default=6, help="conversations shared by all")
    parser.add_argument("--session-prefix", default="session", help="sessions are PREFIX-<n>")
    parser.add_argument("--turns", type=int, default=0, help="turns to serve (0: no limit)")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds (0: no limit)")
    parser.add_argument("--interval", type=float, default=0.0, help="pause after each turn (s)")
    parser.add_argument("--concurrency", type=int, default=4, help="turns served at once")
    parser.add_argument("--context-tokens", type=int, default=2_000, help="context budget")
    parser.add_argument("--max-output", type=int, default=256, help="max_tokens of a reply")
    parser.add_argument(
        "--metrics-port", type=int, default=int(env("COMPOZY_METRICS_PORT", "9464")),
        help="serve /metrics here (0: a free port, -1: none)",
    )  # fmt: skip
    parser.add_argument("--metrics-addr", default=env("COMPOZY_METRICS_ADDR", "127.0.0.1"))
    parser.add_argument(
        "--linger", type=float, default=0.0, help="keep serving metrics this long after the turns"
    )
    parser.add_argument("--worker-id", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument("--seed", type=int, default=None, help="seed of the session picks")
    options = parser.parse_args(argv)
    for name in ("sessions", "concurrency", "context_tokens", "max_output"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if options.turns < 0 or options.duration < 0 or options.interval < 0:
        parser.error("--turns, --duration and --interval cannot be negative")
    return options


def session_context(session: str) -> dict[str, Any]:
    """What the support-bot's key template reads: its memory key is ``user:<session>``."""
    return {"workflow": {"id": session, "input": {"user_id": session}}}


def llm_client(options: argparse.Namespace) -> anthropic.AsyncAnthropic:
    """``--messages-url`` if given; else Anthropic's API when a key is set; else the stub."""
    key = os.environ.get("ANTHROPIC_API_KEY", "")
    if options.messages_url:
        return anthropic.AsyncAnthropic(base_url=options.messages_url, api_key=key or "stub")
    if key:
        return anthropic.AsyncAnthropic(base_url="https://api.anthropic.com", api_key=key)
    return anthropic.AsyncAnthropic(base_url=options.stub_url, api_key="stub")


class Worker:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.id: str = options.worker_id
        self.client = connect(options.redis_url)
        self.manager = MemoryManager(MemoryRegistry.load(PROJECT_DIR), self.client)
        self.llm = llm_client(options)
        self.handles: dict[str, MemoryInstance] = {}
        self.turns: Counter[str] = Counter()
        self.stop = asyncio.Event()
        self.random = random.Random(options.seed if options.seed is not None else self.id)
        self._next = 0

    async def memory(self, session: str) -> MemoryInstance:
        if session not in self.handles:
            (self.handles[session],) = await self.manager.for_agent(AGENT, session_context(session))
        return self.handles[session]

    def claim(self) -> int | None:
        """The next turn's sequence number, or None when the worker is done."""
        if self.stop.is_set() or (self.options.turns and self._next >= self.options.turns):
            return None
        self._next += 1
        return self._next - 1

    async def serve(self) -> None:
        while (seq := self.claim()) is not None:
            session = (
                f"{self.options.session_prefix}-{self.random.randrange(self.options.sessions)}"
            )
            await self.turn(await self.memory(session), seq)
            self.turns[session] += 1
            if self.options.interval:
                await asyncio.sleep(self.options.interval)

    async def turn(self, memory: MemoryInstance, seq: int) -> None:
        meta = {"worker": self.id, "seq": seq}
        question = QUESTIONS[seq % len(QUESTIONS)].format(n=1000 + seq)
        await memory.append(
            {"role": "user", "content": f"[{self.id}] {question}", "metadata": meta},
            dedupe_key=f"{self.id}:{seq}:user",
        )
        context = await memory.context(
            self.options.context_tokens, reserve_output=self.options.max_output
        )
        system, messages = to_anthropic(context)
        while messages and messages[0]["role"] != "user":  # the API starts with a user turn
            messages.pop(0)
        response = await self.llm.messages.create(
            model=self.options.model,
            max_tokens=self.options.max_output,
            system=SYSTEM_PROMPT if system is None else f"{SYSTEM_PROMPT}\n\n{system}",
            messages=messages,  # type: ignore[arg-type]
        )
        text = "".join(block.text for block in response.content if block.type == "text")
        await memory.append(
            {"role": "assistant", "content": text, "metadata": meta,
             "tokens": response.usage.output_tokens},
            dedupe_key=f"{self.id}:{seq}:assistant",
        )  # fmt: skip

    async def run(self) -> dict[str, Any]:
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        if self.options.duration:
            loop.call_later(self.options.duration, self.stop.set)
        try:
            await asyncio.gather(*(self.serve() for _ in range(self.options.concurrency)))
            for handle in self.handles.values():
                if handle.flusher is not None:
                    await handle.flusher.wait_idle()
            summaries = 0
            for handle in self.handles.values():
                summaries += (await handle.health()).flush_count
        finally:
            await self.manager.aclose()
            await self.client.aclose()
            await self.llm.close()
        turns = sum(self.turns.values())
        return {
            "worker": self.id,
            "turns": turns,
            "messages": 2 * turns,
            "sessions": dict(sorted(self.turns.items())),
            "flushes_seen": summaries,
            "seconds": round(time.monotonic() - started, 3),
        }


async def linger(seconds: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    metrics = None
    if options.metrics_port >= 0:
        metrics = start_metrics_server(options.metrics_port, options.metrics_addr)
        print(f"metrics on {metrics.url}", flush=True)
    try:
        summary = asyncio.run(Worker(options).run())
        print(json.dumps(summary), flush=True)
        if options.linger:
            asyncio.run(linger(options.linger))
    finally:
        if metrics is not None:
            metrics.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
