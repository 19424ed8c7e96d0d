"""``python -m benchmarks.report --quick`` writes a complete, well-formed report.

Only the shape is checked (files, keys, ratios computed from the run's own baseline), never a
timing: timings belong to the report itself.
"""

from __future__ import annotations

import json
import math
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.report.libs import contenders
from benchmarks.report.render import (
    CHARTS,
    README_END,
    README_START,
    update_readme,
)
from integration.engines import require_redis7

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = require_redis7("the benchmark report")
    pytest.importorskip("matplotlib", reason="the bench extra draws the charts with matplotlib")
    out = tmp_path_factory.mktemp("bench-report")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.report",
            "--quick",
            "--out",
            str(out),
            "--server",
            binary,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def report(report_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((report_dir / "report.json").read_text())
    return loaded


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_machine_and_the_run_are_recorded(report: dict[str, Any]) -> None:
    machine = report["machine"]
    assert machine["cpus"] >= 1
    assert machine["python"] == ".".join(map(str, sys.version_info[:3]))
    assert machine["redis"].startswith("7.")
    assert report["quick"] is True
    assert report["command"] == "python -m benchmarks.report --quick"
    assert "shares" in report["caveat"]
    assert report["seconds"] > 0


def test_every_installed_contender_is_measured_against_the_in_run_baseline(
    report: dict[str, Any],
) -> None:
    present, missing = contenders()
    appends = report["appends"]
    assert appends["baseline"] == "raw_rpush"
    assert list(appends["rows"]) == [c.name for c in present]
    assert report["missing"] == missing
    base = appends["rows"]["raw_rpush"]
    for row in appends["rows"].values():
        assert _positive(row["msgs_per_s"])
        assert _positive(row["p99_ms"])
        assert len(row["rounds_msgs_per_s"]) == report["rounds"]
        assert row["rate_ratio"] == pytest.approx(row["msgs_per_s"] / base["msgs_per_s"], 0.01)
        assert row["p99_ratio"] == pytest.approx(row["p99_ms"] / base["p99_ms"], 0.01)
    assert base["rate_ratio"] == 1.0


def test_reads_footprint_flushes_and_cluster_sections(report: dict[str, Any]) -> None:
    reads = report["reads"]["rows"]
    assert [r["messages"] for r in reads] == [50, 500]
    assert reads[0]["ratio_to_smallest"] == 1.0
    for row in reads:
        assert _positive(row["compozy_p50_ms"])
        assert _positive(row["raw_lrange_p50_ms"])

    footprint = report["footprint"]
    assert footprint["json_payload_bytes_per_message"] > 1000  # ~300-token messages
    for name, row in footprint["rows"].items():
        assert row["keys"] >= 1, name
        assert _positive(row["bytes_per_message"]), name
        # Every store holds at least the text it was given.
        assert row["ratio_to_json_payload"] > 0.9, name
    assert footprint["rows"]["spec_lock"]["read_p50_ms"] is None
    assert footprint["rows"]["compozy"]["read_ratio_to_baseline"] > 0

    flushes = report["flushes"]["rows"]
    assert list(flushes) == ["no flush", "compozy", "lock held across flush"]
    assert flushes["no flush"]["p99_ratio_to_no_flush"] == 1.0

    cluster = report["cluster"]["rows"]
    for name in ("raw_rpush", "compozy"):
        row = cluster[name]
        assert row["cluster_rate_ratio"] == pytest.approx(
            row["cluster_msgs_per_s"] / row["standalone_msgs_per_s"], 0.01
        )
    assert _positive(cluster["compozy_read"]["cluster_ms"])


def test_the_markdown_has_every_table_and_links_every_chart(
    report: dict[str, Any], report_dir: Path
) -> None:
    text = (report_dir / "README.md").read_text()
    assert "figures mean nothing" in text  # a quick run says so
    assert f"Redis {report['machine']['redis']}" in text
    for row in report["appends"]["rows"].values():
        assert re.search(rf"^\| {re.escape(row['label'])} \| [\d,]+ \| [\d.]+x \|", text, re.M)
    linked = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text))
    assert linked == set(CHARTS.values())


def test_the_charts_are_png_images(report_dir: Path) -> None:
    for name in CHARTS.values():
        data = (report_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        width, height = struct.unpack(">II", data[16:24])
        assert width >= 300, (name, width)
        assert height >= 150, (name, height)


def test_a_full_run_rewrites_only_the_summary_between_the_readme_markers(
    report: dict[str, Any], tmp_path: Path
) -> None:
    readme = tmp_path / "README.md"
    before, after = "# Title\n\ntext before\n\n", "\n\n## Next\ntext after\n"
    readme.write_text(f"{before}{README_START}\nstale table\n{README_END}{after}")
    assert update_readme(report, readme)
    text = readme.read_text()
    assert text.startswith(before + README_START)
    assert text.endswith(README_END + after)
    assert "stale table" not in text
    assert f"Redis {report['machine']['redis']}" in text
    assert "| raw RPUSH (baseline) |" in text
    assert f"](benchmarks/{CHARTS['appends']})" in text  # relative to docs/performance.md
    readme.write_text("no markers here\n")
    assert not update_readme(report, readme)
    assert readme.read_text() == "no markers here\n"
