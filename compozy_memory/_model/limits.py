"""Limits shared by the Python side and the Lua scripts: one copy, injected into the scripts.

:mod:`compozy_memory._wire.scripts` writes :data:`LUA_CONSTANTS` as ``local NAME = value`` lines
at the top of every script, so a limit the client checks is the limit the server enforces.
"""

from __future__ import annotations

__all__ = [
    "ARCHIVE_DROP_STEP",
    "DATA_FORMAT",
    "DEDUPE_CHUNK",
    "DEDUPE_CHUNKS",
    "DEDUPE_SWEEP",
    "DEDUPE_WINDOW",
    "DOC_ARG",
    "GC_STEP_FIELDS",
    "INDEX_BACKLOG_WARNING",
    "INDEX_BATCH_BYTES",
    "INDEX_BATCH_DOCS",
    "INDEX_DELAY",
    "INDEX_READ_BYTES",
    "INDEX_READ_FIELDS",
    "INDEX_STEP_DOCS",
    "LUA_CONSTANTS",
    "MAX_BATCH",
    "MAX_CALL_BYTES",
    "MAX_CONTEXT_MESSAGES",
    "MAX_DEDUPE_KEY",
    "MAX_DOC_TERMS",
    "MAX_ENVELOPE_BYTES",
    "MAX_FACTS",
    "MAX_FACTS_PER_CALL",
    "MAX_FACT_KEY",
    "MAX_FACT_VALUE",
    "MAX_GARBAGE",
    "MAX_INDEX_DELAY",
    "MAX_MESSAGE_BYTES",
    "MAX_MESSAGE_TOKENS",
    "MAX_META_FIELDS",
    "MAX_META_FIELD_BYTES",
    "MAX_PINNED",
    "MAX_PRIORITY",
    "MAX_QUERY_TERMS",
    "MAX_READ",
    "MAX_RECALLED",
    "MAX_RECALL_IDS",
    "MAX_RESULT_BYTES",
    "MAX_RESULT_PINS",
    "MAX_SEARCH_CANDIDATES",
    "MAX_SEARCH_LIMIT",
    "MAX_SEGMENTS",
    "MAX_SEGMENT_FIELDS",
    "MAX_SEGMENT_FIELD_BYTES",
    "MAX_SESSIONS_PAGE",
    "MAX_SESSION_AGE_MS",
    "MAX_SESSION_NAME_BYTES",
    "MAX_SPEAKER_NAMES",
    "MAX_SUMMARIES",
    "MAX_TERM_BYTES",
    "MAX_TOTAL",
    "MAX_VECTOR_BYTES",
    "MERGE_LEASE_MS",
    "MOVE_STEP",
    "QUERY_BUDGET",
    "QUERY_POSTINGS",
    "RESCORE_BLOCKS",
    "RESCORE_POOL",
    "RESCORE_TERMS",
    "SEARCH_TAIL_BYTES",
    "SEARCH_TAIL_DOCS",
    "SEGMENT_STATE_BYTES",
    "STEP_FIELDS",
    "TTL_SLACK_PARTS",
    "UNBOUNDED_TOKENS",
    "UNPACK_STEP",
    "VECTOR_SCAN_IDS",
    "VECTOR_STEP_BYTES",
    "VECTOR_STEP_DOCS",
    "ttl_slack",
]

#: The layout of a memory's data this release reads and writes (meta's ``fmt``). Format 3
#: keeps the index as segments the clients build (``lua/search/lib/segments.lua``), where format 2
#: packed postings per term in Lua; a memory of an older format has its index rebuilt in
#: bounded steps, one of a newer format is refused (:class:`DataFormatError`).
DATA_FORMAT = 3

# Every script's work is bounded by the sizes below, checked in Lua (these constants are
# injected into every script) and in Python before a call is sent: no call holds the server
# for more than a few milliseconds at the largest input it accepts
# (benchmarks/bench_server_time.py measures each at its maximum).

