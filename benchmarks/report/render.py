"""Write the report: ``report.json``, ``README.md`` (tables) and PNG charts, into one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHARTS = {
    "appends": "append_throughput.png",
    "reads": "budgeted_read_vs_history.png",
    "flushes": "append_p99_during_flush.png",
    "bytes": "bytes_per_message.png",
    "cluster": "cluster_vs_standalone.png",
}


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# compozy-memory: the published benchmark report",
        "",
        f"Written by `{report['command']}` on {report['finished_utc']} in "
        f"{report['seconds']:.0f} s. Every figure is a median of {report['rounds']} round(s) that "
        "alternate between the contenders, all on the same server and the same redis-py client "
        "(hiredis parser), and every ratio is to a baseline measured in the same run. "
        f"Machine: {m['cpus']} CPUs ({m['processor']}), Python {m['python']}, "
        f"Redis {m['redis']}, load average {m['load_average_at_start']} at the start.",
        "",
        "**Read with care:** " + report["caveat"],
        "",
    ]
    if report["quick"]:
        lines += ["**This is a `--quick` run (a smoke test): its figures mean nothing.**", ""]
    if report["missing"]:
        lines += [f"Not installed, so left out: {', '.join(report['missing'])}.", ""]
    for name, title, section in (
        ("appends", "Append throughput and p99", _appends),
        ("reads", "Budgeted read against history length", _reads),
        ("footprint", "Bytes per message and the budgeted read", _footprint),
        ("flushes", "Append latency while the memory is flushed", _flushes),
        ("cluster", "Cluster against standalone", _cluster),
    ):
        if "error" in report[name]:
            lines += [f"## {title}", "", f"This section failed: `{report[name]['error']}`", ""]
        else:
            lines += section(report[name])
    lines += ["Raw figures of every round are in `report.json`.", ""]
    return "\n".join(lines)


def _appends(a: dict[str, Any]) -> list[str]:
    return [
        "## Append throughput and p99",
        "",
        f"{a['sessions']} concurrent sessions x {a['appends_per_session']} appends of "
        f"~300-token messages a round, one append awaited at a time per session; p99 is one "
        "append as its caller waits for it. The async contenders share one event loop and one "
        "client; LangChain's history is synchronous, so it runs on 16 threads with the client "
        "each `RedisChatMessageHistory(url=...)` builds, and part of its client work runs "
        "outside that loop. The libraries run with their defaults (no TTL, no token counts). "
        "LangChain's is langchain-community's: its maintained successor, langchain-redis, "
        "stores JSON documents behind a search index and needs the RedisJSON and RediSearch "
        "modules, which a plain Redis 7 does not have.",
        "",
        f"![append throughput]({CHARTS['appends']})",
        "",
        "| contender | msg/s | vs raw RPUSH | append p99 (ms) | p99 vs raw | what a call does |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
        *(
            f"| {row['label']} | {_n(row['msgs_per_s'])} | {row['rate_ratio']:.2f}x "
            f"| {row['p99_ms']:.2f} | {row['p99_ratio']:.2f}x | {row['how']} |"
            for row in a["rows"].values()
        ),
        "",
    ]


def _reads(r: dict[str, Any]) -> list[str]:
    lines = [
        "## Budgeted read against history length",
        "",
        f"`read_window({r['budget_tokens']:,})` (the newest {r['window_messages']} messages), "
        f"p50 of {r['reads_per_round']} reads a round; the baseline is the same read on the "
        "shortest history, and raw `LRANGE` of the same newest messages.",
        "",
        f"![budgeted read]({CHARTS['reads']})",
        "",
        "| messages in memory | compozy p50 (ms) | vs shortest | raw LRANGE p50 (ms) | vs raw |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {_n(row['messages'])} | {row['compozy_p50_ms']:.3f} "
            f"| {row['ratio_to_smallest']:.2f}x | {row['raw_lrange_p50_ms']:.3f} "
            f"| {row['ratio_to_raw']:.2f}x |"
        )
    return [*lines, ""]


def _footprint(f: dict[str, Any]) -> list[str]:
    lines = [
        f"## Bytes per message and the budgeted read, {f['messages']} messages each",
        "",
        "Bytes: `MEMORY USAGE key SAMPLES 0` summed over every key of one conversation, over "
        f"the message count; the JSON payload is {f['json_payload_bytes_per_message']:,.0f} "
        "bytes a message. Read: the newest messages that fit "
        f"{f['budget_tokens']:,} tokens, p50. The other libraries keep no token counts, so "
        "their read is their own read-all call, then counting (cached tiktoken) and keeping "
        "the newest that fit; raw `RPUSH` reads the newest messages with `LRANGE`.",
        "",
        f"![bytes per message]({CHARTS['bytes']})",
        "",
        "| contender | keys | bytes/msg | x JSON payload | vs raw | read p50 (ms) | vs raw |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in f["rows"].values():
        read = "n/a" if row["read_p50_ms"] is None else f"{row['read_p50_ms']:.3f}"
        ratio = "n/a" if row["read_p50_ms"] is None else f"{row['read_ratio_to_baseline']:.2f}x"
        lines.append(
            f"| {row['label']} | {row['keys']} | {_n(row['bytes_per_message'])} "
            f"| {row['ratio_to_json_payload']:.2f}x | {row['bytes_ratio_to_baseline']:.2f}x "
            f"| {read} | {ratio} |"
        )
    return [*lines, ""]


def _flushes(fl: dict[str, Any]) -> list[str]:
    lines = [
        "## Append latency while the memory is flushed",
        "",
        f"{fl['appenders']} appenders on one memory, one append every "
        f"{fl['interval_ms']:g} ms each, a {fl['summary_delay_ms']:g} ms summarizer, "
        f"{fl['seconds_per_scenario']:g} s a scenario (`benchmarks/bench_flush.py`). The spec's "
        "design holds the memory's lock across the whole flush and every append takes it. "
        "A p99 over a few seconds is the slowest 1% of a few thousand appends: it is noisy, "
        "most of all on a loaded machine.",
        "",
        f"![append p99 during flushes]({CHARTS['flushes']})",
        "",
        "| scenario | append p50 (ms) | append p99 (ms) | p99 vs no flush |",
        "| --- | ---: | ---: | ---: |",
    ]
    for mode, row in fl["rows"].items():
        lines.append(
            f"| {mode} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {row['p99_ratio_to_no_flush']:.2f}x |"
        )
    return [*lines, ""]


def _cluster(c: dict[str, Any]) -> list[str]:
    lines = [
        "## Cluster against standalone",
        "",
        "The same append round and budgeted read on a 3-master Cluster of the same server "
        "binary; ratios are Cluster over standalone.",
        "",
        f"![cluster vs standalone]({CHARTS['cluster']})",
        "",
        "| measure | standalone | Cluster | Cluster / standalone |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in ("raw_rpush", "compozy"):
        row = c["rows"][name]
        lines.append(
            f"| {row['label']}, msg/s | {_n(row['standalone_msgs_per_s'])} "
            f"| {_n(row['cluster_msgs_per_s'])} | {row['cluster_rate_ratio']:.2f}x |"
        )
        lines.append(
            f"| {row['label']}, append p99 (ms) | {row['standalone_p99_ms']:.2f} "
            f"| {row['cluster_p99_ms']:.2f} | {row['cluster_p99_ratio']:.2f}x |"
        )
    row = c["rows"]["compozy_read"]
    lines.append(
        f"| {row['label']} (ms) | {row['standalone_ms']:.3f} | {row['cluster_ms']:.3f} "
        f"| {row['cluster_ratio']:.2f}x |"
    )
    return [*lines, ""]


def charts(report: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    def bars(ax: Any, labels: list[str], values: list[float], ratios: list[str]) -> None:
        positions = range(len(labels))
        colours = ["#888888" if i == 0 else "#3b6fb6" for i in positions]
        ax.barh(list(positions), values, color=colours)
        ax.set_yticks(list(positions), labels)
        ax.invert_yaxis()
        for i, (value, ratio) in enumerate(zip(values, ratios, strict=True)):
            ax.text(value, i, f" {ratio}", va="center", fontsize=8)
        ax.margins(x=0.18)

    if "error" not in report["appends"]:
        rows = list(report["appends"]["rows"].values())
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.4))
        bars(
            ax,
            [r["label"] for r in rows],
            [r["msgs_per_s"] for r in rows],
            [f"{r['rate_ratio']:.2f}x" for r in rows],
        )
        ax.set_xlabel("messages per second (higher is better); ratio to raw RPUSH")
        ax.set_title(f"Append throughput, {report['appends']['sessions']} concurrent sessions")
        save(fig, CHARTS["appends"])

    if "error" not in report["reads"]:
        read_rows = report["reads"]["rows"]
        fig, ax = plt.subplots(figsize=(7, 4))
        sizes = [r["messages"] for r in read_rows]
        ax.plot(sizes, [r["compozy_p50_ms"] for r in read_rows], "o-", label="compozy read_window")
        ax.plot(sizes, [r["raw_lrange_p50_ms"] for r in read_rows], "s--", label="raw LRANGE")
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("messages in the memory")
        ax.set_ylabel("p50 ms per read")
        ax.set_title(f"Budgeted read ({report['reads']['budget_tokens']:,} tokens)")
        ax.legend()
        save(fig, CHARTS["reads"])

    if "error" not in report["footprint"]:
        foot = list(report["footprint"]["rows"].values())
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(foot) + 1.4))
        bars(
            ax,
            [r["label"] for r in foot],
            [r["bytes_per_message"] for r in foot],
            [f"{r['ratio_to_json_payload']:.2f}x JSON" for r in foot],
        )
        ax.set_xlabel("bytes per message in Redis (lower is better)")
        ax.set_title(f"Memory per message, {report['footprint']['messages']} messages")
        save(fig, CHARTS["bytes"])

    if "error" not in report["flushes"]:
        flush = report["flushes"]["rows"]
        fig, ax = plt.subplots(figsize=(7, 2.6))
        bars(
            ax,
            list(flush),
            [r["p99_ms"] for r in flush.values()],
            [f"{r['p99_ratio_to_no_flush']:.2f}x" for r in flush.values()],
        )
        ax.set_xscale("log")
        ax.set_xlabel("append p99, ms (log scale); ratio to no flush")
        ax.set_title("Append p99 while the memory is flushed")
        save(fig, CHARTS["flushes"])

    if "error" not in report["cluster"]:
        cluster = report["cluster"]["rows"]
        fig, ax = plt.subplots(figsize=(7, 3))
        names = ["raw_rpush", "compozy"]
        width = 0.38
        xs = range(len(names))
        ax.bar(
            [x - width / 2 for x in xs],
            [cluster[n]["standalone_msgs_per_s"] for n in names],
            width,
            label="standalone",
            color="#888888",
        )
        ax.bar(
            [x + width / 2 for x in xs],
            [cluster[n]["cluster_msgs_per_s"] for n in names],
            width,
            label="3-master Cluster",
            color="#3b6fb6",
        )
        ax.set_xticks(list(xs), [cluster[n]["label"] for n in names])
        ax.set_ylabel("messages per second")
        ax.set_title("Append throughput, Cluster against standalone")
        ax.legend()
        save(fig, CHARTS["cluster"])
    return written


def write(report: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "README.md").write_text(markdown(report))
    return [out / "report.json", out / "README.md", *charts(report, out)]


README_START = "<!-- bench:start (written by python -m benchmarks.report) -->"
README_END = "<!-- bench:end -->"


def readme_section(report: dict[str, Any]) -> str:
    """The summary docs/performance.md shows: one table per contender, one of this library's
    other ratios, and the throughput chart (linked from docs/, beside docs/benchmarks/)."""
    m = report["machine"]
    lines = [
        README_START,
        f"From `{report['command']}` on {report['finished_utc']}: Redis {m['redis']}, "
        f"{m['cpus']} CPUs, Python {m['python']}, load average "
        f"{m['load_average_at_start'][0]} at the start (a shared machine, busy with other "
        "work: absolute figures are low and move between runs; the ratios are what compare).",
        "",
    ]
    appends, foot = report["appends"], report["footprint"]
    if "error" not in appends and "error" not in foot:
        lines += [
            "| contender | append msg/s | vs raw RPUSH | append p99 (ms) "
            f"| bytes/msg (x JSON) | budgeted read of {foot['messages']}, p50 (ms) |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, row in appends["rows"].items():
            f = foot["rows"][name]
            read = "n/a" if f["read_p50_ms"] is None else f"{f['read_p50_ms']:.2f}"
            lines.append(
                f"| {row['label']} | {_n(row['msgs_per_s'])} | {row['rate_ratio']:.2f}x "
                f"| {row['p99_ms']:.1f} | {_n(f['bytes_per_message'])} "
                f"({f['ratio_to_json_payload']:.2f}x) | {read} |"
            )
        lines.append("")
    extra = []
    if "error" not in report["reads"]:
        rows = report["reads"]["rows"]
        first, last = rows[0], rows[-1]
        extra.append(
            f"| `read_window({report['reads']['budget_tokens']:,})`, p50 "
            f"| {_n(first['messages'])} messages, {first['compozy_p50_ms']:.3f} ms "
            f"| {_n(last['messages'])} messages, {last['compozy_p50_ms']:.3f} ms "
            f"| {last['ratio_to_smallest']:.2f}x |"
        )
    if "error" not in report["flushes"]:
        fl = report["flushes"]["rows"]
        extra.append(
            f"| append p99 while flushed | no flush, {fl['no flush']['p99_ms']:.1f} ms "
            f"| flushing, {fl['compozy']['p99_ms']:.1f} ms "
            f"| {fl['compozy']['p99_ratio_to_no_flush']:.2f}x (the spec's lock: "
            f"{fl['lock held across flush']['p99_ratio_to_no_flush']:,.0f}x) |"
        )
    if "error" not in report["cluster"]:
        c = report["cluster"]["rows"]["compozy"]
        extra.append(
            f"| append throughput | standalone, {_n(c['standalone_msgs_per_s'])} msg/s "
            f"| 3-master Cluster, {_n(c['cluster_msgs_per_s'])} msg/s "
            f"| {c['cluster_rate_ratio']:.2f}x (raw RPUSH: "
            f"{report['cluster']['rows']['raw_rpush']['cluster_rate_ratio']:.2f}x) |"
        )
    if extra:
        lines += [
            "| compozy-memory | baseline | measured | ratio |",
            "| --- | --- | --- | ---: |",
            *extra,
            "",
        ]
    lines += [f"![append throughput](benchmarks/{CHARTS['appends']})", README_END]
    return "\n".join(lines)


def update_readme(report: dict[str, Any], readme: Path) -> bool:
    """Replace the text between the markers in ``readme``; False where there are none."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    readme.write_text(text[:start] + readme_section(report) + text[end + len(README_END) :])
    return True
