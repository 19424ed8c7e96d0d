"""What idempotent appends cost on the server: the append script with a dedupe key against
the same script without one, in server time per call (``INFO commandstats``).

Every append carries a key by default (see ``MemoryInstance.append_many``); the script checks
it (ZSCORE), remembers it (ZADD) and now and then sweeps old ones. Calls are pipelined, so
the client adds little; rounds of both modes alternate and medians are compared. Printed,
never asserted. Run: ``python benchmarks/bench_dedupe.py [--rounds 7]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from redis.asyncio import Redis

from compozy_memory._model.keys import InstanceKeys
from compozy_memory._wire.scripts import script
from compozy_memory.embedded import start_server

CALLS = 10_000
BODY = '{"role":"user","content":"hello there, how are you today?"}'


async def round_of(client: Redis, mode: str, label: str) -> float:
    append = script("append")
    keys = InstanceKeys.build("bench", f"dedupe:{label}")
    await client.config_resetstat()
    for start in range(0, CALLS, 250):
        pipe = client.pipeline(transaction=False)
        for n in range(start, start + 250):
            token = f"~bench:{label}:{n}" if mode == "with key" else ""
            pipe.execute_command(
                "EVALSHA", append.sha, 5, keys.msgs, keys.meta, keys.archive, keys.summaries,
                keys.dedupe, 0, 0, token, 1, 12,
                2, BODY,
            )  # fmt: skip
        await pipe.execute()
    stats = await client.info("commandstats")
    await client.delete(*keys.data)
    return float(stats["cmdstat_evalsha"]["usec_per_call"])


async def main(rounds: int) -> None:
    with start_server() as server:
        client = Redis.from_url(server.url)
        await client.script_load(script("append").source)
        figures: dict[str, list[float]] = {"without key": [], "with key": []}
        for r in range(rounds):
            for mode in figures:
                figures[mode].append(await round_of(client, mode, f"{mode[:4]}{r}"))
        await client.aclose()
    without, with_key = (statistics.median(figures[m]) for m in ("without key", "with key"))
    print(f"engine: embedded valkey; {rounds} alternating rounds of {CALLS:,} appends, medians\n")
    print("| append script | server µs per call | ratio |")
    print("| --- | --- | --- |")
    print(f"| without a dedupe key | {without:.1f} | 1.00x |")
    print(f"| with a dedupe key (the default) | {with_key:.1f} | {with_key / without:.2f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    asyncio.run(main(parser.parse_args().rounds))
