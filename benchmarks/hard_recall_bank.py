"""The shape of a vocabulary-and-templates bank for ``benchmarks.hard_recall_data``.

A bank is plain data: names, filler sentences, and fact families, each with the ways a
speaker says the fact and the ways a later question asks about it in other words. The
generator is the same for every bank; the tuning and the held-out split differ by bank (and
by seed), so nothing tuned on one split's phrasing can leak into the other's.

Placeholders: ``{who}`` the fact's owner, ``{other}`` the other speaker, ``{value}`` the
answer, ``{old}`` the value a correction replaces, ``{month}`` a month name, ``{relation}``
and ``{person}`` a relative of the owner and their name (multi-hop facts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.datafiles import tuples

__all__ = ["Bank", "Family", "Hop", "HopAttribute", "bank_from_data"]


@dataclass(frozen=True)
class Family:
    """One kind of fact a speaker can hold (a pet's name, a new job...).

    ``says``: the owner states it unprompted. ``prompts`` and ``replies``: the other speaker
    asks about it in the question's own words and the owner answers in a short reply (the
    answer sits in the turn next to the one with the question's words). ``asks``: the
    question, phrased away from ``says``. ``corrections``: the owner changes it later (the
    newest value is the answer). ``when_asks``: "when did ..." (the answer is the day the
    fact was said). ``month_asks``: "what ... in {month}" (the month narrows it down).
    """

    key: str
    values: tuple[str, ...]
    says: tuple[str, ...]
    asks: tuple[str, ...]
    prompts: tuple[str, ...] = ()
    replies: tuple[str, ...] = ()
    corrections: tuple[str, ...] = ()
    when_asks: tuple[str, ...] = ()
    month_asks: tuple[str, ...] = ()


@dataclass(frozen=True)
class HopAttribute:
    """The second hop: a fact about ``{person}`` that never names the relation."""

    values: tuple[str, ...]
    says: tuple[str, ...]
    asks: tuple[str, ...]


@dataclass(frozen=True)
class Hop:
    """Multi-hop facts: the owner introduces ``{relation}`` ``{person}`` once, a later turn
    says something about ``{person}``, and the question asks about the owner's relation."""

    relations: tuple[str, ...]
    intros: tuple[str, ...]
    attributes: tuple[HopAttribute, ...]


@dataclass(frozen=True)
class Bank:
    """Everything one split's conversations are written from."""

    name: str
    names: tuple[str, ...]
    filler: tuple[str, ...]
    reactions: tuple[str, ...]
    families: tuple[Family, ...]
    hop: Hop


def bank_from_data(data: dict[str, Any]) -> Bank:
    """A bank from its JSON form (``benchmarks/hard_recall_*.json``)."""
    fields = tuples(data)
    hop = fields["hop"]
    return Bank(
        name=fields["name"],
        names=fields["names"],
        filler=fields["filler"],
        reactions=fields["reactions"],
        families=tuple(Family(**f) for f in fields["families"]),
        hop=Hop(
            hop["relations"], hop["intros"], tuple(HopAttribute(**a) for a in hop["attributes"])
        ),
    )
