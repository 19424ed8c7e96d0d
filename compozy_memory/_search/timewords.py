"""Relative time in a query ("yesterday", "last week", "two weeks ago", "last month") as the
date terms a message's document carries (:func:`~compozy_memory._search.documents.date_terms`).

A document holds the ISO date of the day its message was said, that month's name (stemmed)
and the year. A relative expression is resolved against a reference day (the day of the
memory's newest message: a conversation replayed or imported later is asked about its own
"last week", not the wall clock's) into a few of those terms: a day or a week as ISO dates,
a month as its name and year, a year as itself. The words of the expression are taken out of
the query's text, so "last week" no longer favours every turn that says "week".

Hand-written rules, English only, deterministic: the same query and reference day always
give the same terms, at most :data:`MAX_TIME_TERMS` of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

from compozy_memory._search.documents import date_terms

__all__ = ["MAX_TIME_TERMS", "mentions_time", "time_terms"]

#: Date terms one query gains at most: two weeks of days, or a few months and years.
MAX_TIME_TERMS = 14

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "a couple of": 2,
}
_COUNT = (
    r"(?P<n>\d{1,2}|a couple of|couple of|an|a|one|two|three|four|five|six|seven|eight|nine|ten)"
)
_WEEKDAY = r"(?P<wd>" + "|".join(_WEEKDAYS) + r")"

_Resolve = Callable[[date, "re.Match[str]"], "list[date] | list[str]"]


def _count(match: re.Match[str]) -> int:
    raw = match.group("n").lower()
    return int(raw) if raw.isdigit() else _NUMBERS[raw]


def _days(first: date, last: date) -> list[date]:
    """The days from ``first`` to ``last``, both included, newest first."""
    span = (last - first).days
    return [last - timedelta(days=i) for i in range(span + 1)]


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _month_back(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 - months
    return date(index // 12, index % 12 + 1, 1)


def _month(day: date) -> list[str]:
    return date_terms(day)[:2]  # the month's name and the year


def _weekday_before(ref: date, match: re.Match[str]) -> list[date]:
    wanted = _WEEKDAYS.index(match.group("wd").lower())
    back = (ref.weekday() - wanted) % 7 or 7
    return [ref - timedelta(days=back)]


def _last_weekend(ref: date, _: re.Match[str]) -> list[date]:
    # The newest Saturday and Sunday wholly before the reference day.
    sunday = ref - timedelta(days=(ref.weekday() + 1) % 7 or 7)
    return [sunday, sunday - timedelta(days=1)]


def _days_ago(ref: date, match: re.Match[str]) -> list[date]:
    return [ref - timedelta(days=_count(match))]


def _weeks_ago(ref: date, match: re.Match[str]) -> list[date]:
    # "Two weeks ago" is loose: the week of days centred on that day.
    centre = ref - timedelta(days=7 * _count(match))
    return _days(centre - timedelta(days=3), centre + timedelta(days=3))


def _past_days(ref: date, match: re.Match[str]) -> list[date]:
    return _days(ref - timedelta(days=_count(match) - 1), ref)


def _past_weeks(ref: date, match: re.Match[str]) -> list[date]:
    return _days(ref - timedelta(days=7 * _count(match) - 1), ref)


def _months_ago(ref: date, match: re.Match[str]) -> list[str]:
    return _month(_month_back(ref, _count(match)))


def _today(ref: date, _: re.Match[str]) -> list[date]:
    return [ref]


def _yesterday(ref: date, _: re.Match[str]) -> list[date]:
    return [ref - timedelta(days=1)]


def _two_days_back(ref: date, _: re.Match[str]) -> list[date]:
    return [ref - timedelta(days=2)]


def _few_days(ref: date, _: re.Match[str]) -> list[date]:
    return _days(ref - timedelta(days=3), ref)


def _past_week(ref: date, _: re.Match[str]) -> list[date]:
    return _days(ref - timedelta(days=6), ref)


def _last_week(ref: date, _: re.Match[str]) -> list[date]:
    # The calendar week (Monday to Sunday) before the reference day's.
    return _days(_monday(ref) - timedelta(days=7), _monday(ref) - timedelta(days=1))


def _this_week(ref: date, _: re.Match[str]) -> list[date]:
    return _days(_monday(ref), ref)


def _last_month(ref: date, _: re.Match[str]) -> list[str]:
    return _month(_month_back(ref, 1))


def _this_month(ref: date, _: re.Match[str]) -> list[str]:
    return _month(ref)


def _last_year(ref: date, _: re.Match[str]) -> list[str]:
    return [str(ref.year - 1)]


def _this_year(ref: date, _: re.Match[str]) -> list[str]:
    return [str(ref.year)]


# Longer expressions first: each match is taken out of the text before the next rule runs.
_RULES: tuple[tuple[re.Pattern[str], _Resolve], ...] = tuple(
    (re.compile(r"\b(?:" + pattern + r")\b", re.IGNORECASE | re.ASCII), resolve)
    for pattern, resolve in (
        (r"(?:the )?day before yesterday", _two_days_back),
        (rf"{_COUNT} days? ago", _days_ago),
        (rf"{_COUNT} weeks? ago", _weeks_ago),
        (rf"{_COUNT} months? ago", _months_ago),
        (rf"(?:in )?(?:the )?(?:last|past) {_COUNT} days", _past_days),
        (rf"(?:in )?(?:the )?(?:last|past) {_COUNT} weeks", _past_weeks),
        (r"(?:in )?(?:the )?(?:last|past) (?:few|couple of) days", _few_days),
        (r"(?:in )?the (?:last|past) week|(?:in )?past week", _past_week),
        (r"(?:last|this past) weekend", _last_weekend),
        (r"last week", _last_week),
        (r"this week", _this_week),
        (rf"(?:last|on|this past) {_WEEKDAY}", _weekday_before),
        (r"last month", _last_month),
        (r"this month", _this_month),
        (r"last year", _last_year),
        (r"this year", _this_year),
        (r"yesterday(?: morning| afternoon| evening)?|last night", _yesterday),
        (r"(?:earlier )?today|this (?:morning|afternoon|evening)|tonight", _today),
    )
)
_ANY = re.compile(
    "|".join(pattern.pattern for pattern, _ in _RULES)
    .replace("(?P<n>", "(?:")
    .replace("(?P<wd>", "(?:"),
    re.IGNORECASE | re.ASCII,
)


def mentions_time(query: str) -> bool:
    """Whether ``query`` holds a relative time expression (cheap: a reference day is only
    worth reading for such a query)."""
    return _ANY.search(query) is not None


def time_terms(query: str, reference: date) -> tuple[str, list[str]]:
    """``query`` without its relative time expressions (what its words and an embedder are
    asked), and the date terms they resolve to against ``reference`` (the first
    expressions' first, at most :data:`MAX_TIME_TERMS`, each once). A query without one
    comes back as it was, with no terms."""
    text = query
    if _ANY.search(text) is None:
        return query, []
    found: list[tuple[int, list[str]]] = []
    for pattern, resolve in _RULES:

        def take(match: re.Match[str], resolve: _Resolve = resolve) -> str:
            try:
                days = resolve(reference, match)
            except (OverflowError, ValueError):  # before year 1 or after 9999: no such day
                days = []
            found.append(
                (match.start(), [str(d) if isinstance(d, str) else d.isoformat() for d in days])
            )
            return " " * len(match.group())

        text = pattern.sub(take, text)
    found.sort(key=lambda item: item[0])
    terms = list(dict.fromkeys(term for _, resolved in found for term in resolved))
    return " ".join(text.split()), terms[:MAX_TIME_TERMS]
