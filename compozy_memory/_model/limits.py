"""Limits shared by the Python side and the Lua scripts: one copy, injected into the scripts.

:mod:`compozy_memory._wire.scripts` writes :data:`LUA_CONSTANTS` as ``local NAME = value`` lines
at the top of every script, so a limit the client checks is the limit the server enforces.
"""

from __future__ import annotations

__all__ = [
    "DEDUPE_SWEEP",
    "DEDUPE_WINDOW",
    "LUA_CONSTANTS",
    "MAX_BATCH",
    "MAX_DEDUPE_KEY",
    "MAX_FACTS",
    "MAX_FACT_KEY",
    "MAX_FACT_VALUE",
    "MAX_MESSAGE_TOKENS",
    "MAX_PRIORITY",
    "MAX_RESULT_BYTES",
    "POSTINGS_CAP",
    "QUERY_POSTINGS",
    "UNBOUNDED_TOKENS",
]

#: Messages one append, append_many or replace may carry.
MAX_BATCH = 10_000
#: Bytes of a caller's dedupe key.
MAX_DEDUPE_KEY = 256
#: Priorities run from 0 (critical, never evicted) to this.
MAX_PRIORITY = 99
#: Tokens one message may count. Lua numbers are doubles: totals stay exact below 2**53, and
#: this bound keeps any sum of MAX_BATCH-sized appends far below it. No model reads a context
#: this large.
MAX_MESSAGE_TOKENS = 100_000_000
#: The token budget of a memory limited by message count only (``message_count_based``
#: without ``max_tokens``): flushing and ``context()`` then work from the count, with this as
#: "no token limit". Below 2**53 (Lua doubles) and printed exactly by Lua's ``%.14g``.
UNBOUNDED_TOKENS = 10**12
#: A dedupe key is remembered while its write's last id is within this many ids of the newest.
DEDUPE_WINDOW = 1_000
#: Keys older than the window are swept when the ids cross a multiple of this.
DEDUPE_SWEEP = 64

#: The archive index keeps at most this many postings per term, the newest; document
#: frequencies stay exact.
POSTINGS_CAP = 2_000
#: A search reads at most this many postings per query term (the newest), so its cost follows
#: the query, not the history.
QUERY_POSTINGS = 1_000
#: And at most this many postings in all, its rarest terms first. The terms left over (common
#: ones) are not read: they are scored on the best RESCORE_POOL candidates (4 x the limit when
#: that is more) from those documents' own terms.
QUERY_BUDGET = 300
RESCORE_POOL = 240

#: Bytes of a session fact's key and of its value (UTF-8).
MAX_FACT_KEY = 256
MAX_FACT_VALUE = 4_096
#: The most facts a memory's policy may keep (its ``facts_max``; 200 by default).
MAX_FACTS = 10_000

#: Bytes of one stored result (before compression).
MAX_RESULT_BYTES = 64 * 1024 * 1024

LUA_CONSTANTS: dict[str, int] = {
    "MAX_RESULT_BYTES": MAX_RESULT_BYTES,
    "MAX_FACT_KEY": MAX_FACT_KEY,
    "MAX_FACT_VALUE": MAX_FACT_VALUE,
    "MAX_FACTS": MAX_FACTS,
    "POSTINGS_CAP": POSTINGS_CAP,
    "QUERY_POSTINGS": QUERY_POSTINGS,
    "QUERY_BUDGET": QUERY_BUDGET,
    "RESCORE_POOL": RESCORE_POOL,
    "MAX_BATCH": MAX_BATCH,
    "MAX_DEDUPE_KEY": MAX_DEDUPE_KEY,
    "MAX_PRIORITY": MAX_PRIORITY,
    "MAX_MESSAGE_TOKENS": MAX_MESSAGE_TOKENS,
    "DEDUPE_WINDOW": DEDUPE_WINDOW,
    "DEDUPE_SWEEP": DEDUPE_SWEEP,
}