#: Messages one append, append_many or replace may carry.
MAX_BATCH = 1_000
#: Bytes of one message's JSON body, and of all the bodies of one call. Larger content goes
#: to the result store (``append(..., offload=True)``).
MAX_MESSAGE_BYTES = 1024 * 1024
MAX_CALL_BYTES = 2 * 1024 * 1024
#: Bytes of one stored envelope: a message's body and the head the scripts give it (id, ts,
#: tokens, priority). Stored data may have been written raw by a tenant with the read-write
#: ACL line (docs/operations.md): a script sizes what it reads against this, never trusting
#: what stored data claims, and refuses a longer envelope (CorruptDataError).
MAX_ENVELOPE_BYTES = MAX_MESSAGE_BYTES + 1024
#: Fields of a memory's meta and bytes of one of its values: the totals, one record a
#: process that wrote within the dedupe window and its chunks (lib/dedupe.lua), the pinned
#: messages' ids. Far more than the scripts write; a meta past either was written raw, and
#: is refused (CorruptDataError) before it is read whole.
MAX_META_FIELDS = 4_096
MAX_META_FIELD_BYTES = 64 * 1024
#: Messages one step of trim, replace or a flush commit moves to the archive; a longer move
#: runs as several steps, each safe to interrupt.
MOVE_STEP = 256
#: Envelopes the archive's cap drops in one call (the rest on later calls).
ARCHIVE_DROP_STEP = 256
#: Pinned messages (priority 0) one memory holds: they lead every context.
MAX_PINNED = 100
#: Summaries one memory holds; a flush folds them into one before more.
MAX_SUMMARIES = 32
#: Messages context() and read_window() return (window and backfill together).
MAX_CONTEXT_MESSAGES = 1_000
#: Messages recalled into the context at once, and ids one recall call takes.
MAX_RECALLED = 100
MAX_RECALL_IDS = 100
#: Hits one search returns.
MAX_SEARCH_LIMIT = 50
#: Stored results one memory's messages pin (``append(..., offload=True)``).
MAX_RESULT_PINS = 1_000
#: Messages one read returns; a longer read is paged.
MAX_READ = 1_000

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
#: A memory's totals (its last id, its messages, its tokens) stay below this; meta holding more
#: (a tenant's planted exponent, nan or inf) is refused before a write. Lua doubles are exact
#: far past it, and the servers write integers this size as plain digits.
MAX_TOTAL = 10**15
#: A dedupe key is remembered while its write's last id is within this many ids of the newest.
DEDUPE_WINDOW = 1_000
#: Keys older than the window are swept when the ids cross a multiple of this.
DEDUPE_SWEEP = 64
#: The keys a process makes up for its writes (``~<process>:<n>``) are recorded in meta: its
#: newest DEDUPE_CHUNK in one field every write reads and rewrites, the older ones sealed a
#: chunk at a time into fields of their own, read only to look up a retried key; a process
#: keeps its DEDUPE_CHUNKS newest chunks (``lua/lib/dedupe.lua``). Together they cover the
#: window: DEDUPE_CHUNK x DEDUPE_CHUNKS >= DEDUPE_WINDOW.
DEDUPE_CHUNK = 32
DEDUPE_CHUNKS = 32
#: A memory's keys expire at one deadline, moved by a write only when it is less than the TTL
#: away, and then to the TTL plus 1/TTL_SLACK_PARTS of it: the keys expire between the TTL and
#: that much more after the last write, and their expiry is set once in that slack, not by
#: every write (``lua/lib/deltas.lua``).
TTL_SLACK_PARTS = 32


