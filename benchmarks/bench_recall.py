"""How many planted facts reach the context, and what search over the archive costs, end to end.

Against a real server (an embedded Valkey unless ``--url``), on the generated conversations of
``benchmarks.recall_data``:

1. Share of questions whose answer words all appear (case-insensitive substrings of the joined
   context text) in a context of ``B`` tokens:

   * ``window``: the newest messages that fit ``B`` (``read_window(B)`` of a memory that
     never flushes);
   * ``<summarizer>``: every message appended in order, one ``append`` each, to a
     ``MemoryManager`` memory with ``max_tokens: B`` and default flushing (background
     flushes, then the flusher awaited idle and a final ``flush()``), scored on
     ``context(B)``;
   * ``<summarizer>+q``: the same memory scored on ``context(B, query=question)``.

2. Search recall@5 and @10 on the flushed memories (questions whose evidence was archived):
   strict (the evidence message is a hit) and with neighbours (or a hit's ``before`` /
   ``after``).

3. Search cost: ms per ``search()`` (p50, p95) at 1k, 10k and 100k archived messages
   (``append_many`` in batches of 500, each archived by ``trim(keep_messages=0)``).

Tokens are counted with the library's default counter (offline tiktoken). Printed, never
asserted; the targets are in the last table. Flushes run in the background as appends go,
so where they cut depends on timing: shares move by a few points between runs on a busy
machine, and the search timings follow the machine's load (compare "mean ms in server").

Experiments, none changing the library: ``--variant name:s,r,backfill,nw,limit`` scores
another ContextPolicy / SearchPolicy on the same flushed memories, ``--flushing key=value``
overrides the memories' ``flushing_strategy``, ``--summarizers`` picks the summarizers,
``--query-postings N`` changes the postings a search reads per term (QUERY_POSTINGS, in
this process only), ``--conversations 0`` measures the search cost alone.

Run: ``python -m benchmarks.bench_recall [--conversations 10] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from redis.asyncio import Redis

from benchmarks.recall_data import Conversation, Question, generate, message_text
from compozy_memory import MemoryInstance, MemoryManager, MemoryRegistry, Message
from compozy_memory._config.schema import MemoryResource
from compozy_memory._model.limits import LUA_CONSTANTS
from compozy_memory._model.policy import ContextPolicy, MemoryPolicy, SearchPolicy
from compozy_memory._model.results import Hit
from compozy_memory.embedded import start_server

BUDGETS = (2_000, 4_000, 8_000)
SUMMARIZERS = ("rule_based", "extractive")
COST_SIZES = (1_000, 10_000, 100_000)
COST_QUERIES = 200
BATCH = 500
PARALLEL = 4  # conversations fed at once: the server and the client overlap

# --- scoring (pure: tests/test_bench_recall.py) -------------------------------------------


def text_of(message: Message) -> str:
    """Everything a model reads of a stored message."""
    return message_text(message.model_dump(include={"content"}))


def joined(messages: Iterable[Message]) -> str:
    return "\n".join(text_of(m) for m in messages).lower()


def answered(question: Question, context_text: str) -> bool:
    """Whether every answer word is a case-insensitive substring of ``context_text``."""
    lowered = context_text.lower()
    return all(word.lower() in lowered for word in question.answer_words)


def found(hits: Sequence[Hit], evidence_id: int, k: int, neighbours: bool) -> bool:
    """Whether the evidence is one of the first ``k`` hits (or, with ``neighbours``, the turn
    before or after one of them)."""
    for hit in hits[:k]:
        if hit.id == evidence_id:
            return True
        if neighbours and any(
            m is not None and m.id == evidence_id for m in (hit.before, hit.after)
        ):
            return True
    return False


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --- part 1 and 2 -------------------------------------------------------------------------


@dataclass
class Tally:
    """Counts for one (method, budget): questions kept, and search hits."""

    kept: int = 0
    asked: int = 0
    searched: int = 0
    search: Counter[str] = field(default_factory=Counter)


@dataclass
class Variant:
    """A read-time policy scored on the same flushed memories (no refilling needed)."""

    name: str
    context: ContextPolicy
    search: SearchPolicy


DEFAULT_VARIANT = Variant("default", ContextPolicy(), SearchPolicy())


async def window_only(
    client: Redis, conv: Conversation, budgets: Sequence[int], run: str
) -> dict[int, int]:
    """Questions kept by the newest messages that fit each budget."""
    mem = MemoryInstance.open(client, project="bench", key=f"{run}:window:{conv.conversation_id}")
    for start in range(0, len(conv.messages), BATCH):
        await mem.append_many(conv.messages[start : start + BATCH])
    out = {}
    for budget in budgets:
        text = joined(await mem.read_window(budget))
        out[budget] = sum(answered(q, text) for q in conv.questions)
    await mem.clear()
    return out


async def flushed_memory(
    manager: MemoryManager, memory_id: str, conv: Conversation, run: str
) -> tuple[MemoryInstance, list[int]]:
    """A manager memory fed every message in order; the id each message got."""
    mem = await manager.get(memory_id, {"conv": f"{run}-{conv.conversation_id}"})
    ids: list[int] = []
    for message in conv.messages:
        ids.append((await mem.append(message)).first_id)
    flusher = mem.flusher
    assert flusher is not None
    await flusher.wait_idle()
    await mem.flush()
    return mem, ids


async def score_memory(
    mem: MemoryInstance,
    ids: Sequence[int],
    conv: Conversation,
    budget: int,
    variants: Sequence[Variant],
    tallies: dict[tuple[str, str], Tally],
    prefix: str,
) -> None:
    live = {m.id for m in await mem.read()}
    for variant in variants:
        policy = replace(mem.policy, context=variant.context, search=variant.search)
        view = MemoryInstance(mem.client, mem.keys, policy=policy, counter=mem.counter)
        plain = tallies.setdefault((f"{prefix}", variant.name), Tally())
        queried = tallies.setdefault((f"{prefix}+q", variant.name), Tally())
        text = joined(await view.context(budget))
        for q in conv.questions:
            plain.asked += 1
            plain.kept += answered(q, text)
            queried.asked += 1
            queried.kept += answered(q, joined(await view.context(budget, query=q.question)))
            evidence = ids[q.evidence_index]
            if evidence in live:
                continue
            hits = await view.search(q.question, limit=10)
            queried.searched += 1
            for k in (5, 10):
                queried.search[f"@{k}"] += found(hits, evidence, k, neighbours=False)
                queried.search[f"@{k}n"] += found(hits, evidence, k, neighbours=True)


def resources(
    budgets: Sequence[int], summarizers: Sequence[str], flushing: dict[str, Any]
) -> list[MemoryResource]:
    """One memory per budget and summarizer; ``flushing`` overrides ``flushing_strategy``."""
    return [
        MemoryResource.model_validate(
            {
                "id": f"{name.replace('_', '-')}-{budget}",
                "max_tokens": budget,
                "summarizer": {"type": name},
                "default_key_template": "{{ .conv }}",
                "flushing_strategy": flushing,
            }
        )
        for budget in budgets
        for name in summarizers
    ]


async def context_shares(
    client: Redis,
    conversations: Sequence[Conversation],
    budgets: Sequence[int],
    variants: Sequence[Variant],
    run: str,
    flushing: dict[str, Any],
    summarizers: Sequence[str],
) -> tuple[dict[int, float], dict[tuple[int, str, str], Tally], float]:
    """Window shares by budget; tallies by (budget, method, variant); seconds spent."""
    started = time.perf_counter()
    registry = MemoryRegistry("bench", resources(budgets, summarizers, flushing))
    manager = MemoryManager(registry, client)
    total = sum(len(c.questions) for c in conversations)
    window: Counter[int] = Counter()
    tallies: dict[tuple[int, str, str], Tally] = {}
    gate = asyncio.Semaphore(PARALLEL)

    async def one(conv: Conversation, budget: int, name: str) -> None:
        async with gate:
            memory_id = f"{name.replace('_', '-')}-{budget}"
            mem, ids = await flushed_memory(manager, memory_id, conv, run)
            local: dict[tuple[str, str], Tally] = {}
            await score_memory(mem, ids, conv, budget, variants, local, name)
            for (method, variant), tally in local.items():
                into = tallies.setdefault((budget, method, variant), Tally())
                into.kept += tally.kept
                into.asked += tally.asked
                into.searched += tally.searched
                into.search.update(tally.search)
            await mem.clear()

    async def windows(conv: Conversation) -> None:
        async with gate:
            window.update(await window_only(client, conv, budgets, run))

    await asyncio.gather(
        *(windows(c) for c in conversations),
        *(one(c, b, n) for c in conversations for b in budgets for n in summarizers),
    )
    await manager.aclose()
    return (
        {b: window[b] / total for b in budgets},
        tallies,
        time.perf_counter() - started,
    )


# --- part 3 -------------------------------------------------------------------------------


def corpus(size: int) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """``size`` generated messages, and questions about them with the position of their
    evidence (a fifth of each conversation's questions)."""
    messages: list[dict[str, Any]] = []
    questions: list[tuple[str, int]] = []
    seed = 1
    while len(messages) < size:
        for conv in generate(n_conversations=5, seed=seed):
            questions.extend(
                (q.question, len(messages) + q.evidence_index) for q in conv.questions[::5]
            )
            messages.extend(conv.messages)
        seed += 1
    return messages[:size], questions


@dataclass
class CostRow:
    size: int
    fill_seconds: float  # cumulative, from an empty memory
    p50: float
    p95: float
    server_ms: float  # mean time inside the server per search (INFO commandstats)
    recall10: float  # strict recall@10 of the timed questions in this archive
    queries: int


async def _server_usec(client: Redis) -> tuple[float, int]:
    """Total microseconds and calls of every command so far."""
    stats = await client.info("commandstats")
    usec = sum(float(v["usec"]) for v in stats.values() if isinstance(v, dict))
    calls = sum(int(v["calls"]) for v in stats.values() if isinstance(v, dict))
    return usec, calls


async def search_cost(client: Redis, sizes: Sequence[int], run: str) -> list[CostRow]:
    """Fill one memory up to each size (archiving every batch), then time ``COST_QUERIES``
    searches of questions whose evidence is in the archive."""
    messages, questions = corpus(max(sizes))
    mem = MemoryInstance.open(
        client, project="bench", key=f"{run}:cost", policy=MemoryPolicy(archive_max=0)
    )
    rows = []
    filled, fill_seconds = 0, 0.0
    for size in sorted(sizes):
        started = time.perf_counter()
        while filled < size:
            batch = messages[filled : min(size, filled + BATCH)]
            await mem.append_many(batch)
            await mem.trim(keep_messages=0)
            filled += len(batch)
        fill_seconds += time.perf_counter() - started
        inside = [q for q in questions if q[1] < size]
        step = max(1, len(inside) // COST_QUERIES)
        queries = (inside[::step] * COST_QUERIES)[:COST_QUERIES]
        for text, _ in queries[:10]:  # warm the script cache and the connection
            await mem.search(text)
        samples, hits = [], 0
        usec, calls = await _server_usec(client)
        for text, evidence in queries:
            started = time.perf_counter()
            found_hits = await mem.search(text, limit=10)
            samples.append((time.perf_counter() - started) * 1000)
            hits += any(h.id == evidence + 1 for h in found_hits)  # ids are 1.. in order
        usec_after, calls_after = await _server_usec(client)
        server_ms = (usec_after - usec) / 1000 / max(1, len(queries))
        del calls, calls_after  # one EVALSHA per search; INFO itself is not counted yet
        rows.append(
            CostRow(
                size,
                fill_seconds,
                percentile(samples, 0.5),
                percentile(samples, 0.95),
                server_ms,
                hits / len(queries),
                len(queries),
            )
        )
    await mem.clear()
    return rows


# --- report -------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f"{value:.1%}"


def report(
    conversations: Sequence[Conversation],
    budgets: Sequence[int],
    summarizers: Sequence[str],
    window: dict[int, float],
    tallies: dict[tuple[int, str, str], Tally],
    variants: Sequence[Variant],
    cost: Sequence[CostRow],
) -> None:
    total = sum(len(c.questions) for c in conversations)
    n_messages = sum(len(c.messages) for c in conversations)
    print(
        f"{len(conversations)} conversations ({n_messages} messages), {total} questions; "
        "embedded Valkey\n"
    )
    for variant in variants if budgets else ():
        print(f"### 1. Share of questions whose answer words are in the context ({variant.name})")
        print()
        methods = ["window"] + [m for n in summarizers for m in (n, f"{n}+q")]
        print("| budget | " + " | ".join(methods) + " |")
        print("| ---: |" + " ---: |" * len(methods))
        for budget in budgets:
            cells = [_pct(window[budget])]
            for method in methods[1:]:
                t = tallies[(budget, method, variant.name)]
                ratio = (t.kept / t.asked) / window[budget] if window[budget] else float("inf")
                cells.append(f"{_pct(t.kept / t.asked)} ({ratio:.1f}x)")
            print(f"| {budget} | " + " | ".join(cells) + " |")
        print()
        print(f"### 2. Search recall over archived evidence ({variant.name})")
        print()
        print("| budget | memory | questions | @5 | @10 | @5 +nbr | @10 +nbr |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for budget in budgets:
            for name in summarizers:
                t = tallies[(budget, f"{name}+q", variant.name)]
                n = max(1, t.searched)
                cells = [_pct(t.search[key] / n) for key in ("@5", "@10", "@5n", "@10n")]
                print(f"| {budget} | {name} | {t.searched} | " + " | ".join(cells) + " |")
        print()
    print("### 3. Search cost (limit 10, 200 queries)")
    print()
    print(
        "| archived messages | fill time (cumulative) | p50 ms | p95 ms "
        "| mean ms in server | recall@10 of the timed questions |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in cost:
        print(
            f"| {row.size:,} | {row.fill_seconds:.1f} s | {row.p50:.2f} | {row.p95:.2f} "
            f"| {row.server_ms:.2f} | {row.recall10:.3f} |"
        )
    print()
    targets(budgets, summarizers, window, tallies, cost)


def targets(
    budgets: Sequence[int],
    summarizers: Sequence[str],
    window: dict[int, float],
    tallies: dict[tuple[int, str, str], Tally],
    cost: Sequence[CostRow],
) -> None:
    print("### Targets (default policy)")
    print()
    print("| target | measured | met |")
    print("| --- | --- | --- |")
    if 4_000 in budgets and window:
        base = window[4_000]
        for name in summarizers:
            plain = tallies[(4_000, name, "default")]
            queried = tallies[(4_000, f"{name}+q", "default")]
            r1 = (plain.kept / plain.asked) / base if base else float("inf")
            r2 = (queried.kept / queried.asked) / base if base else float("inf")
            print(f"| 4k context(B), {name} >= 1.5x window | {r1:.2f}x | {_yes(r1 >= 1.5)} |")
            print(f"| 4k context(B, query), {name} >= 3x window | {r2:.2f}x | {_yes(r2 >= 3)} |")
            n = max(1, queried.searched)
            r10 = queried.search["@10"] / n
            ok = _yes(r10 >= 0.8)
            print(f"| search recall@10 (strict), 4k {name} >= 0.8 | {r10:.3f} | {ok} |")
    for row in cost:
        if row.size == 100_000:
            ok = _yes(row.p50 < 5)
            print(f"| search p50 at 100k archived < 5 ms | {row.p50:.2f} ms | {ok} |")
    print()


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def parse_variant(spec: str) -> Variant:
    """``name:summary_share,recall_share,backfill(0|1),neighbour_weight,limit``."""
    name, _, values = spec.partition(":")
    s, r, bf, nw, lim = values.split(",")
    return Variant(
        name,
        ContextPolicy(float(s), float(r), bool(int(bf))),
        SearchPolicy(neighbour_weight=float(nw), limit=int(lim)),
    )


async def run(args: Any) -> None:
    budgets = tuple(args.budgets)
    variants = [DEFAULT_VARIANT, *(parse_variant(v) for v in args.variant)]
    conversations = generate(args.conversations, args.seed)
    flushing: dict[str, Any] = {}
    for setting in args.flushing:
        name, _, value = setting.partition("=")
        flushing[name] = float(value) if "." in value else int(value)
    if flushing:
        print(f"flushing_strategy overrides: {flushing}")
    server = None if args.url else start_server()
    client = Redis.from_url(args.url or server.url, max_connections=16)  # type: ignore[union-attr]
    tag = uuid.uuid4().hex[:8]
    window: dict[int, float] = {}
    tallies: dict[tuple[int, str, str], Tally] = {}
    spent = 0.0
    try:
        if conversations:
            window, tallies, spent = await context_shares(
                client, conversations, budgets, variants, tag, flushing, args.summarizers
            )
        started = time.perf_counter()
        cost = await search_cost(client, args.sizes, tag) if args.sizes else []
        cost_spent = time.perf_counter() - started
    finally:
        await client.aclose()
        if server:
            server.stop()
    report(
        conversations,
        budgets if conversations else (),
        args.summarizers,
        window,
        tallies,
        variants,
        cost,
    )
    print(f"parts 1-2: {spent:.0f} s; part 3: {cost_spent:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", type=int, nargs="+", default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None, help="search-cost sizes")
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    parser.add_argument(
        "--quick", action="store_true", help="2 conversations, budgets 2k 4k, cost at 1k 10k"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="also score a read-time policy: name:summary_share,recall_share,backfill,"
        "neighbour_weight,limit (e.g. wide:0.3,0.5,1,0.5,10)",
    )
    parser.add_argument(
        "--flushing",
        action="append",
        default=[],
        help="override a flushing_strategy setting of the memories, e.g. summary_tokens=1000",
    )
    parser.add_argument(
        "--summarizers", nargs="+", choices=SUMMARIZERS, default=None, help="default: both"
    )
    parser.add_argument(
        "--query-postings",
        type=int,
        help="experiment: postings a search reads per query term (library: QUERY_POSTINGS)",
    )
    args: Any = parser.parse_args(argv)
    args.summarizers = tuple(args.summarizers or SUMMARIZERS)
    if args.query_postings is not None:
        # Before any script is built: the scripts inline the limits once per process.
        LUA_CONSTANTS["QUERY_POSTINGS"] = args.query_postings
        print(f"experiment: QUERY_POSTINGS = {args.query_postings}")
    if args.conversations is None:
        args.conversations = 2 if args.quick else 10
    if args.budgets is None:
        args.budgets = list(BUDGETS[:2] if args.quick else BUDGETS)
    if args.sizes is None:
        args.sizes = list(COST_SIZES[:2] if args.quick else COST_SIZES)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
