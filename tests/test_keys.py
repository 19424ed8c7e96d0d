from __future__ import annotations

import fnmatch
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.crc import key_slot

from compozy_memory import (
    ConfigurationError,
    HeuristicCounter,
    InstanceKeys,
    MemoryManager,
    MemoryRegistry,
    MemoryResource,
    sanitize_key,
)
from compozy_memory._model.keys import MAX_KEY_LENGTH, decode_key, encode_key

SAFE = re.compile(r"^[a-zA-Z0-9\-_.:#]+$")
ALLOWED = re.compile(r"[a-zA-Z0-9\-_.:]*")  # the spec's character set


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # ASCII identifiers keep their name, '_' included...
        ("user:42", "user:42"),
        ("a-b_c.d:e", "a-b_c.d:e"),
        ("ticket-9.a_b", "ticket-9.a_b"),
        ("user_42", "user_42"),
        ("2024_01_15", "2024_01_15"),
        ("_", "_"),
        # ...every other character is its UTF-8 bytes as _xHH...
        ("user 1", "user_x201"),
        ("user/1", "user_x2f1"),
        ("alice@example.com", "alice_x40example.com"),
        ("José", "Jos_xc3_xa9"),
        ("张伟", "_xe5_xbc_xa0_xe4_xbc_x9f"),
        ("{evil}:x", "_x7bevil_x7d:x"),
        # ...and a '_' that would read as an escape is escaped itself.
        ("a_x41", "a_x5fx41"),
        ("_x5f", "_x5fx5f"),
        ("a_xyz", "a_xyz"),
    ],
)
def test_keys_encode_injectively_and_readably(raw: str, expected: str) -> None:
    assert sanitize_key(raw) == expected
    assert decode_key(expected) == raw


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("张伟", "李娜"),
        ("Иван", "Олег"),
        ("José", "Josù"),
        ("alice@example.com", "alice_example.com"),
        ("user 1", "user/1"),
        ("a b", "a_x20b"),
        ("a_b", "a b"),
    ],
)
def test_different_keys_never_share_a_memory(a: str, b: str) -> None:
    assert InstanceKeys.build("acme", a).msgs != InstanceKeys.build("acme", b).msgs


async def test_different_users_get_different_memories_through_the_manager() -> None:
    template = "user:{{ .workflow.input.user }}"
    resource = MemoryResource(id="support", max_tokens=1000, default_key_template=template)
    registry = MemoryRegistry("acme", [resource])
    client = Redis()  # never connected: handles talk to Redis only when used
    manager = MemoryManager(registry, client, counter=HeuristicCounter(), flushing=False)
    users = ["张伟", "李娜", "Иван", "Олег", "José", "Josù", "alice@example.com",
             "alice_example.com", "user 1", "user/1", "42", "a_x20b", "a b"]  # fmt: skip
    keys = {}
    for user in users:
        handle = await manager.get("support", {"workflow": {"input": {"user": user}}})
        keys[handle.key] = user
    assert len(keys) == len(users), keys
    plain = await manager.get("support", {"workflow": {"input": {"user": "ticket-9.a_b"}}})
    assert plain.key == "compozy:acme:memory:{support:user:ticket-9.a_b}"
    await client.aclose()


@pytest.mark.parametrize("raw", ["", "   ", "\t\n"])
def test_blank_keys_are_refused(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="is blank"):
        sanitize_key(raw)


@pytest.mark.parametrize("key", ["a b", "_x41", "_xff", "_x5f{", "_xc3"])
def test_decode_refuses_what_encode_never_produces(key: str) -> None:
    with pytest.raises(ConfigurationError, match="not an encoded key"):
        decode_key(key)


# Every code point, lone surrogates included, with the escape's own characters made likely.
ANY_TEXT = st.text(st.characters(exclude_categories=())) | st.text(
    st.sampled_from("_x0af5:-.Aé张\ud800{}# "), max_size=30
)


@settings(max_examples=500)
@given(ANY_TEXT, ANY_TEXT)
def test_encoding_is_reversible_injective_and_stays_in_the_spec_set(s: str, t: str) -> None:
    encoded = encode_key(s)
    assert decode_key(encoded) == s
    assert ALLOWED.fullmatch(encoded)
    assert "{" not in encoded
    assert "}" not in encoded
    if s != t:
        assert encode_key(t) != encoded


@given(st.from_regex(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,20}", fullmatch=True), ANY_TEXT,
       st.from_regex(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,20}", fullmatch=True), ANY_TEXT)  # fmt: skip
def test_memory_id_and_key_compose_injectively(m1: str, k1: str, m2: str, k2: str) -> None:
    """What the manager builds: ``<memory id>:<rendered key>``; ids have no ':'."""
    if (m1, k1) != (m2, k2):
        a = InstanceKeys.build("acme", f"{m1}:{k1}")
        b = InstanceKeys.build("acme", f"{m2}:{k2}")
        assert a.msgs != b.msgs


def test_long_keys_keep_a_prefix_and_never_collide() -> None:
    a = "x" * 600 + "a"
    b = "x" * 600 + "b"
    ka, kb = sanitize_key(a), sanitize_key(b)
    assert len(ka) == len(kb) == MAX_KEY_LENGTH
    assert ka != kb
    assert ka.startswith("x" * 400)
    # A key that was short to begin with can never look like a shortened one: '#' is
    # always escaped.
    assert sanitize_key(ka) != ka
    assert sanitize_key("x" * MAX_KEY_LENGTH) == "x" * MAX_KEY_LENGTH
    # Long keys are decided on the encoded length, and hashed over the original text.
    wide = "张" * 200  # 600 characters once encoded
    assert len(sanitize_key(wide)) == MAX_KEY_LENGTH
    assert sanitize_key(wide) != sanitize_key("张" * 201)
    with pytest.raises(ConfigurationError, match="shortened"):
        decode_key(ka)


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
        "compozy:p:memory:{user:1}:recalled",
        "compozy:p:memory:{user:1}:ix:s",
        "compozy:p:memory:{user:1}:ix:d",
        "compozy:p:memory:{user:1}:ix:gone",
        "compozy:p:memory:{user:1}:ix:v",
        "compozy:p:memory:{user:1}:facts",
        "compozy:p:memory:{user:1}:factord",
        "compozy:p:memory:{user:1}:respins",
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


def test_a_key_text_picks_its_cluster_slot_but_never_leaves_its_project() -> None:
    """What the README says about slots: the slot is CRC16 of the key text, so whoever
    controls the text can land beside any other memory's slot; the key still starts with its
    own project's prefix, which is what ACL patterns confine users to."""
    victim = InstanceKeys.build("acme", "support:user:42")
    target = key_slot(victim.msgs.encode())
    found = next(
        keys
        for n in range(1_000_000)
        if key_slot((keys := InstanceKeys.build("evil", f"support:user:u{n}")).msgs.encode())
        == target
    )
    for key in (*found.data, found.lock):
        assert key_slot(key.encode()) == target
        assert key.startswith("compozy:evil:memory:{")
        assert not fnmatch.fnmatchcase(key, "compozy:acme:memory:*")


async def test_the_manager_encodes_the_rendered_key_once() -> None:
    registry = MemoryRegistry(
        "acme",
        [MemoryResource(id="support", max_tokens=1000, default_key_template="user:{{ .u }}")],
    )
    client = Redis()
    manager = MemoryManager(registry, client, counter=HeuristicCounter(), flushing=False)
    handle = await manager.get("support", {"u": "张伟"})
    await client.aclose()
    assert handle.key == "compozy:acme:memory:{support:user:_xe5_xbc_xa0_xe4_xbc_x9f}"