def ttl_slack(ttl_ms: int) -> int:
    """How far past ``ttl_ms`` a memory's deadline is set when a write moves it (ms): a key of
    a memory with that TTL expires between ``ttl_ms`` and ``ttl_ms + ttl_slack(ttl_ms)`` after
    the last write (``ttl_slack`` in ``lua/lib/deltas.lua``)."""
    return -(-ttl_ms // TTL_SLACK_PARTS)


#: The index (``compozy_memory._search.segments``): the distinct terms one document may have,
#: the documents one indexing step covers (its segment's), the segments a memory lists (the
#: indexer merges them in tiers long before), the fields of one segment and the bytes of one
#: field (a bucket of its dictionary or a block of 128 postings: far less in practice), the
#: fields one call writes (and MAX_CALL_BYTES), the fields and bytes one read returns, the
#: fields one garbage step deletes and the merged segments waiting to be deleted, the bytes
#: of each bookkeeping field (the list, the merges, the garbage: far less in practice; more
#: was written raw, and is refused), and how long a merge written in several steps keeps its
#: claim on its inputs after its last step.
MAX_DOC_TERMS = 512
INDEX_STEP_DOCS = 128
#: Bytes of one document's record as an index step sends it (``lua/search/index_add.lua``'s
#: ``docs``): id (7), kind (1), length (2), seq (6), big-endian; the script reads them from
#: their bytes, where a parse of text costs it ~20,000 instructions a document.
DOC_ARG = 16
MAX_SEGMENTS = 64
MAX_SEGMENT_FIELDS = 1_000_000
STEP_FIELDS = 8_192
MAX_SEGMENT_FIELD_BYTES = 1024 * 1024
INDEX_READ_FIELDS = 4_096
INDEX_READ_BYTES = 1024 * 1024
#: A search reads the live messages the index has not reached yet, at most this many (and
#: about this many bytes of them), and ranks them itself with the segments: a message is
#: searchable the moment it is appended, and the indexer can take messages in batches.
SEARCH_TAIL_DOCS = 128
SEARCH_TAIL_BYTES = 256 * 1024
#: A handle's writes not indexed yet wait this long (seconds) for more to batch with, unless
#: it has written INDEX_BATCH_DOCS of them or INDEX_BATCH_BYTES: then a step runs a debounce
#: (0.2 s) later (so does a handle's first write).
INDEX_DELAY = 30.0
#: The longest ``search.index_delay`` a policy may set (seconds).
MAX_INDEX_DELAY = 3600.0
INDEX_BATCH_DOCS = 32
INDEX_BATCH_BYTES = 64 * 1024
GC_STEP_FIELDS = 1_024
MAX_GARBAGE = 4 * MAX_SEGMENTS
SEGMENT_STATE_BYTES = 16 * 1024
MERGE_LEASE_MS = 60_000
#: Bytes of one term (longer ones are cut with a hash), and terms in one query.
MAX_TERM_BYTES = 64
MAX_QUERY_TERMS = 32
#: A search reads at most this many postings per query term (the newest), so its cost follows
#: the query, not the history.
QUERY_POSTINGS = 1_000
#: And at most this many postings in all, its rarest terms first. The terms left over (common
#: ones) are not read: they are scored on the best RESCORE_POOL candidates (4 x the limit when
#: that is more), reading at most RESCORE_BLOCKS of their blocks. 600: a speaker's name is a
#: term of every turn they say, so in a two-person conversation of 700 turns it matches ~350;
#: at 300 the turn that asked fell out of the candidates (and its reply with it): recall@10 on
#: the hard benchmark's tuning split 0.191 at 300, 0.206 at 600 (= BM25 over every document).
QUERY_BUDGET = 600
RESCORE_POOL = 240
RESCORE_BLOCKS = 64
#: Of the common terms, the rarest this many are scored on the candidates (each costs a
#: read of its blocks' directory); the others weigh least in BM25 and are left out.
RESCORE_TERMS = 8

#: ``health()`` warns (``index_warning``) when more messages than this wait to be indexed: the
#: indexer takes about 128 a step, so this is seconds of indexing behind the writers.
INDEX_BACKLOG_WARNING = 10_000

#: Dense scores (an ``Embedder``): the vectors one step stores and their bytes in all (each
#: byte is checked to be text), the ids one pending read looks through (most are consecutive;
#: ids the archive's cap dropped are passed over), the bytes of one stored vector (a byte a
#: dimension: up to 4,096 dimensions), the BM25
#: candidates whose vectors one search reads (each with its two neighbours), and the speaker
#: names kept beside the vectors (left out of what is embedded), of at most MAX_TERM_BYTES each.
VECTOR_STEP_DOCS = 128
VECTOR_STEP_BYTES = 64 * 1024
VECTOR_SCAN_IDS = 4_096
MAX_VECTOR_BYTES = 4_096
MAX_SEARCH_CANDIDATES = 200
MAX_SPEAKER_NAMES = 32

#: Bytes of a session fact's key and of its value (UTF-8).
MAX_FACT_KEY = 256
MAX_FACT_VALUE = 1_024
#: The most facts a memory's policy may keep (its ``facts_max``; 200 by default), and the
#: facts one call sets.
MAX_FACTS = 1_000
MAX_FACTS_PER_CALL = 100

#: Bytes of one stored result (before compression).
MAX_RESULT_BYTES = 8 * 1024 * 1024

#: Bytes of an agent's or a session's name in the session index.
MAX_SESSION_NAME_BYTES = 1_024
#: The oldest age a session entry is recorded with (older ones are recorded this old).
MAX_SESSION_AGE_MS = 3_600_000
#: Sessions one page of the session index lists.
MAX_SESSIONS_PAGE = 1_000
#: Values a script hands one command at a time (Lua's ``unpack`` puts each on its stack), and
#: the most messages a paged read in a script asks for at once.
UNPACK_STEP = 512

LUA_CONSTANTS: dict[str, int] = {
    "DATA_FORMAT": DATA_FORMAT,
    "MAX_BATCH": MAX_BATCH,
    "MAX_TOTAL": MAX_TOTAL,
    "MAX_MESSAGE_BYTES": MAX_MESSAGE_BYTES,
    "MAX_CALL_BYTES": MAX_CALL_BYTES,
    "MOVE_STEP": MOVE_STEP,
    "ARCHIVE_DROP_STEP": ARCHIVE_DROP_STEP,
    "MAX_PINNED": MAX_PINNED,
    "MAX_SUMMARIES": MAX_SUMMARIES,
    "MAX_CONTEXT_MESSAGES": MAX_CONTEXT_MESSAGES,
    "MAX_RECALLED": MAX_RECALLED,
    "MAX_RECALL_IDS": MAX_RECALL_IDS,
    "MAX_SEARCH_LIMIT": MAX_SEARCH_LIMIT,
    "MAX_RESULT_PINS": MAX_RESULT_PINS,
    "MAX_READ": MAX_READ,
    "MAX_DEDUPE_KEY": MAX_DEDUPE_KEY,
    "MAX_PRIORITY": MAX_PRIORITY,
    "MAX_MESSAGE_TOKENS": MAX_MESSAGE_TOKENS,
    "MAX_ENVELOPE_BYTES": MAX_ENVELOPE_BYTES,
    "MAX_META_FIELDS": MAX_META_FIELDS,
    "MAX_META_FIELD_BYTES": MAX_META_FIELD_BYTES,
    "DEDUPE_WINDOW": DEDUPE_WINDOW,
    "DEDUPE_SWEEP": DEDUPE_SWEEP,
    "DEDUPE_CHUNK": DEDUPE_CHUNK,
    "DEDUPE_CHUNKS": DEDUPE_CHUNKS,
    "TTL_SLACK_PARTS": TTL_SLACK_PARTS,
    "MAX_DOC_TERMS": MAX_DOC_TERMS,
    "INDEX_STEP_DOCS": INDEX_STEP_DOCS,
    "DOC_ARG": DOC_ARG,
    "MAX_SEGMENTS": MAX_SEGMENTS,
    "MAX_SEGMENT_FIELDS": MAX_SEGMENT_FIELDS,
    "STEP_FIELDS": STEP_FIELDS,
    "MAX_SEGMENT_FIELD_BYTES": MAX_SEGMENT_FIELD_BYTES,
    "INDEX_READ_FIELDS": INDEX_READ_FIELDS,
    "INDEX_READ_BYTES": INDEX_READ_BYTES,
    "SEARCH_TAIL_DOCS": SEARCH_TAIL_DOCS,
    "SEARCH_TAIL_BYTES": SEARCH_TAIL_BYTES,
    "GC_STEP_FIELDS": GC_STEP_FIELDS,
    "MAX_GARBAGE": MAX_GARBAGE,
    "SEGMENT_STATE_BYTES": SEGMENT_STATE_BYTES,
    "MERGE_LEASE_MS": MERGE_LEASE_MS,
    "MAX_TERM_BYTES": MAX_TERM_BYTES,
    "MAX_QUERY_TERMS": MAX_QUERY_TERMS,
    "QUERY_POSTINGS": QUERY_POSTINGS,
    "QUERY_BUDGET": QUERY_BUDGET,
    "RESCORE_POOL": RESCORE_POOL,
    "RESCORE_BLOCKS": RESCORE_BLOCKS,
    "RESCORE_TERMS": RESCORE_TERMS,
    "VECTOR_STEP_DOCS": VECTOR_STEP_DOCS,
    "VECTOR_STEP_BYTES": VECTOR_STEP_BYTES,
    "VECTOR_SCAN_IDS": VECTOR_SCAN_IDS,
    "MAX_VECTOR_BYTES": MAX_VECTOR_BYTES,
    "MAX_SEARCH_CANDIDATES": MAX_SEARCH_CANDIDATES,
    "MAX_SPEAKER_NAMES": MAX_SPEAKER_NAMES,
    "MAX_FACT_KEY": MAX_FACT_KEY,
    "MAX_FACT_VALUE": MAX_FACT_VALUE,
    "MAX_FACTS": MAX_FACTS,
    "MAX_FACTS_PER_CALL": MAX_FACTS_PER_CALL,
    "MAX_RESULT_BYTES": MAX_RESULT_BYTES,
    "MAX_SESSION_NAME_BYTES": MAX_SESSION_NAME_BYTES,
    "MAX_SESSION_AGE_MS": MAX_SESSION_AGE_MS,
    "MAX_SESSIONS_PAGE": MAX_SESSIONS_PAGE,
    "UNPACK_STEP": UNPACK_STEP,
}
