"""The benchmark report's parts that need no run: its percentile, and the summary published in
docs/performance.md (integration/test_bench_report.py runs the report itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.report.common import percentile
from benchmarks.report.render import CHARTS, README_END, README_START, readme_section

ROOT = Path(__file__).resolve().parent.parent


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.99) == 100.0
    assert percentile(values, 0.50) == 51.0
    assert percentile([3.0], 0.99) == 3.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def test_the_performance_page_carries_the_published_summary() -> None:
    text = (ROOT / "docs" / "performance.md").read_text()
    start, end = text.index(README_START), text.index(README_END)
    section = text[start:end]
    assert "| raw RPUSH (baseline) |" in section
    assert (ROOT / "docs" / "benchmarks" / CHARTS["appends"]).is_file()
    published = json.loads((ROOT / "docs" / "benchmarks" / "report.json").read_text())
    assert published["quick"] is False
    assert readme_section(published) in text
