"""Calling a script directly, past the Python checks, with arguments named as its header names
them: for tests of what the scripts themselves refuse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compozy_memory._io.client_calls import arun_client
from compozy_memory._io.translate import RedisClient, run_script
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._wire.scripts import ScriptArg, script


async def run_raw(
    client: RedisClient,
    name: str,
    keys: InstanceKeys,
    values: Mapping[str, ScriptArg],
    rest: Sequence[ScriptArg] = (),
) -> Any:
    code = script(name)
    names = code.contract.keys
    args = code.contract.argv_for(values, rest)
    steps = run_script(client, code, [getattr(keys, k) for k in names], args, keys.prefix)
    return await arun_client(steps, client)
