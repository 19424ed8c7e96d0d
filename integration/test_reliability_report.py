"""RELIABILITY.md's checks: an issue's item without a row, or a row with a lost or duplicated
count where the promise is absolute, fails ``scripts/reliability``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from integration.reliability_report import ISSUES, main
from reliability_rows import Row

ITEMS = ISSUES["adversarial-2"]


def row(item: int, *, lost: int = 0, group: str = "adversarial-2", promise: str = "p") -> Row:
    return Row(
        fault=f"attack {item}",
        engine="valkey",
        promise=promise,
        operations=3,
        acknowledged=2,
        lost=lost,
        duplicated=0,
        observed="seen",
        command=f"./scripts/test 'test_{item}'",
        group=group,
        item=item,
    )


def report(tmp_path: Path, rows: list[Row]) -> tuple[int, str]:
    folder = tmp_path / "rows"
    folder.mkdir()
    for n, r in enumerate(rows):
        (folder / f"{n}.json").write_text(json.dumps(asdict(r)))
    out = tmp_path / "RELIABILITY.md"
    return main(folder, out), out.read_text()


def test_every_item_with_a_clean_row_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    every = [row(n, group=group) for group, items in ISSUES.items() for n in items]
    code, text = report(tmp_path, every)
    assert code == 0
    assert f"{len(ITEMS)} of the issue's {len(ITEMS)} items have a row" in text
    assert "## Second adversarial run (issue 23)" in text
    table = [line for line in text.splitlines() if line.startswith("| ")][1:]
    firsts = [line.split(" | ")[0] for line in table if not line.startswith("| Item ")]
    assert firsts == [f"| {n}. {items[n]}" for items in ISSUES.values() for n in items]
    assert "0 items without a row" in capsys.readouterr().out


def test_an_item_without_a_row_fails(tmp_path: Path) -> None:
    others = [row(n, group=g) for g, items in ISSUES.items() if g != "adversarial-2" for n in items]
    code, text = report(tmp_path, [*(row(n) for n in ITEMS if n != 9), *others])
    assert code == 1
    assert "no row for items [9]" in text


def test_a_lost_count_breaks_an_issue_row_whatever_its_promise(tmp_path: Path) -> None:
    rows = [row(n, lost=int(n == 4)) for n in ITEMS]
    rows.append(row(0, group="adversarial", promise="nothing lost", lost=0))
    code, text = report(tmp_path, rows)
    assert code == 1
    assert "of which broken: **1**." in text  # the issue's line
    assert 'Rows promising "nothing lost": 1, of which broken: **0**.' in text
