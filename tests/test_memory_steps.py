"""A memory's steps (``memory.steps``) on the fake driver: what each operation sends, what it
refuses before sending anything, and how a paged read keeps to one state. No server: the
fake answers each script from a queue, as the script's contract says it would."""

from __future__ import annotations

from typing import Any

import pytest

from compozy_memory import MemoryPolicy, Message
from compozy_memory._wire.scripts import script
from compozy_memory.errors import (
    ConcurrentChangeError,
    InvalidMessageError,
    ReadOnlyMemoryError,
    UsageError,
)
from tests.fakes import FakeTransport, append_reply, envelope, memory, read_reply


def said(text: str, id: int) -> bytes:
    return envelope({"role": "user", "content": text}, id=id, tokens=3)


async def test_an_append_is_one_call_with_the_messages_in_order_and_the_callers_key() -> None:
    fake = FakeTransport().on("append", append_reply(1, 2))
    steps = memory(fake).steps
    result = await fake.drive(
        steps.append_many(
            [
                {"role": "user", "content": "one", "tokens": 4},
                {"role": "assistant", "content": "two"},
            ],
            dedupe_key="event-7",
        )
    )
    assert (result.first_id, result.last_id, result.version) == (1, 2, "2:v")
    [call] = fake.calls
    assert call.script == "append"
    assert call.write
    assert b"event-7" in bytes(call.arg("dedupe_key"))  # type: ignore[arg-type]
    assert call.arg("n") == 2
    # tokens, priority, body for each message, the body without its '{' (the script's
    # envelope puts it back)
    triples = call.args[len(script("append").contract.argv) :]
    assert len(triples) == 6
    assert triples[0] == 4  # the caller's count
    bodies = [b"{" + bytes(a) for a in triples[2::3]]  # type: ignore[arg-type]
    assert [Message.model_validate_json(b).text for b in bodies] == ["one", "two"]


async def test_append_is_append_many_of_one() -> None:
    fake = FakeTransport().on("append", append_reply(5, 5))
    result = await fake.drive(memory(fake).steps.append({"role": "user", "content": "hi"}))
    assert result.last_id == 5
    assert fake.calls[0].arg("n") == 1


@pytest.mark.parametrize(
    ("operation", "arguments"),
    [
        ("append", ({"role": "user", "content": "hi"},)),
        ("append_many", ([{"role": "user", "content": "hi"}],)),
        ("replace", ([],)),
        ("trim", ()),
        ("clear", ()),
        ("set_ttl", (60,)),
        ("import_transcript", ("",)),
        ("flush", ()),
        ("recall_messages", ([1],)),
        ("clear_recalled", ()),
    ],
)
async def test_a_read_only_memory_refuses_every_write_before_sending_it(
    operation: str, arguments: tuple[Any, ...]
) -> None:
    fake = FakeTransport()
    steps = memory(fake, read_only=True).steps
    with pytest.raises(ReadOnlyMemoryError, match=operation.removesuffix("_many")):
        await fake.drive(getattr(steps, operation)(*arguments))
    assert fake.calls == []


@pytest.mark.parametrize(
    ("operation", "arguments", "keywords", "error"),
    [
        ("append_many", ([],), {}, InvalidMessageError),
        ("replace", ([],), {"if_last_id": -1}, UsageError),
        ("replace", ([],), {"if_last_id": 3}, UsageError),  # no incarnation seen yet
        ("trim", (), {"keep_messages": -1}, UsageError),
        ("trim", (), {"max_tokens": True}, UsageError),
        ("snapshot", (0,), {}, UsageError),
        ("recall", (-1,), {}, UsageError),
        ("search", ("pets",), {"limit": 0}, UsageError),
        ("read_window", (), {"max_messages": -2}, UsageError),
        ("export_transcript", ("html",), {}, UsageError),
    ],
)
async def test_bad_arguments_are_refused_before_anything_is_sent(
    operation: str, arguments: tuple[Any, ...], keywords: dict[str, Any], error: type[Exception]
) -> None:
    fake = FakeTransport()
    steps = memory(fake).steps
    with pytest.raises(error):
        await fake.drive(getattr(steps, operation)(*arguments, **keywords))
    assert fake.calls == []


async def test_a_read_longer_than_a_page_joins_pages_of_one_state() -> None:
    fake = FakeTransport().on(
        "read",
        read_reply([said("a", 1), said("b", 2)], count=3),
        read_reply([said("c", 3)], count=3),
    )
    messages = await fake.drive(memory(fake).steps.read())
    assert [m.text for m in messages] == ["a", "b", "c"]
    assert [c.arg("start") for c in fake.calls] == [0, 2]


async def test_a_read_starts_again_when_a_write_lands_between_its_pages() -> None:
    fake = FakeTransport().on(
        "read",
        read_reply([said("a", 1), said("b", 2)], count=3, version="7:v"),
        read_reply([said("x", 3)], count=3, version="8:v"),  # another state: dropped
        read_reply([said("a", 1), said("b", 2)], count=3, version="8:v"),
        read_reply([said("c", 3)], count=3, version="8:v"),
    )
    messages = await fake.drive(memory(fake).steps.read())
    assert [m.text for m in messages] == ["a", "b", "c"]
    assert len(fake.calls) == 4


async def test_a_read_gives_up_when_every_attempt_meets_a_write() -> None:
    pages = []
    for version in range(5):
        pages += [
            read_reply([said("a", 1)], count=2, version=f"{version}:a"),
            read_reply([said("b", 2)], count=2, version=f"{version}:b"),
        ]
    fake = FakeTransport().on("read", *pages)
    with pytest.raises(ConcurrentChangeError, match="5 times"):
        await fake.drive(memory(fake).steps.read())


async def test_context_is_the_layers_messages() -> None:
    fake = FakeTransport()
    policy = MemoryPolicy(max_tokens=1_000)
    steps = memory(fake, policy=policy).steps
    # No budget at all: refused by the steps of context and context_layers alike.
    bare = memory(fake, policy=MemoryPolicy()).steps
    for operation in (bare.context, bare.context_layers):
        with pytest.raises(UsageError, match="needs max_tokens"):
            await fake.drive(operation())
    with pytest.raises(UsageError, match="reserve_output"):
        await fake.drive(steps.context(100, reserve_output=101))
    assert fake.calls == []


async def test_the_steps_read_the_memorys_parts_as_they_are_now() -> None:
    """A part the memory swaps later (a policy, as a benchmark does) is what the steps use."""
    fake = FakeTransport()
    core = memory(fake)
    core.policy = MemoryPolicy(max_messages=5)
    assert core.steps.policy is core.policy
    core.steps.read_only = True
    assert core.read_only is True
