"""The scoring of benchmarks/bench_recall.py: what counts as a kept answer and a search hit."""

from __future__ import annotations

from benchmarks.bench_recall import answered, found, joined, percentile
from benchmarks.recall_data import Question
from compozy_memory import Message
from compozy_memory._model.results import Hit


def _question(*words: str) -> Question:
    return Question("What tea does Idris like?", words, 0, "direct")


def _message(i: int, text: str = "x") -> Message:
    return Message.model_validate({"id": i, "role": "user", "content": text})


def test_answered_needs_every_word_case_insensitively() -> None:
    text = joined([_message(1, "Idris loves GENMAICHA"), _message(2, "in Kyoto")])
    assert answered(_question("genmaicha"), text)
    assert answered(_question("Genmaicha", "kyoto"), text)
    assert not answered(_question("genmaicha", "Lisbon"), text)


def test_joined_reads_tool_blocks() -> None:
    result = Message.model_validate(
        {
            "id": 3,
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Order 4417"}],
        }
    )
    assert answered(_question("4417"), joined([result]))


def test_found_strict_and_with_neighbours() -> None:
    hits = [
        Hit(10, 2.0, _message(10), before=_message(9), after=_message(11)),
        Hit(20, 1.0, _message(20), before=_message(19), after=None),
    ]
    assert found(hits, 10, 1, neighbours=False)
    assert not found(hits, 11, 1, neighbours=False)
    assert found(hits, 11, 1, neighbours=True)
    assert not found(hits, 19, 1, neighbours=True)  # only the first hit counts at k=1
    assert found(hits, 19, 2, neighbours=True)
    assert not found(hits, 21, 2, neighbours=True)


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) in (50.0, 51.0)
    assert percentile(values, 0.95) in (95.0, 96.0)
    assert percentile([3.0], 0.95) == 3.0
