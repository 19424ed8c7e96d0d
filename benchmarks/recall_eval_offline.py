"""Search recall and query cost of the reference BM25 index on the generated benchmark data.

No Redis: every message of a conversation is analysed and added to ``Index`` (doc id = the
message's position), each question is analysed and searched, and a question is a hit at k when
its evidence message is among the k best documents ("strict"), or when the evidence or one of
its two neighbours is ("+-1": what a context that brings each hit's neighbours along would
hold). Then the cost of a query at 1k, 10k and 100k indexed messages, with and without a
postings cap.

Run: ``python -m benchmarks.recall_eval_offline [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from benchmarks.bm25_reference import DEFAULT_NEIGHBOUR_WEIGHT, Index
from benchmarks.recall_data import Conversation, generate
from compozy_memory._search.analysis import analyze, analyze_query
from compozy_memory._search.documents import message_terms

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
SIZES = (1_000, 10_000, 100_000)
CAPS: tuple[int | None, ...] = (None, 2_000, 500)


def envelope(doc_id: int, message: dict[str, Any]) -> dict[str, Any]:
    """The archive's JSON envelope for a generated message: id and a ts on its session day."""
    day = datetime.fromisoformat(message["metadata"]["date"]).replace(hour=9, tzinfo=UTC)
    ts = int(day.timestamp() * 1000) + doc_id * 30_000 % 36_000_000
    return {"id": doc_id, "ts": ts, **message}


def index_messages(messages: Iterable[dict[str, Any]], postings_cap: int | None = None) -> Index:
    """An index of messages, the doc id of each being its position."""
    index = Index(postings_cap)
    for doc_id, message in enumerate(messages):
        terms, length = message_terms(envelope(doc_id, message))
        index.add(doc_id, terms, length)
    return index


def hit(ranked: Sequence[int], evidence: int, k: int, lenient: bool) -> bool:
    """Whether the evidence (or, when lenient, a neighbour of it) is in the first k."""
    top = ranked[:k]
    if evidence in top:
        return True
    return lenient and (evidence - 1 in top or evidence + 1 in top)


def recall_table(conversations: Sequence[Conversation]) -> dict[float, dict[str, float]]:
    """Recall@5/@10, strict and +-1, for each neighbour weight."""
    indexes = [index_messages(c.messages) for c in conversations]
    table: dict[float, dict[str, float]] = {}
    for weight in WEIGHTS:
        counts: Counter[str] = Counter()
        total = 0
        for conv, index in zip(conversations, indexes, strict=True):
            for q in conv.questions:
                ranked = [
                    d for d, _ in index.search(analyze_query(q.question), 10, neighbours=weight)
                ]
                total += 1
                for k in (5, 10):
                    counts[f"@{k}"] += hit(ranked, q.evidence_index, k, lenient=False)
                    counts[f"@{k}+-1"] += hit(ranked, q.evidence_index, k, lenient=True)
        table[weight] = {key: counts[key] / total for key in ("@5", "@10", "@5+-1", "@10+-1")}
    return table


def recall_by_kind(
    conversations: Sequence[Conversation], weight: float
) -> dict[str, tuple[float, int]]:
    """Strict recall@10 per question kind (and per conversation kind), with its count."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for conv in conversations:
        index = index_messages(conv.messages)
        for q in conv.questions:
            ranked = [d for d, _ in index.search(analyze_query(q.question), 10, neighbours=weight)]
            ok = hit(ranked, q.evidence_index, 10, lenient=False)
            hits[f"{conv.kind}/{q.kind}"].append(ok)
            hits[f"{conv.kind} (all)"].append(ok)
    return {key: (sum(v) / len(v), len(v)) for key, v in sorted(hits.items())}


def _corpus(size: int) -> tuple[list[dict[str, Any]], list[list[str]]]:
    messages: list[dict[str, Any]] = []
    queries: list[list[str]] = []
    seed = 1
    while len(messages) < size:
        for conv in generate(n_conversations=5, seed=seed):
            messages.extend(conv.messages)
            queries.extend(analyze_query(q.question) for q in conv.questions[::5])
        seed += 1
    return messages[:size], queries


def time_queries(index: Index, queries: Sequence[list[str]], repeat: int = 1) -> float:
    """Mean milliseconds per ``index.search(query, 10)`` over ``queries``."""
    start = time.perf_counter()
    for _ in range(repeat):
        for query in queries:
            index.search(query, 10)
    return (time.perf_counter() - start) * 1000 / (len(queries) * repeat)


def analyzer_cost(messages: Sequence[dict[str, Any]]) -> tuple[float, float, float]:
    """Mean microseconds of ``analyze`` on 50-70-word texts, and of ``message_terms``."""
    words = " ".join(str(m["content"]) for m in messages if isinstance(m["content"], str)).split()
    texts = [" ".join(words[i : i + 60]) for i in range(0, min(len(words), 60 * 2000), 60)]
    for text in texts:
        analyze(text)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for text in texts:
            analyze(text)
        runs.append((time.perf_counter() - start) * 1e6 / len(texts))
    envelopes = [envelope(i, m) for i, m in enumerate(messages)]
    start = time.perf_counter()
    lengths = 0
    for env in envelopes:
        lengths += len(message_terms(env).tf)
    per_message = (time.perf_counter() - start) * 1e6 / len(envelopes)
    return statistics.median(runs), per_message, lengths / len(envelopes)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the recall table, the per-kind breakdown and the cost table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip the 100k-message timing")
    args = parser.parse_args(argv)

    conversations = generate()
    n_questions = sum(len(c.questions) for c in conversations)
    n_messages = sum(len(c.messages) for c in conversations)
    print(f"{len(conversations)} conversations, {n_messages} messages, {n_questions} questions\n")

    table = recall_table(conversations)
    print("neighbour weight   recall@5  recall@10   @5 (+-1)  @10 (+-1)")
    for weight, row in table.items():
        mark = "  <- default" if weight == DEFAULT_NEIGHBOUR_WEIGHT else ""
        print(
            f"{weight:>16.2f}   {row['@5']:>8.3f}  {row['@10']:>9.3f}"
            f"   {row['@5+-1']:>8.3f}  {row['@10+-1']:>9.3f}{mark}"
        )

    for weight in (0.0, DEFAULT_NEIGHBOUR_WEIGHT):
        print(f"\nrecall@10 (strict) by kind, neighbour weight {weight}:")
        for key, (value, count) in recall_by_kind(conversations, weight).items():
            print(f"  {key:<22}{value:>6.3f}  (n={count})")

    all_messages = [m for c in conversations for m in c.messages]
    analyze_us, message_us, unique_terms = analyzer_cost(all_messages)
    print(
        f"\nanalyze(60 words): {analyze_us:.1f} us;  message_terms(): {message_us:.1f} us/message"
    )
    print(f"unique terms per message: {unique_terms:.1f} (mean over the benchmark messages)")

    sizes = SIZES[:2] if args.quick else SIZES
    corpus, queries = _corpus(max(sizes))
    queries = queries[:300]
    print("\nms per query (top 10, neighbour boost on):")
    print(f"{'messages':>10}" + "".join(f"{'cap ' + str(cap):>12}" for cap in CAPS))
    for size in sizes:
        cells = []
        for cap in CAPS:
            index = index_messages(corpus[:size], cap)
            cells.append(f"{time_queries(index, queries):>12.2f}")
        print(f"{size:>10}" + "".join(cells))


if __name__ == "__main__":
    main()
