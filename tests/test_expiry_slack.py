"""The slack a memory's deadline is given past its TTL: the Python mirror the tests and the
docs use is the helper the scripts run (``ttl_slack`` in ``lua/lib/deltas.lua``), run here in
Lua 5.1 as the servers run it."""

from __future__ import annotations

import pytest
from lupa import lua51

from compozy_memory._model.limits import (
    DEDUPE_CHUNK,
    DEDUPE_CHUNKS,
    DEDUPE_WINDOW,
    TTL_SLACK_PARTS,
    ttl_slack,
)
from compozy_memory._wire.scripts import helpers


def lua_ttl_slack() -> object:
    runtime = lua51.LuaRuntime()
    source = "\n".join(
        [f"local TTL_SLACK_PARTS = {TTL_SLACK_PARTS}", helpers()["deltas"].text, "return ttl_slack"]
    )
    return runtime.execute(source)


@pytest.mark.parametrize("ttl_ms", [1, 31, 32, 33, 1_000, 60_000, 3_600_000, 86_400_000 + 1])
def test_the_slack_python_states_is_the_slack_the_scripts_give(ttl_ms: int) -> None:
    slack = lua_ttl_slack()
    assert slack(ttl_ms) == ttl_slack(ttl_ms)  # type: ignore[operator]
    assert ttl_slack(ttl_ms) >= 1
    assert ttl_slack(ttl_ms) * TTL_SLACK_PARTS >= ttl_ms > (ttl_slack(ttl_ms) - 1) * TTL_SLACK_PARTS


def test_a_process_keeps_chunks_enough_to_cover_the_dedupe_window() -> None:
    # A process that writes one message a call keeps its keys for the whole window.
    assert DEDUPE_CHUNK * DEDUPE_CHUNKS >= DEDUPE_WINDOW
