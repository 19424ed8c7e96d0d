"""Turn text (messages and search queries) into index terms.

The same function must analyse what is indexed and what is asked, on every process that
touches an index, so everything here is deterministic and versioned: a change of the stop
list, the tokeniser or the stemmer changes ``ANALYZER_VERSION``, and an index built under
another version has to be rebuilt rather than queried.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from itertools import chain
from typing import Protocol

import stopwordsiso

from compozy_memory._model.limits import MAX_TERM_BYTES

__all__ = [
    "ANALYZER_VERSION",
    "MAX_TERM_BYTES",
    "STOP_WORDS",
    "analyze",
    "analyze_query",
    "cap_term",
    "stem_word",
    "stemmer",
]

#: 2: a message's date terms come from its metadata.date before its ts. 3: a summary's
#: document holds the term ``~summary`` and counts as at most 24 terms long
#: (:mod:`~compozy_memory._search.documents`).
ANALYZER_VERSION = 3
_HASH_HEX = 8


class _Stemmer(Protocol):
    def stemWord(self, word: str) -> str: ...


def _new_stemmer() -> _Stemmer:
    # PyStemmer and snowballstemmer run the same Snowball English algorithm and produce the
    # same stems (tests/test_analysis.py checks it), so the fallback keeps indexes compatible;
    # it is only slower.
    try:
        import Stemmer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - exercised only where PyStemmer is missing
        import snowballstemmer  # type: ignore[import-not-found,import-untyped,unused-ignore]

        stem: _Stemmer = snowballstemmer.stemmer("english")
        return stem
    stem = Stemmer.Stemmer("english")
    return stem  # noqa: RET504 - typed through the protocol, as in the fallback


class _Chunks(dict[str, tuple[str, ...]]):
    """A thread's memo of each chunk's terms: a chunk looked up for the first time is
    analysed then (so a whole text's lookups are one C-level pass over its chunks)."""

    def __missing__(self, chunk: str) -> tuple[str, ...]:
        terms = _chunk_terms(chunk)
        if len(self) >= _CHUNK_MEMO_LIMIT:
            self.clear()
        self[chunk] = terms
        return terms


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.stemmer = _new_stemmer()
        # Conversation vocabulary is small and repetitive; a per-thread memo of stems avoids
        # the stemmer call for nearly every word after the first few messages.
        self.stems: dict[str, str] = {}
        self.chunks = _Chunks()


_state = _ThreadState()
_STEM_MEMO_LIMIT = 50_000
_CHUNK_MEMO_LIMIT = 100_000


def stemmer() -> _Stemmer:
    """Return this thread's Snowball English stemmer (stemmer objects are not thread-safe)."""
    return _state.stemmer


# The stopwords-iso English list was built from web pages and treats many content words as
# noise. In a conversation archive these are exactly what people ask about ("what was the
# order number?", "what is the dog's name?", "in May"), so they are kept as terms.
_KEEP = frozenset(
    """
    10 39 act added adopted affected amount announce area areas back begin beginning big
    bill billion bottom buy case cases changes computer copy cry date dear early eight
    eighty eleven end face faces fact facts fifteen fifth fifty fire first five fix forty
    four free front full group groups half hell help high home homepage hundred index
    information interest interested interesting interests invention join keys kind large
    last latest length line little long low man may member members men microsoft mill
    million miss move mug name net netscape new newest next nine ninety novel null number
    numbers old oldest one open order ordered ordering orders page pages part parts past
    place places present problem problems proud ran research right ring room rooms run
    second sent seven seventy shed shell show showed shown shows side sides site six sixty
    small state states stop system test text third thirty thousand three tip today top
    trillion turn twelve twenty two value web website wed wells whim width work worked
    working works world year years young zero
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def _load_stop_words() -> frozenset[str]:
    words = {w.replace("\u2019", "'").casefold() for w in stopwordsiso.stopwords("en")}
    return frozenset(w for w in words if w not in _KEEP and not any(c.isdigit() for c in w))


STOP_WORDS: frozenset[str] = _load_stop_words()

# A token is a run of letters/digits, possibly joined by connectors that people put inside
# identifiers, dates, times and amounts: 2023-05-08, 12:30, 3.5, SKU-4471-XL, lookup_order,
# jo@example.com, caroline's; or a number with thousands separators ($1,200 is 1200).
_CONNECTORS = "-_./:@'"
_TOKEN_RE = re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)|[^\W_]+(?:[-_./:@'][^\W_]+)*")
_BLANK_AND_LOWER = {
    c: (" " if not chr(c).isalnum() and chr(c) not in _CONNECTORS + "," else chr(c).lower())
    for c in range(128)
    if not chr(c).isalnum() or chr(c).isupper()
}
_SPLIT_RE = re.compile(r"[-_./:@']")
_ALNUM_RUN_RE = re.compile(r"\d+|[^\W\d_]+")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def cap_term(term: str) -> str:
    """Return ``term`` if it fits in ``MAX_TERM_BYTES`` UTF-8 bytes, else a prefix + hash.

    The result is unique enough for an index (8 hex digits of BLAKE2b over the whole term)
    and never cuts a character in half.
    """
    raw = term.encode()
    if len(raw) <= MAX_TERM_BYTES:
        return term
    digest = hashlib.blake2b(raw, digest_size=_HASH_HEX // 2).hexdigest()
    prefix = raw[: MAX_TERM_BYTES - _HASH_HEX - 1].decode(errors="ignore")
    return f"{prefix}~{digest}"


def _fold_accents(text: str) -> str:
    # NFKC first so full-width digits and ligatures become plain ones, then drop combining
    # marks so "José" and "Jose" meet.
    text = unicodedata.normalize("NFKC", text)
    decomposed = unicodedata.normalize("NFD", text)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", stripped)


def stem_word(word: str) -> str:
    memo = _state.stems
    stem = memo.get(word)
    if stem is None:
        stem = _state.stemmer.stemWord(word)
        if len(memo) >= _STEM_MEMO_LIMIT:
            memo.clear()
        memo[word] = stem
    return stem


def _word(token: str, out: list[str]) -> None:
    """Append the term for one alphabetic word (after the stop list and the stemmer)."""
    if token not in STOP_WORDS:
        out.append(cap_term(stem_word(token)))


def _cjk(token: str, out: list[str]) -> None:
    # Scripts written without spaces: index overlapping character bigrams, the usual
    # dictionary-free way to make them searchable.
    pos = 0
    for m in _CJK_RE.finditer(token):
        if m.start() > pos:
            _compound(token[pos : m.start()], out)
        run = m.group()
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        pos = m.end()
    if pos < len(token):
        _compound(token[pos:], out)


def _compound(token: str, out: list[str]) -> None:
    if "," in token:
        token = token.replace(",", "")
    if token.isalpha():
        _word(token, out)
        return
    if token.isdigit():
        out.append(cap_term(token))
        return
    if "'" in token:
        if token in STOP_WORDS:
            return
        base = token[:-2] if token.endswith("'s") else token
        if "'" in base:
            base = base.replace("'", "")
        if base.isalpha():
            _word(base, out)
            return
        token = base
    # Identifiers, dates, times, amounts: the whole token is a term (so "2023-05-08" or
    # "sku-4471-xl" matches exactly), and so is each piece (so "order 4471" finds it too).
    out.append(cap_term(token))
    for part in _SPLIT_RE.split(token):
        if not part:
            continue
        if part.isalpha():
            _word(part, out)
        elif part.isdigit():
            out.append(cap_term(part))
        else:
            # Letters and digits glued together (3pm, 2nd, a1b2): the pieces too.
            if part != token:
                out.append(cap_term(part))
            for piece in _ALNUM_RUN_RE.findall(part):
                if piece.isdigit():
                    out.append(piece)
                else:
                    _word(piece, out)


def _chunk_terms(chunk: str) -> tuple[str, ...]:
    out: list[str] = []
    for token in _TOKEN_RE.findall(chunk):
        if not token.isascii() and _CJK_RE.search(token):
            _cjk(token, out)
        else:
            _compound(token, out)
    return tuple(out)


def analyze(text: str) -> list[str]:
    """Split ``text`` into index terms, in order of appearance.

    Words are casefolded, stop words dropped and the rest stemmed with Snowball English;
    numbers, ids, dates and times are kept (``#1042`` -> ``1042``, ``$1,200`` -> ``1200``,
    ``2023-05-08`` -> the date and its parts, ``3pm`` -> ``3pm`` and ``3``). Every term is
    at most ``MAX_TERM_BYTES`` bytes of UTF-8 and contains no whitespace or control character.
    """
    if not text:
        return []
    if not text.isascii():
        text = _fold_accents(text.replace("\u2019", "'")).casefold()
    # Blanking the ASCII characters that can never be inside a token (and lowercasing, which
    # is casefolding for ASCII) lets str.split do most of the tokenising; the regex then runs
    # only on chunks not seen before, whose terms are memoised per thread, and the lookups
    # are one C-level pass (the memo analyses a chunk it lacks as it is looked up). The
    # result is the same as running the regex over the whole text.
    chunks = text.translate(_BLANK_AND_LOWER).split()
    return list(chain.from_iterable(map(_state.chunks.__getitem__, chunks)))


def analyze_query(text: str) -> list[str]:
    """Analyse a search query: the terms of ``text``, each once, in order of appearance."""
    return list(dict.fromkeys(analyze(text)))
