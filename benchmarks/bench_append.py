"""Counted appends and cold start, measured in one run against one server (printed only).

1. Append throughput at 64 concurrent sessions x 200 appends of ~300-token messages against
   raw redis-py ``RPUSH`` of the same JSON from the same client. The headline, "default", is
   what a user gets with every default: ``MemoryInstance.append`` of a dict, no count given
   (the library counts with its default exact counter, rs-bpe where the ``fast`` extra is
   installed), the search index's background catch-up on (as it is unless turned off),
   waited for before the round's clock stops, so its rate is what the server sustains with
   every message kept searchable. The other modes take parts away or add them: "counted"
   (the same with the catch-up off: the append path alone), counted by tiktoken
   (``engine="tiktoken"``, in the counting thread), with the counts supplied, "indexed"
   (counts supplied, the catch-up on and waited for), and through a ``MemoryManager`` (which
   also keeps the project's session index: off the append path; its last call is sent
   between rounds, untimed, as no append waits for it) against a ``MemoryInstance`` with the
   same resource policy, both with the catch-up off. Every message's text
   is new, in every mode (no cached count helps). Modes alternate within a round, in reverse
   order every other round; each ratio is the median over ``--rounds`` of that round's ratio
   to the same round's raw RPUSH, which keeps a shared machine's swings out of the ratios;
   the manager's own cost is the median of its rounds' ratios to the same-policy appends.
   Beside each, the client's CPU time a message (this process's, every thread's: the loop's
   and the counting threads'), the median of the rounds: it swings with a shared machine's
   load far less than the rates do.
2. Where an append's time goes on the event loop (``--profile``): cProfile of one counted
   round, grouped into counting, validation and serialisation, the script call, and the
   rest.
3. Cold start: a fresh process's first append, with and without ``warm()`` before it,
   against the median of its next 50 appends (``--cold N`` processes of each kind).
4. Bytes per message: ``MEMORY USAGE`` (exact, ``SAMPLES 0``) summed over every key of a
   memory holding 500 such messages, each appended on its own, against the JSON payload
   (role and content, compact) and against a plain list of the same JSON.

Run: ``python -m benchmarks.bench_append [--url URL] [--rounds 3] [--profile] [--cold 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from compozy_memory import (
    CachedCounter,
    MemoryInstance,
    MemoryManager,
    MemoryRegistry,
    TiktokenCounter,
)
from compozy_memory.embedded import start_server

SESSIONS = 64
SENTENCES = (
    "Thanks for reaching out about order #{n}, I can see it left our warehouse on Tuesday.",
    "The carrier marked the parcel as delayed because of the storm near Porto last night.",
    "I have asked them to prioritise it, and you should get a new tracking link within {n} hours.",
    "If the kettle arrives damaged, reply here with a photo and we will send a replacement.",
    "There is no need to return the broken one; keep it or recycle it as you prefer.",
    "Your refund of {n} euros was approved and should reach your card in five business days.",
    "Could you confirm the delivery address on your account is still the flat on Rua Augusta?",
    "I also noticed the billing email differs from the one you use to sign in, shall I update it?",
    "Our team works from nine to six on weekdays, and the chat is answered on weekends too.",
    "The warranty covers manufacturing defects for two years from the date of purchase.",
    "I have added a note to ticket {n} so that whoever picks it up next has the whole story.",
    "Is there anything else I can help you with today, like changing a subscription?",
)


def texts(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct support-chat messages of about 300 tokens (~1,400 bytes)."""
    out = []
    for _ in range(n):
        picked = [rng.choice(SENTENCES).format(n=rng.randint(10, 99_999)) for _ in range(16)]
        out.append(" ".join(picked))
    return out


PROJECT = Path(__file__).resolve().parent.parent / "examples" / "project"
#: The modes that keep the search index caught up, as a handle does by default.
INDEXED = ("default", "indexed")


