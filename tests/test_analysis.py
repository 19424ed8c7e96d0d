"""The archive analyzer: what a message and a query turn into."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compozy_memory._search import analysis as analysis_module
from compozy_memory._search.analysis import (
    _TOKEN_RE,
    MAX_TERM_BYTES,
    STOP_WORDS,
    analyze,
    analyze_query,
    cap_term,
)
from compozy_memory._search.documents import message_terms


def _ts(year: int, month: int, day: int) -> int:
    return int(datetime(year, month, day, 15, 30, tzinfo=UTC).timestamp() * 1000)


def test_stemming_joins_inflections() -> None:
    assert analyze("running")[0] == analyze("runs")[0] == analyze("run")[0]
    assert analyze("adopted") == analyze("adopting") == analyze("adoption")


def test_stop_words_are_dropped_and_content_words_kept() -> None:
    assert analyze("the and is of to it was") == []
    assert analyze("Yes, thanks! Okay, so...") == []
    # The stock list treats these as noise; in an archive they are what people ask about.
    for word in ("order", "name", "date", "may", "home", "number"):
        assert word not in STOP_WORDS
        assert analyze(word) != []


def test_numbers_and_ids_are_searchable() -> None:
    terms = analyze("Order #1042 cost $1,200 at 3pm on 2023-05-08, ref SKU-4471-XL, 12:30")
    for term in ("1042", "1200", "3pm", "3", "2023-05-08", "2023", "sku-4471-xl", "4471", "12:30"):
        assert term in terms
    assert set(analyze_query("what about order 1042?")) <= set(terms)
    assert "40" in analyze("It was $40.")


def test_casefold_and_accents() -> None:
    assert analyze("JOSÉ Café") == analyze("jose cafe")
    assert analyze("Caroline\u2019s dog") == analyze("caroline's DOG") == analyze("Caroline dog")


def test_scripts_without_spaces_become_bigrams() -> None:
    assert analyze("東京") == ["東京"]
    assert "京都" in analyze("京都に行きました")


def test_long_terms_are_capped_with_a_hash() -> None:
    long_a = "a" * 100
    long_b = "a" * 99 + "b"
    (term_a,) = analyze(long_a)
    (term_b,) = analyze(long_b)
    assert len(term_a.encode()) <= MAX_TERM_BYTES
    assert term_a != term_b
    assert term_a == cap_term(long_a)
    assert cap_term("é" * 60).encode().decode() == cap_term("é" * 60)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_every_term_is_short_and_a_safe_field_name(text: str) -> None:
    for term in analyze(text):
        assert term
        assert len(term.encode()) <= MAX_TERM_BYTES
        assert not any(c.isspace() or ord(c) < 32 for c in term)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ09 .,-_:/@'#$!?()\n\té\u2019x"), max_size=60))
def test_whole_text_equals_token_by_token(text: str) -> None:
    # analyze splits on blanks first and runs the token regex only on new chunks; that must
    # not change what a whole text yields.
    folded = text.casefold().replace("\u2019", "'")
    by_token = [term for token in _TOKEN_RE.findall(folded) for term in analyze(token)]
    assert analyze(text) == by_token


def test_a_full_chunk_memo_starts_again_without_changing_the_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The memo analyses the chunks it lacks as they are looked up, and empties itself when
    # full, in the middle of a text if need be: the terms stay those of a memo never full.
    text = " ".join(
        f"order-{n} shipped to Rua Augusta {n} on 2023-05-{n % 28 + 1:02d}" for n in range(40)
    )
    expected = analyze(text)
    analysis_module._state.chunks.clear()
    monkeypatch.setattr(analysis_module, "_CHUNK_MEMO_LIMIT", 7)
    assert analyze(text) == expected
    assert analyze(text) == expected
    assert len(analysis_module._state.chunks) <= 7


def test_deterministic_across_threads() -> None:
    text = "We adopted a puppy named Biscuit in Lisbon on 2023-05-08, order #4471 for $86.40"
    expected = analyze(text)
    results: list[list[str]] = []

    def work() -> None:
        for _ in range(200):
            results.append(analyze(text))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r == expected for r in results)


def test_pystemmer_and_snowballstemmer_agree() -> None:
    stemmer_mod = pytest.importorskip("Stemmer")
    snowball = pytest.importorskip("snowballstemmer")
    words = [
        "running",
        "runs",
        "adopted",
        "adoption",
        "puppies",
        "hiking",
        "generously",
        "dying",
        "skies",
        "organisation",
        "caroline's",
        "melanie",
        "visiting",
        "volunteering",
        "favourite",
        "marathons",
        "tomatoes",
        "scarves",
    ]
    assert stemmer_mod.Stemmer("english").stemWords(words) == snowball.stemmer("english").stemWords(
        words
    )


def test_message_terms_index_speaker_and_date() -> None:
    message = {
        "id": 17,
        "ts": _ts(2023, 5, 8),
        "role": "user",
        "name": "Caroline",
        "content": "I went to the support group yesterday",
    }
    tf, length = message_terms(message)
    assert set(analyze("Caroline")) <= set(tf)
    for term in ("may", "2023", "2023-05-08"):
        assert tf[term] == 1
    assert length == sum(tf.values())
    assert set(analyze_query("When did Caroline go to the support group in May 2023?")) <= set(tf)


def test_message_terms_fall_back_to_role_and_metadata_date() -> None:
    tf, _ = message_terms(
        {"role": "assistant", "content": "Sure.", "metadata": {"date": "2024-12-01"}}
    )
    assert set(analyze("assistant")) <= set(tf)
    assert {"decemb", "2024", "2024-12-01"} <= set(tf)


def test_message_terms_flatten_tool_calls_and_results() -> None:
    call = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "lookup_order",
                "input": {"order_id": "4471", "expand": ["items"]},
            },
        ],
    }
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "Order 4471 shipped with Purolator"}],
            }
        ],
    }
    call_tf, _ = message_terms(call)
    assert {"lookup_order", "4471", "item"} <= set(call_tf)
    assert "order_id" not in call_tf
    result_tf, _ = message_terms(result)
    assert "4471" in result_tf
    assert set(analyze("Purolator shipped")) <= set(result_tf)
