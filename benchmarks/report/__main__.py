"""Run the whole comparison in one go and write ``docs/benchmarks/``.

``python -m benchmarks.report`` starts a Redis 7 (``redis-server`` on PATH) and a 3-master
Cluster of the same binary, runs every section against them and writes ``report.json``,
``README.md`` and PNG charts. ``--quick`` does a few appends of everything (seconds): a smoke
test of the pipeline whose figures mean nothing. ``make bench`` installs the ``bench`` extra
(the other libraries and matplotlib) and runs this.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report.appends import throughput
from benchmarks.report.cluster import versus_standalone
from benchmarks.report.common import Settings, machine
from benchmarks.report.flushes import during_flushes
from benchmarks.report.libs import contenders
from benchmarks.report.reads import footprint, history_scaling
from benchmarks.report.render import update_readme, write
from compozy_memory import connect
from compozy_memory.embedded import start_cluster, start_server

CAVEAT = (
    "the run shares a 2-core machine with other work (other engineers' builds and tests ran "
    "at the same time), client and server compete for the same cores, and absolute figures "
    "move by tens of percent between runs. The ratios, measured in alternating rounds within "
    "one run, are what to compare; re-run `make bench` to check them on your machine."
)


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def run(binary: str, settings: Settings, command: str) -> dict[str, Any]:
    began = time.perf_counter()
    present, missing = contenders()
    with start_server(binary) as server, start_cluster(3, binary) as cluster:
        client = connect(server.url)
        cluster_client = connect(cluster.url, cluster=True)
        try:
            info = await client.info("server")
            report: dict[str, Any] = {
                "command": command,
                "quick": settings.quick,
                "rounds": settings.rounds,
                "machine": machine(str(info["redis_version"])),
                "caveat": CAVEAT,
                "missing": missing,
            }
            sections: list[tuple[str, str, Callable[[], Awaitable[dict[str, Any]]]]] = [
                (
                    "appends",
                    f"appends: {', '.join(c.label for c in present)}",
                    lambda: throughput(present, client, server.url, settings),
                ),
                (
                    "reads",
                    "budgeted read against history length",
                    lambda: history_scaling(client, settings),
                ),
                (
                    "footprint",
                    "bytes per message and each contender's budgeted read",
                    lambda: footprint(present, client, server.url, settings),
                ),
                (
                    "flushes",
                    "append latency during flushes",
                    lambda: during_flushes(client, settings),
                ),
                (
                    "cluster",
                    "Cluster against standalone",
                    lambda: versus_standalone(
                        client,
                        cluster_client,
                        {"standalone": server.url, "cluster": cluster.url},
                        settings,
                    ),
                ),
            ]
            for name, title, section in sections:
                _log(title)
                try:
                    report[name] = await section()
                except Exception as exc:  # one failed section must not lose the others
                    traceback.print_exc()
                    report[name] = {"error": f"{type(exc).__name__}: {exc}"}
                await client.flushdb()
        finally:
            await client.aclose()
            await cluster_client.aclose()
    report["seconds"] = round(time.perf_counter() - began, 1)
    report["finished_utc"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return report


def _refresh_readme(report: dict[str, Any], out: Path) -> None:
    """A full run into docs/benchmarks/ also refreshes the summary in docs/performance.md."""
    readme = Path("docs/performance.md")
    if report["quick"] or out.resolve() != Path("docs/benchmarks").resolve():
        return
    if readme.is_file() and update_readme(report, readme):
        _log(f"refreshed the summary in {readme}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seconds: a smoke test")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument(
        "--server", help="the redis-server binary (default: redis-server on PATH)", default=None
    )
    parser.add_argument(
        "--render", type=Path, help="only rewrite the Markdown and charts from this report.json"
    )
    options = parser.parse_args(argv)
    if options.render:
        report = json.loads(options.render.read_text())
        for path in write(report, options.out):
            _log(f"wrote {path}")
        _refresh_readme(report, options.out)
        return 0
    binary = options.server or shutil.which("redis-server")
    if binary is None:
        parser.error("redis-server (Redis 7) is not on PATH; install it or pass --server")
    settings = Settings.smoke() if options.quick else Settings.full()
    command = "python -m benchmarks.report" + (" --quick" if options.quick else "")
    report = asyncio.run(run(binary, settings, command))
    for path in write(report, options.out):
        _log(f"wrote {path}")
    _refresh_readme(report, options.out)
    failed = [
        name for name, value in report.items() if isinstance(value, dict) and "error" in value
    ]
    if failed:
        _log(f"failed sections: {', '.join(failed)} (see report.json)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
