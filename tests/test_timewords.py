"""Relative time in a query ("yesterday", "last week") as the date terms documents carry."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from compozy_memory._model.limits import MAX_QUERY_TERMS
from compozy_memory._search.analysis import analyze_query
from compozy_memory._search.documents import message_day, message_terms
from compozy_memory._search.selection import query_terms
from compozy_memory._search.timewords import MAX_TIME_TERMS, mentions_time, time_terms

# A Wednesday.
REF = date(2023, 5, 17)


def said_on(day: date, text: str = "I baked a lemon cake for the party") -> set[str]:
    tf, _ = message_terms(
        {"role": "user", "name": "Ravi", "content": text, "metadata": {"date": day.isoformat()}}
    )
    return set(tf)


def test_last_week_matches_a_message_of_that_week_and_not_one_a_month_earlier() -> None:
    terms = query_terms("What did Ravi bake last week?", "k", REF)
    last_week = [date(2023, 5, 8) + timedelta(days=i) for i in range(7)]  # Monday to Sunday
    for day in last_week:
        assert said_on(day) & set(terms) >= {day.isoformat()}
    month_earlier = said_on(REF - timedelta(days=30))
    same_week = said_on(REF - timedelta(days=1))  # this week's Tuesday: not last week
    extra = set(terms) - set(analyze_query("What did Ravi bake?"))
    assert extra == {d.isoformat() for d in last_week}
    assert not month_earlier & extra
    assert not same_week & extra


@pytest.mark.parametrize(
    ("phrase", "days"),
    [
        ("yesterday", ["2023-05-16"]),
        ("last night", ["2023-05-16"]),
        ("this morning", ["2023-05-17"]),
        ("today", ["2023-05-17"]),
        ("three days ago", ["2023-05-14"]),
        ("2 days ago", ["2023-05-15"]),
        ("the day before yesterday", ["2023-05-15"]),
        ("last Tuesday", ["2023-05-16"]),
        ("last Wednesday", ["2023-05-10"]),
        ("last weekend", ["2023-05-14", "2023-05-13"]),
        ("last month", ["april", "2023"]),
        ("two months ago", ["march", "2023"]),
        ("last year", ["2022"]),
    ],
)
def test_phrases_resolve_against_the_reference_day(phrase: str, days: list[str]) -> None:
    text, terms = time_terms(f"What did Ravi bake {phrase}?", REF)
    assert terms == [analyze_query(d)[0] if d.isalpha() else d for d in days]
    assert analyze_query(text) == analyze_query("What did Ravi bake?")


def test_two_weeks_ago_is_the_week_around_that_day() -> None:
    _, terms = time_terms("two weeks ago", REF)
    centre = REF - timedelta(days=14)
    assert sorted(terms) == sorted((centre + timedelta(days=i)).isoformat() for i in range(-3, 4))


def test_the_time_terms_are_bounded() -> None:
    _, terms = time_terms("in the last 10 weeks, last week, two weeks ago, yesterday", REF)
    assert len(terms) == MAX_TIME_TERMS
    long = " ".join(f"word{i}" for i in range(60)) + " in the past 9 days"
    got = query_terms(long, "k", REF)
    assert len(got) == MAX_QUERY_TERMS
    # The dates keep their place: the text's terms give way.
    assert got[-9:] == [(REF - timedelta(days=i)).isoformat() for i in range(9)]


@pytest.mark.parametrize(
    "query",
    [
        "What is the dog's name?",
        "What did Caroline say in May 2023?",
        "Which book did she read recently?",
        "The last supper, week after week",
        "Any news on the weekend plans?",
    ],
)
def test_queries_without_relative_time_are_unchanged(query: str) -> None:
    assert not mentions_time(query)
    assert query_terms(query, "k", REF) == query_terms(query, "k") == analyze_query(query)


def test_a_message_is_dated_by_metadata_date_before_ts() -> None:
    ts = 1_700_000_000_000  # 2023-11-14
    assert message_day({"date": "2023-05-08"}, ts) == date(2023, 5, 8)
    assert message_day({"date": "not a date"}, ts) == date(2023, 11, 14)
    assert message_day(None, None) is None


def test_the_expression_leaves_the_text_an_embedder_is_asked() -> None:
    text, terms = time_terms("What did Ravi bake Last Week?", REF)
    assert text == "What did Ravi bake ?"
    assert len(terms) == 7
    assert time_terms("What did Ravi bake?", REF) == ("What did Ravi bake?", [])


def test_a_day_out_of_the_calendar_gives_no_term() -> None:
    text, terms = time_terms("What happened yesterday or last month?", date(1, 1, 1))
    assert terms == []
    assert text == "What happened or ?"
