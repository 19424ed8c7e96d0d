"""The Lua scripts' headers are their contracts: checked against the bodies and the gateway."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from compozy_memory import FlushPlan, ScriptError
from compozy_memory._facts.lines import EncodedFact
from compozy_memory._model.limits import DATA_FORMAT, LUA_CONSTANTS
from compozy_memory._model.messages import EncodedMessage
from compozy_memory._results.calls import ResultGateway
from compozy_memory._search.runtime.index_calls import parse_pending
from compozy_memory._search.runtime.vector_calls import VectorPending
from compozy_memory._search.segments import build, encode
from compozy_memory._sessions.index import SessionIndex
from compozy_memory._wire import scripts as scripts_module
from compozy_memory._wire.contracts import KEY_ORDER, parse_contract
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.scripts import (
    SCRIPT_NAMES,
    helpers,
    library,
    lua_dir,
    script,
    script_path,
)
from tests.fakes import FakeTransport, commit_reply, gateway, pending_reply, snapshot_reply

RESULT_KEY = "compozy:units:result:{agent:a}:" + "0" * 64

APPEND_REPLY = [1, 1, 3, 1, 0, 0, b"42", b"1:k"]
HEALTH_REPLY = [b"tokens", b"3", b"_msgs_len", 1, b"_archive_len", 0, b"_summaries_len", 0]
HEALTH_REPLY += [b"_recalled_len", 0, b"_ixgone_len", 0, b"_facts_len", 0, b"_factord_len", 0]
HEALTH_REPLY += [b"_ixpost", 0, b"_ixdocs", 0, b"_ttl_ms", -1]
READ_REPLY = [0, 0, 0, b"42", b"1:k"]
PENDING = pending_reply()
TRIPLE = [EncodedMessage(3, 2, b'{"role":"user","content":"hi"}')]

# One call of every gateway method that runs a script, with a reply of the script's shape.
CALLS: dict[str, tuple[Callable[[MemoryGateway], Awaitable[Any]], Any]] = {
    "append": (lambda g: g.append(TRIPLE, "k"), APPEND_REPLY),
    "replace": (
        lambda g: g.replace(
            TRIPLE, if_last_id=1, if_incarnation="42", if_version="1:k", dedupe_key="k"
        ),
        APPEND_REPLY,
    ),
    "trim": (lambda g: g.trim_step(5, None), [1, 3, 0, 1, 0]),
    "clear": (lambda g: g.clear(), [0, 0]),
    "purge": (lambda g: g.purge(), [3, 12]),
    "expire": (lambda g: g.expire(1000), 2),
    "read": (lambda g: g.read_range(0, -1), READ_REPLY),
    "health": (lambda g: g.health(), HEALTH_REPLY),
    "snapshot": (lambda g: g.snapshot(10), snapshot_reply([])),
    "flush_commit": (
        lambda g: g.flush_commit(
            epoch=1,
            incarnation="42",
            plan=FlushPlan(prefix_ids=(1, 2), summarize_ids=(1,)),
            summary_body=b'{"role":"system","content":"s"}',
            summary_tokens=2,
        ),
        commit_reply(),
    ),
    "lock_acquire": (lambda g: g.lock_acquire("t" * 32, 1000), [1, b"42"]),
    "lock_refresh": (lambda g: g.lock_refresh("t" * 32, 1000), 1),
    "lock_release": (lambda g: g.lock_release("t" * 32), 1),
    "context": (
        lambda g: g.context(
            100,
            summary_share=0.3,
            recall_share=0.4,
            backfill=True,
            max_messages=None,
            hits=[3, 1],
        ),
        [0, b"42", b"1:k", 0, 0, 0, 0, 0, 0],
    ),
    "facts_set": (lambda g: g.facts_set([EncodedFact(b"name", 5, b"Ada")], 200), [1]),
    "facts_delete": (lambda g: g.facts_delete([b"name"]), 1),
    "facts_items": (lambda g: g.facts_items(), [b"name", b"5\tAda"]),
    "result_put": (
        lambda g: ResultGateway(g.transport).put(
            RESULT_KEY, data=b"x", size=1, enc="raw", kind="text", ttl_ms=0, pin=True, pin_ttl_ms=0
        ),
        [1, 1],
    ),
    "result_release": (lambda g: ResultGateway(g.transport).release(RESULT_KEY), 0),
    "result_touch": (lambda g: ResultGateway(g.transport).touch(RESULT_KEY, 1000), 1000),
    "session_touch": (
        lambda g: SessionIndex(None, "units", transport=g.transport).touch(
            "conv", agent="a", last_id=3, messages=3, tokens=9
        ),
        1732250000123,
    ),
    "transcript": (lambda g: g.transcript_page("msgs", 0), [b"1:k|0|0", 0]),
    "import": (
        lambda g: g.import_step(
            "t" * 16,
            "msgs",
            0,
            1,
            ['{"id":1,"ts":1,"tokens":3,"priority":2,"role":"user","content":"hi"}'],
        ),
        [1, 1],
    ),
    "sessions_forget": (
        lambda g: SessionIndex(None, "units", transport=g.transport).gateway.forget("conv", "a"),
        1,
    ),
    "sessions_list": (
        lambda g: SessionIndex(None, "units", transport=g.transport).page(agent="a", limit=2),
        [b"conv", b"1\t2\t3\t3\t9\ta"],
    ),
    "promote": (lambda g: g.promote([3], 100), [0]),
    "clear_recalled": (lambda g: g.clear_recalled(), 0),
    "index_pending": (lambda g: g.index_pending(8, 1000), PENDING),
    "index_add": (
        lambda g: g.index_add(
            parse_pending(script("index_pending").contract.decode(PENDING)),
            analyzer="1",
            upto=0,
            seq_upto=0,
            documents=[(1, 1, 1, 0)],
            positive=encode(build([(1, {"hi": 1}, 1)])),
            negative=None,
            gone=0,
            gone_first=0,
        ),
        [1, 2, 0, 1, b"2,1,1,1,1,1,0,20", b"", 0],
    ),
    "index_read": (
        lambda g: g.index_read([1], ["1.0"], tail=4),
        [DATA_FORMAT, b"2", 0, 1, 1, 0, 0, b"1,1,1,1,1,1,0,20", b"", b"1", 2, 1, b"{}", b"x"],
    ),
    "index_merge": (
        lambda g: g.index_merge(
            [1, 2], encode(build([(1, {"hi": 1}, 1)])), {"b0": b"x"}, incarnation="1"
        ),
        [1, 3, 1],
    ),
    "index_put": (lambda g: g.index_put(3, {"b0": b"x"}, incarnation="1"), [1, 2]),
    "index_gc": (lambda g: g.index_gc(), 0),
    "index_reset": (lambda g: g.index_reset(force=False), [0, 2]),
    "vec_pending": (lambda g: g.vec_pending(8, 1000), [b"", 1, 0, b"", 0]),
    "vec_apply": (
        lambda g: g.vec_apply(
            VectorPending("", 1, 2, (), ()),
            model="m/3/v2",
            upto=2,
            names=["ann"],
            vectors=[(1, b"\x40\x41\x42")],
        ),
        [1, 3, 1],
    ),
    "vec_reset": (lambda g: g.vec_reset("m/3/v2"), 1),
    "search_candidates": (
        lambda g: g.search_candidates([(2, 1.5)], since_id=0, kinds=[]),
        [0, b"m/3/v2", b"ann", 2, 1, b"@AB", 3, 0, b""],
    ),
    "search_fetch": (lambda g: g.search_fetch([2], limit=1), [0]),
}


def test_every_script_file_is_known_and_every_known_script_exists() -> None:
    files = [p.stem for p in lua_dir().rglob("*.lua") if "lib" not in p.parent.parts]
    assert len(files) == len(set(files))  # one name, one file, whichever folder holds it
    assert set(files) == set(SCRIPT_NAMES) == set(CALLS)


# A feature keeps its scripts, and the helpers only they use, in lua/<feature>/ and
# lua/<feature>/lib/; what serves the conversation itself stays in lua/.
FEATURE_SCRIPTS = {
    "search": {n for n in SCRIPT_NAMES if n.startswith(("index_", "search_", "vec_"))},
    "sessions": {"session_touch", "sessions_list", "sessions_forget"},
    "results": {"result_put", "result_release", "result_touch"},
    "facts": {"facts_set", "facts_delete", "facts_items"},
    "flush": {"flush_commit", "lock_acquire", "lock_refresh", "lock_release"},
}
FEATURE_HELPERS = {"search": {"segments", "segments_write"}}


def feature_of(name: str) -> str:
    """The feature folder script ``name`` lives in ('' for lua/ itself)."""
    path = script_path(name)
    return "" if path.parent == lua_dir() else path.parent.name


def test_a_feature_keeps_its_scripts_and_its_helpers_in_its_folder() -> None:
    for feature, names in FEATURE_SCRIPTS.items():
        assert {n for n in SCRIPT_NAMES if feature_of(n) == feature} == names, feature
        owned = {n for n, h in helpers().items() if h.feature == feature}
        assert owned == FEATURE_HELPERS.get(feature, set()), feature
    assert {feature_of(n) for n in SCRIPT_NAMES} == {"", *FEATURE_SCRIPTS}
    # A shared helper of lua/lib/ serves more than one feature, or scripts of lua/ itself.
    for name, helper in helpers().items():
        users = {feature_of(s) for s in SCRIPT_NAMES if name in script(s).uses}
        users |= {h.feature for h in helpers().values() if name in h.uses}
        if helper.feature == "":
            assert "" in users or len(users) > 1, name


def test_a_shared_helper_may_not_use_a_features_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "args.lua").write_text("-- USES: segments\nreturn seg_x()\n")
    (tmp_path / "search" / "lib").mkdir(parents=True)
    (tmp_path / "search" / "lib" / "segments.lua").write_text(
        "-- USES: (none)\nlocal function seg_x() return 1 end\n"
    )
    monkeypatch.setattr(scripts_module, "lua_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match="another feature's helpers"):
        scripts_module.helpers.__wrapped__()


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_a_header_names_exactly_what_the_body_uses(name: str) -> None:
    code = script(name)  # loading parses the header and refuses numbered KEYS/ARGV
    body = script_path(name).read_text().partition("\n")[2]
    header = "\n".join(line for line in body.splitlines() if line.startswith("--"))
    assert "-- REPLY:" in header, f"{name}.lua must say what it returns"
    code_lines = "\n".join(line for line in body.splitlines() if not line.startswith("--"))
    contract = code.contract
    used_keys = set(re.findall(r"\bk_(\w+)", code_lines))
    used_args = set(re.findall(r"\ba_(\w+)", code_lines))
    assert used_keys <= set(contract.keys), name
    # Every declared key is used by name, or through KEYS / K as a whole (TTLs, archive()).
    wholesale = re.search(r"\b(KEYS|K)\b", code_lines) is not None
    assert wholesale or set(contract.keys) == used_keys, name
    assert used_args == set(contract.argv), name
    assert ("ARGS_FROM" in code_lines) == (contract.variadic is not None), name


@pytest.mark.parametrize("name", SCRIPT_NAMES)
async def test_the_gateway_sends_what_each_header_declares(name: str) -> None:
    transport = FakeTransport()
    call, reply = CALLS[name]
    transport.on(name, reply)
    g = gateway(transport)
    await call(g)
    (sent,) = transport.named(name)
    contract = script(name).contract
    if name.startswith("result_"):  # one key outside the memory's slot
        assert sent.keys == (RESULT_KEY,)
    elif name.startswith("session"):  # the project's session index, a slot of its own
        index = SessionIndex(None, "units", transport=g.transport)
        parts = {"sessions": index.agent_key("a") if name == "sessions_list" else index.all_key}
        parts |= {"agent_sessions": index.agent_key("a"), "session_info": index.info_key}
        assert sent.keys == tuple(parts[k] for k in contract.keys)
    else:
        assert sent.keys == tuple(getattr(g.keys, k) for k in contract.keys)
    fixed = len(contract.argv)
    assert len(sent.args) >= fixed
    if contract.variadic is None:
        assert len(sent.args) == fixed
    for arg_name in contract.argv:
        sent.arg(arg_name)  # every declared argument has a place


def test_limits_are_injected_once_from_python() -> None:
    for helper in helpers().values():
        for name in LUA_CONSTANTS:
            assert name not in helper.defines, f"{helper.where} must not define {name}"
    for name, value in LUA_CONSTANTS.items():
        for each in SCRIPT_NAMES:
            assert f"local {name} = {value}\n" in script(each).source


def test_a_script_carries_only_the_helpers_it_uses_and_theirs() -> None:
    release = script("lock_release")
    assert release.uses == ()
    assert not any(helper.text in release.source for helper in helpers().values())
    append = script("append").source
    for name, helper in helpers().items():
        assert (helper.text in append) == (
            name in {"args", "batch", "clock", "deltas", "dedupe", "envelope", "meta"}
        ), name
    # The Functions library holds each helper file once, whatever the scripts share.
    for helper in helpers().values():
        assert library().source.count(helper.text) == 1


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("-- USES: args\nreturn envelope_head('x')\n", r"calls \['envelope_head'\] without"),
        ("-- USES: args envelope\nreturn int_arg(1, 'n', 0, 2)\n", "calls none of it"),
        ("-- USES: nothere\nreturn 1\n", "unknown"),
        ("return 1\n", "one '-- USES:' line"),
    ],
)
def test_a_script_may_call_only_the_helpers_it_declares(
    body: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lib").symlink_to(lua_dir() / "lib")
    (tmp_path / "probe.lua").write_text(
        f"#!lua\n-- KEYS: meta\n-- ARGV: (none)\n-- REPLY: n\n{body}"
    )
    monkeypatch.setattr(scripts_module, "lua_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=problem):
        scripts_module.script.__wrapped__("probe")


def test_a_local_of_the_same_name_is_not_a_call() -> None:
    every = helpers()
    scripts_module._check_calls("x", "local archive_push = 1\nreturn archive_push\n", (), every)
    with pytest.raises(ValueError, match="archive_push"):
        scripts_module._check_calls("x", "return archive_push(K, {}, 0)\n", (), every)


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        ("-- KEYS: meta msgs\n-- ARGV: a\n-- REPLY: n\n", "order"),
        ("-- KEYS: msgs bogus\n-- ARGV: a\n-- REPLY: n\n", "unknown keys"),
        ("-- KEYS: msgs\n-- REPLY: n\n", "needs"),
        ("-- KEYS: msgs\n-- ARGV: a\n", "needs"),
        ("-- KEYS: msgs\n-- ARGV: Bad\n-- REPLY: n\n", "lowercase"),
        ("-- KEYS: msgs\n-- ARGV: a a\n-- REPLY: n\n", "twice"),
        ("-- KEYS: msgs\n-- ARGV: a\n-- REPLY: {x... y}\n", "only the last"),
        ("-- KEYS: msgs\n-- ARGV: a\n-- REPLY: {x x}\n", "twice"),
        ("-- KEYS: msgs\n-- ARGV: a\n-- REPLY: {X}\n", "is not name"),
    ],
)
def test_bad_headers_are_refused(header: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_contract("x", header)


def test_the_one_key_order_is_the_order_every_script_uses() -> None:
    for name in SCRIPT_NAMES:
        keys = script(name).contract.keys
        assert list(keys) == sorted(keys, key=KEY_ORDER.index)


def test_a_call_that_disagrees_with_its_header_is_refused_before_redis() -> None:
    contract = script("trim").contract
    with pytest.raises(ScriptError, match="do not match the header"):
        contract.argv_for({"ttl_ms": 0, "archive_max": 0, "keep_messages": 1})
    with pytest.raises(ScriptError, match="do not match the header"):
        contract.argv_for({"ttl_ms": 0, "archive_max": 0, "keep_messages": 1, "max_token": 1})
    with pytest.raises(ScriptError, match="keys sent"):
        contract.check_keys(["only-one"])


def test_a_reply_is_read_by_the_names_its_header_gives() -> None:
    contract = script("context").contract
    reply = [3, b"42", b"9:k", 1, b"p", 1, b"name", b"2\tAda", 0, 1, b"1.5", b"e", 0, 2, b"a", b"b"]
    fields = contract.decode(reply)
    assert fields["unindexed"] == 3
    assert fields["pinned"] == [b"p"]
    assert fields["facts"] == [(b"name", b"2\tAda")]
    assert fields["recall"] == [(b"1.5", b"e")]
    assert fields["window"] == [b"a", b"b"]
    assert script("expire").contract.decode(5) == {"existing": 5}


@pytest.mark.parametrize(
    "reply",
    [[3, b"42", b"9:k", 2, b"p"], [3, b"42", b"9:k", 0, 0, 0, 0, 0, 0, b"extra"], b"scalar"],
)
def test_a_reply_of_another_shape_is_a_script_error(reply: Any) -> None:
    with pytest.raises(ScriptError, match="context"):
        script("context").contract.decode(reply)


def test_every_script_with_a_variadic_part_has_a_cap_its_calls_are_checked_against() -> None:
    """The server converts every argument before a script runs: the gateways refuse a call
    past VARIADIC_MOST before sending it (integration/test_arguments.py sends them)."""
    from compozy_memory._wire.gateway_base import VARIADIC_MOST
    from compozy_memory._wire.scripts import SCRIPT_NAMES, script

    variadic = {name for name in SCRIPT_NAMES if script(name).contract.variadic}
    assert set(VARIADIC_MOST) == variadic


def _top_level_locals(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if re.match(r"local function \w+", line):
            count += 1
        elif declared := re.match(r"local ([\w\s,]+?)\s*(?:=|$)", line):
            count += len([name for name in declared.group(1).split(",") if name.strip()])
    return count


def test_the_library_top_level_keeps_room_under_lua_s_200_locals() -> None:
    # The Functions library is one chunk: the limits and every helper's functions are locals
    # of its top level (the scripts' callbacks are anonymous). Past 200, FUNCTION LOAD fails
    # with "too many local variables"; this fails first, while there is room to act (fold a
    # helper file's functions into one table, or limits the scripts do not use out of the
    # prelude).
    source = scripts_module.library().source
    start = source.index("\n") + 1
    end = source.index("redis.register_function")
    used = _top_level_locals(source[start:end])
    assert used > 100  # the count reads the library as it is laid out
    assert used <= scripts_module.LUA_MAX_LOCALS - 25, used
