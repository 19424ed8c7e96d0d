"""Append p99 on one memory while it is flushed: the scenarios of ``benchmarks/bench_flush.py``."""

from __future__ import annotations

from typing import Any

from benchmarks import bench_flush
from benchmarks.report.common import Settings, median, percentile
from compozy_memory._io.translate import RedisClient

MODES = ("no flush", "compozy", "lock held across flush")


async def during_flushes(client: RedisClient, settings: Settings) -> dict[str, Any]:
    await bench_flush.scenario(client, "no flush", min(0.5, settings.flush_seconds))  # warm up
    p50: dict[str, list[float]] = {m: [] for m in MODES}
    p99: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(settings.rounds):
        for mode in MODES:
            latencies = await bench_flush.scenario(client, mode, settings.flush_seconds)
            p50[mode].append(percentile(latencies, 0.50))
            p99[mode].append(percentile(latencies, 0.99))
    base = median(p99["no flush"])
    rows = {
        mode: {
            "p50_ms": round(median(p50[mode]) * 1e3, 3),
            "p99_ms": round(median(p99[mode]) * 1e3, 3),
            "p99_ratio_to_no_flush": round(median(p99[mode]) / base, 3),
            "rounds_p99_ms": [round(v * 1e3, 3) for v in p99[mode]],
        }
        for mode in MODES
    }
    return {
        "appenders": bench_flush.APPENDERS,
        "interval_ms": bench_flush.INTERVAL * 1e3,
        "summary_delay_ms": bench_flush.SUMMARY_DELAY * 1e3,
        "seconds_per_scenario": settings.flush_seconds,
        "rounds": settings.rounds,
        "baseline": "no flush",
        "rows": rows,
    }
