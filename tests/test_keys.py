from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from compozy_memory import ConfigurationError, InstanceKeys, sanitize_key
from compozy_memory._model.keys import MAX_KEY_LENGTH

SAFE = re.compile(r"^[a-zA-Z0-9\-_.:#]+$")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("user:42", "user:42"),
        ("a-b_c.d:e", "a-b_c.d:e"),
        ("user 42", "user_42"),
        ("héllo wörld", "h_llo_w_rld"),
        ("a//b", "a_b"),
        ("{evil}:x", "_evil_:x"),
        ("x}{y", "x_y"),
    ],
)
def test_sanitize_follows_the_spec_rule(raw: str, expected: str) -> None:
    assert sanitize_key(raw) == expected


@pytest.mark.parametrize("raw", ["", "   ", "{}", "///"])
def test_keys_with_nothing_left_are_refused(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="empty once sanitised"):
        sanitize_key(raw)


def test_long_keys_keep_a_prefix_and_never_collide() -> None:
    a = "x" * 600 + "a"
    b = "x" * 600 + "b"
    ka, kb = sanitize_key(a), sanitize_key(b)
    assert len(ka) == len(kb) == MAX_KEY_LENGTH
    assert ka != kb
    assert ka.startswith("x" * 400)
    # A key that was short to begin with can never look like a shortened one: '#' never
    # survives sanitising.
    assert sanitize_key(ka) != ka
    assert sanitize_key("x" * MAX_KEY_LENGTH) == "x" * MAX_KEY_LENGTH


def test_project_ids_are_validated() -> None:
    assert InstanceKeys.build("acme-prod", "k").prefix == "compozy:acme-prod:memory:{k}"
    for bad in ("", "a:b", "a{b}", "-lead", "a b", "x" * 129):
        with pytest.raises(ConfigurationError, match="project id"):
            InstanceKeys.build(bad, "k")


def test_layout() -> None:
    keys = InstanceKeys.build("p", "user:1")
    assert keys.msgs == "compozy:p:memory:{user:1}:msgs"
    assert keys.data == (
        "compozy:p:memory:{user:1}:msgs",
        "compozy:p:memory:{user:1}:meta",
        "compozy:p:memory:{user:1}:archive",
        "compozy:p:memory:{user:1}:summaries",
        "compozy:p:memory:{user:1}:dedupe",
    )


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: the text of the first {...} pair."""
    start = key.index("{")
    end = key.index("}", start + 1)
    return key[start + 1 : end]


@given(st.text(min_size=1, max_size=2000))
def test_any_input_stays_in_its_namespace_and_slot(raw: str) -> None:
    try:
        keys = InstanceKeys.build("proj", raw)
    except ConfigurationError:
        return
    assert SAFE.match(keys.key)
    assert len(keys.key) <= MAX_KEY_LENGTH
    for key in (*keys.data, keys.lock):
        assert key.startswith("compozy:proj:memory:{")
        assert key.count("{") == key.count("}") == 1
        assert hash_tag(key) == keys.key
    assert len({key_slot(k.encode()) for k in (*keys.data, keys.lock)}) == 1
