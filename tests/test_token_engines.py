"""The two engines of TiktokenCounter give the same counts, one text or many at a time.

``rs-bpe`` (the ``fast`` extra) counts cl100k_base and o200k_base without tiktoken; these
tests hold it to tiktoken's counts on generated text of every script, on the strings where
tokenizers differ (special-token spellings, whitespace runs, digits, lone surrogates) and on
long texts. They also hold tiktoken's batch count (texts joined by a special token) to its
one-text count.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from compozy_memory import CachedCounter, ConfigurationError, TiktokenCounter
from compozy_memory._model.tokens import rs_bpe_available

ENCODINGS = ["cl100k_base", "o200k_base"]

# Pieces where BPE pre-tokenisers disagree if they are not exact copies of tiktoken's.
TRICKY = [
    "<|endoftext|>",
    "<|endofprompt|>",
    "<|endofprompt|",
    "|endofprompt|>",
    "<|fim_prefix|>",
    "'s",
    "'LL",
    "\u2019s",
    " 1234567",
    "3.14159",
    "  ",
    " " * 17,
    "\n\n",
    "\r\n",
    "\t",
    "\u200b",
    "\ud83d",  # a lone surrogate: not valid UTF-8
    "\udc51x",
    "\U0001f469\u200d\U0001f4bb",
    "\u0130",
    "\u01c5",
    "\ufb00",
    "e\u0301",
    "\u4f60\u597d",
    "\uac00\ub098",
    "\u0928\u092e\u0938\u094d\u0924\u0947",
    "\u0645\u0631\u062d\u0628\u0627",
    "...",
    "x" * 40,
]

texts = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(TRICKY)), max_size=24).map("".join)

needs_rs_bpe = pytest.mark.skipif(
    not rs_bpe_available(), reason="the fast extra (rs-bpe) is not installed"
)


@pytest.fixture(scope="module")
def engines() -> dict[str, tuple[TiktokenCounter, TiktokenCounter]]:
    return {
        name: (TiktokenCounter(name, engine="tiktoken"), TiktokenCounter(name, engine="rs-bpe"))
        for name in ENCODINGS
    }


@pytest.mark.slow
@needs_rs_bpe
@settings(max_examples=600, deadline=None)
@given(text=texts)
@example(text="")
@example(text="<|endoftext|>" * 3)
@example(text="\ud800\udc00 lone halves \udfff")
@example(text=" " * 1000 + "\n" * 5 + "a")
def test_rs_bpe_counts_what_tiktoken_counts(
    engines: dict[str, tuple[TiktokenCounter, TiktokenCounter]], text: str
) -> None:
    for name, (tiktoken, fast) in engines.items():
        assert fast.count(text) == tiktoken.count(text), (name, text)


@needs_rs_bpe
def test_rs_bpe_agrees_on_long_texts(
    engines: dict[str, tuple[TiktokenCounter, TiktokenCounter]],
) -> None:
    long_texts = [
        "".join(TRICKY) * 200,
        "word " * 20_000,
        "1234567890" * 5_000,
        "\u4f60\u597d\u4e16\u754c" * 5_000,
        "def f(x):\n    return x * 2\n\n" * 2_000,
    ]
    for name, (tiktoken, fast) in engines.items():
        for text in long_texts:
            assert fast.count(text) == tiktoken.count(text), (name, text[:40])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(batch=st.lists(texts, max_size=12))
@example(batch=["a<|endofprompt|", ">b", "<|endofprompt|>", "c "])
@example(batch=["ends with spaces   ", "   starts with spaces", "", ""])
def test_a_batch_counts_each_text_as_it_would_be_counted_alone(batch: list[str]) -> None:
    for name in ENCODINGS:
        counter = TiktokenCounter(name, engine="tiktoken")
        assert counter.count_many(batch) == [counter.count(text) for text in batch], name


@needs_rs_bpe
def test_auto_takes_rs_bpe_for_the_encodings_it_counts() -> None:
    assert TiktokenCounter().engine == "rs-bpe"
    assert TiktokenCounter("o200k_base").engine == "rs-bpe"
    fast = TiktokenCounter()
    # rs-bpe holds the GIL: appends count it on the event loop, a tick's texts together.
    assert fast.thread_safe is False
    assert CachedCounter(fast).thread_safe is False
    slow = TiktokenCounter(engine="tiktoken")
    assert slow.engine == "tiktoken"
    assert slow.thread_safe is True


def test_engines_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="engine must be"):
        TiktokenCounter(engine="fastest")  # type: ignore[arg-type]
    # rs-bpe counts only cl100k_base and o200k_base; nothing is downloaded to find that out.
    with pytest.raises(ConfigurationError, match="rs-bpe"):
        TiktokenCounter("p50k_base", allow_download=True, engine="rs-bpe")


def test_a_cache_counts_only_what_it_has_not_seen() -> None:
    inner = TiktokenCounter(engine="tiktoken")
    cached = CachedCounter(inner, maxsize=3)
    first = cached.count_many(["one", "two words", "three more words"])
    assert first == [1, 2, 3]
    assert cached.cached("two words") == 2
    assert cached.count_many(["two words", "four", "one"]) == [2, 1, 1]
    assert cached.cached("three more words") is None  # the oldest went when "four" came