async def append_round(
    client: Redis, appends: int, mode: str, seed: int, profiler: cProfile.Profile | None = None
) -> tuple[float, float]:
    """Messages per second, and this process's CPU time a message in microseconds (every
    thread's: the loop's and the counting threads'), for SESSIONS sessions doing ``appends``
    each: "raw" (RPUSH of the JSON), "default" (every default: counted by the library,
    indexed in the background and waited for), "counted" (the library counts, its default
    engine), "tiktoken" (counted by tiktoken), "supplied" (counts given), "indexed" (counts
    given, indexed in the background and waited for), "manager" (counted, through a
    MemoryManager's handles, which also keep the session index) or "policy" (counted, on a
    MemoryInstance with the manager's resource policy: TTL, budget; the manager's baseline).
    Only "default" and "indexed" run the background indexer."""
    rng = random.Random(seed)
    bodies = [texts(rng, appends) for _ in range(SESSIONS)]
    run = uuid.uuid4().hex
    # Flushing off: this measures appends, not summaries (bench_flush measures those).
    manager = MemoryManager(MemoryRegistry.load(PROJECT), client, flushing=False)
    counts = {}
    if mode in ("supplied", "indexed"):
        exact = TiktokenCounter()
        counts = {t: exact.count(t) + 3 for session in bodies for t in session}
    counter = CachedCounter(TiktokenCounter(engine="tiktoken")) if mode == "tiktoken" else None

    async def session(s: int) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "user" if i % 2 else "assistant", "content": t}
            for i, t in enumerate(bodies[s])
        ]
        if mode == "raw":
            key = f"bench:{run}:{s}"
            for message in messages:
                body = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
                await client.rpush(key, body.encode())
            return
        if mode == "policy":
            policy = manager.registry.get("customer-support").policy()
            mem = MemoryInstance.open(client, project="bench", key=f"{run}:{s}", policy=policy)
        elif mode == "manager":
            mem = await manager.get(
                "customer-support", {"workflow": {"input": {"user_id": f"{run}:{s}"}}}
            )
        else:
            mem = MemoryInstance.open(client, project="bench", key=f"{run}:{s}", counter=counter)
        # The append path alone, but for "default" and "indexed": those also run the
        # background indexer (as every handle does unless told not to) and wait for it.
        mem.indexer.background = mode in INDEXED
        for message in messages:
            if mode in ("supplied", "indexed"):
                message["tokens"] = counts[message["content"]]
            await mem.append(message)
        await mem.indexer.wait_idle()

    if mode == "manager":  # warmed once, as an application's manager is: not timed
        await manager.start()
    if profiler is not None:  # the appends only, not the texts' making above
        profiler.enable()
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(session(s) for s in range(SESSIONS)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    # The session index's last entries (one call, which no append waited for) go out before
    # the next round starts.
    await manager.aclose()
    if profiler is not None:
        profiler.disable()
    return SESSIONS * appends / elapsed, cpu / (SESSIONS * appends) * 1e6


GROUPS = {
    "waiting for I/O or the counting thread (epoll)": ("poll",),
    "counting on the loop (rs-bpe or tiktoken, the cache)": (
        "tokens.py",
        "counting.py",
        "CoreBPE",
        "Tokenizer",
    ),
    "validation and serialisation (pydantic)": ("messages.py", "pydantic", "encoding.py"),
    "script call (gateway, drivers, batching, redis-py, hiredis)": (
        "_wire",
        "_io/",
        "redis/",
        "hiredis",
    ),
    "the handle and the metrics (instance, prometheus_client)": (
        "_store/instance.py",
        "_metrics.py",
        "prometheus_client",
    ),
}


async def profile_round(client: Redis, appends: int) -> None:
    profiler = cProfile.Profile()
    await append_round(client, appends, "counted", seed=99, profiler=profiler)
    stats = pstats.Stats(profiler)
    totals = dict.fromkeys([*GROUPS, "event loop and the rest"], 0.0)
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, _, tottime, _, _) in entries.items():
        where = f"{filename} {name}"
        group = next(
            (g for g, marks in GROUPS.items() if any(m in where for m in marks)),
            "event loop and the rest",
        )
        totals[group] += tottime
    whole = sum(totals.values())
    print("\n| where the event loop's time goes (one counted round, cProfile) | share |")
    print("| --- | ---: |")
    for group, seconds in totals.items():
        print(f"| {group} | {seconds / whole:.0%} |")


