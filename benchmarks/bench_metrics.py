"""What measuring every call costs: ``Transport.call`` with and without its latency metric.

The call's road to Redis is replaced by a coroutine that returns at once, so what is left is
the transport's own work. Three variants, interleaved rounds, best of each:

* ``bare``: awaiting the road directly (what the call costs with no transport around it);
* ``no-op``: ``Transport.call`` with the histogram child swapped for one that does nothing
  (the clock reads and the lookup, no ``observe``);
* ``metrics``: ``Transport.call`` as shipped.

Run: ``python benchmarks/bench_metrics.py`` (no server needed).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from compozy_memory._io.transport import Transport
from compozy_memory._metrics import MemoryMetrics
from compozy_memory._wire.effects import Call, RunScript, raw
from compozy_memory._wire.scripts import ScriptArg, script


class _NoOp:
    def observe(self, amount: float) -> None:
        pass


def _transport(noop: bool) -> Transport:
    # Never connects: the road is replaced below.
    client = Redis(host="127.0.0.1", port=1)
    transport = Transport(
        client, batching=False, memory="bench", metrics=MemoryMetrics(CollectorRegistry())
    )

    async def road(*_: Any) -> Any:
        return 1

    transport._run = road  # type: ignore[method-assign,assignment]
    if noop:
        transport._ok["read"] = _NoOp()
    return transport


async def _time(calls: int, variant: str) -> float:
    code = script("read")
    keys = [f"{{k}}:{part}" for part in code.contract.keys]
    args: Sequence[ScriptArg] = [b"0", b"-1"]
    transport = _transport(variant == "no-op")
    run = transport.call
    road = transport._run
    call = Call("read", "k", RunScript(code, keys, args), raw)
    started = time.perf_counter()
    if variant == "bare":
        for _ in range(calls):
            await road(code, keys, args, "k", False, "read")
    else:
        for _ in range(calls):
            await run(call)
    return (time.perf_counter() - started) / calls * 1e6


async def main(calls: int, rounds: int) -> None:
    best: dict[str, float] = {}
    for _ in range(rounds):
        for variant in ("bare", "no-op", "metrics"):
            micro = await _time(calls, variant)
            best[variant] = min(best.get(variant, micro), micro)
    for variant, micro in best.items():
        print(f"{variant:8} {micro:6.2f} us/call")
    metric = best["metrics"] - best["no-op"]
    total = best["metrics"] - best["bare"]
    print(f"overhead of the latency metric (metrics - no-op): {metric:.2f} us")
    print(f"overhead of run() in all (metrics - bare):        {total:.2f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.rounds))