COLD = """
import asyncio, sys, time
t0 = time.perf_counter()
from redis.asyncio import Redis
from compozy_memory import MemoryInstance, warm
async def main():
    client = Redis.from_url(sys.argv[1])
    mem = MemoryInstance.open(client, project="cold", key=sys.argv[2])
    if sys.argv[3] == "warm":
        await warm(client)
    started = time.perf_counter()
    await mem.append({"role": "user", "content": "hello, I need help with my order " * 20})
    first = time.perf_counter() - started
    steady = []
    for i in range(50):
        started = time.perf_counter()
        await mem.append({"role": "user", "content": f"turn {i}: " + "more details " * 30})
        steady.append(time.perf_counter() - started)
    steady.sort()
    print(first * 1000, steady[len(steady) // 2] * 1000)
    await client.aclose()
asyncio.run(main())
"""


def cold_start(url: str, processes: int) -> None:
    rows = {}
    for kind in ("cold", "warm"):
        firsts, steadies = [], []
        for _ in range(processes):
            out = subprocess.run(
                [sys.executable, "-c", COLD, url, uuid.uuid4().hex, kind],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            firsts.append(float(out[0]))
            steadies.append(float(out[1]))
        rows[kind] = (statistics.median(firsts), statistics.median(steadies))
    print(f"\n| a fresh process ({processes} each, medians) | first append ms | steady ms | x |")
    print("| --- | ---: | ---: | ---: |")
    for kind, label in (("cold", "no warm()"), ("warm", "after warm()")):
        first, steady = rows[kind]
        print(f"| {label} | {first:.2f} | {steady:.2f} | {first / steady:.1f}x |")


async def bytes_per_message(client: Redis) -> None:
    messages = [
        {"role": "user" if i % 2 else "assistant", "content": t}
        for i, t in enumerate(texts(random.Random(7), 500))
    ]
    bodies = [json.dumps(m, separators=(",", ":"), ensure_ascii=False) for m in messages]
    payload = sum(len(body.encode()) for body in bodies)
    mem = MemoryInstance.open(client, project="bench", key=f"bytes-{uuid.uuid4().hex}")
    for message in messages:
        await mem.append(message)
    usage: dict[str, int] = {}
    async for key in client.scan_iter(match=f"{mem.key}:*"):
        name = key.decode().rsplit(":", 1)[-1]
        usage[name] = int(await client.memory_usage(key, samples=0) or 0)
    plain = f"bench:plain:{uuid.uuid4().hex}"
    await client.rpush(plain, *bodies)
    plain_bytes = int(await client.memory_usage(plain, samples=0) or 0)
    await client.delete(plain)
    await mem.clear()
    total = sum(usage.values())
    print("\n| 500 messages of ~300 tokens, appended one by one | bytes | x JSON payload |")
    print("| --- | ---: | ---: |")
    print(f"| JSON payload (role, content) | {payload:,} | 1.00x |")
    print(f"| a plain list of that JSON | {plain_bytes:,} | {plain_bytes / payload:.3f}x |")
    for name, size in sorted(usage.items()):
        print(f"| this memory's `{name}` | {size:,} | {size / payload:.3f}x |")
    print(f"| this memory, every key | {total:,} | **{total / payload:.3f}x** |")


async def main(args: argparse.Namespace) -> None:
    server = None if args.url else start_server()
    url = args.url or server.url  # type: ignore[union-attr]
    # A connection a session for raw RPUSH, and room for the handles' background work (the
    # indexer, the session index) that may still be running from an earlier mode's round.
    client = Redis.from_url(url, max_connections=SESSIONS + 16)
    try:
        modes = tuple(args.modes.split(","))
        if "raw" not in modes:
            modes = ("raw", *modes)
        for mode in modes:  # warm the pool, the scripts and the encoder
            await append_round(client, 10, mode, seed=0)
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        ratios: dict[str, list[float]] = {mode: [] for mode in modes}
        cpus: dict[str, list[float]] = {mode: [] for mode in modes}
        for r in range(args.rounds):
            # Every other round in reverse order, so no mode always runs after another.
            for mode in modes if r % 2 == 0 else modes[::-1]:
                seed = 100 * (r + 1) + modes.index(mode)  # texts of its own: no count cached
                made, spent = await append_round(client, args.appends, mode, seed=seed)
                rates[mode].append(made)
                cpus[mode].append(spent)
            for mode in modes:
                ratios[mode].append(rates[mode][-1] / rates["raw"][-1])
        rate = {mode: statistics.median(values) for mode, values in rates.items()}
        cpu = {mode: statistics.median(values) for mode, values in cpus.items()}
        ratio = {mode: statistics.median(values) for mode, values in ratios.items()}
        engine = TiktokenCounter().engine
        print(f"engine: {'embedded valkey' if server else url}; {args.rounds} rounds, medians")
        print(
            f"\n| {SESSIONS} sessions x {args.appends} appends, ~300-token messages | msg/s "
            "| x raw RPUSH (median of rounds) | range | client CPU us/msg |"
        )
        print("| --- | ---: | ---: | --- | ---: |")
        for mode, label in (  # in the order of the table, those measured
            ("raw", "raw RPUSH of the JSON"),
            ("default", f"**append, every default**: counted ({engine}), indexed (waited for)"),
            ("counted", f"append, counted by the library (exact, {engine}), not indexed"),
            ("tiktoken", "append, counted by tiktoken (in the counting thread), not indexed"),
            ("supplied", "append, counts supplied, not indexed"),
            ("indexed", "append, counts supplied, indexed in the background (waited for)"),
            ("policy", "append, counted, the manager's resource policy (TTL, budget), not indexed"),
            ("manager", "append via MemoryManager, counted (and the session index), not indexed"),
        ):
            if mode not in modes:
                continue
            low, high = min(ratios[mode]), max(ratios[mode])
            print(
                f"| {label} | {rate[mode]:,.0f} | {ratio[mode]:.2f}x | {low:.2f}-{high:.2f} "
                f"| {cpu[mode]:.0f} |"
            )
        # The manager's own cost: its appends against the same appends made directly on a
        # MemoryInstance with the same policy, round by round (only the manager differs).
        if "manager" in modes and "policy" in modes:
            direct = [m / c for m, c in zip(rates["manager"], rates["policy"], strict=True)]
            print(
                f"\nthrough MemoryManager / direct MemoryInstance, same policy: "
                f"{statistics.median(direct):.2f}x (median of rounds; "
                f"{min(direct):.2f}-{max(direct):.2f})"
            )
        if args.profile:
            await profile_round(client, args.appends)
        await bytes_per_message(client)
    finally:
        await client.aclose()
    try:
        if args.cold:
            cold_start(url, args.cold)
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--appends", type=int, default=200, help="appends per session per round")
    parser.add_argument("--profile", action="store_true", help="where the loop's time goes")
    parser.add_argument("--cold", type=int, default=5, help="fresh processes per kind (0: none)")
    parser.add_argument(
        "--modes",
        default="raw,default,counted,tiktoken,supplied,indexed,policy,manager",
        help="the append modes to measure, comma-separated (raw always is)",
    )
    asyncio.run(main(parser.parse_args()))
