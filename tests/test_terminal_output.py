"""What the CLI prints on a terminal: stored text shown, never run; keys whole; numbers right."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from compozy_memory._ops.output import (
    Out,
    key_column,
    number_column,
    safe_json,
    safe_json_lines,
    text_column,
    visible,
)

HOSTILE = [
    "\x1b]52;c;cm0gLXJmIH4=\x07",  # OSC 52: write the clipboard
    "\x1b]0;owned\x07",  # set the window title
    "\x1b[2J\x1b[H",  # clear the screen
    "\x9b31m",  # C1 CSI
    "\x9d0;title\x9c",  # C1 OSC ... ST
    "a\rb",  # carriage return: overwrite the line
    "\u202eevil\u202c",  # bidirectional override
    "\x07\x08\x7f",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_control_characters_are_shown_as_escapes(text: str) -> None:
    shown = visible(text)
    assert all(ch.isprintable() for ch in shown), shown
    assert shown.count("\\x") + shown.count("\\u") >= 1


def test_visible_keeps_lines_only_when_asked() -> None:
    assert visible("a\nb\tc") == "a\\x0ab\\x09c"
    assert visible("a\nb\tc\x1b", lines=True) == "a\nb\tc\\x1b"


def test_json_escapes_what_a_terminal_acts_on_and_means_the_same() -> None:
    payload = {"text": "".join(HOSTILE)}
    line = safe_json(payload)
    assert all(ch.isprintable() for ch in line)
    assert json.loads(line) == payload
    lines = json.dumps({"a": "\x9b\u2028"}, ensure_ascii=False) + "\n"
    assert json.loads(safe_json_lines(lines)) == {"a": "\x9b\u2028"}


def terminal(width: int) -> tuple[Out, io.StringIO]:
    out = Out()
    buffer = io.StringIO()
    out.console = Console(
        file=buffer, force_terminal=True, width=width, emoji=False, markup=False, color_system=None
    )
    return out, buffer


KEYS = [
    "customer-support:user:alice-with-a-very-long-identifier-0000000001",
    "customer-support:user:alice-with-a-very-long-identifier-0000000002",
    "customer-support:user:" + "z" * 90,  # wider than the terminal
]
COLUMNS = (
    key_column("KEY"),
    text_column("AGENT"),
    number_column("MESSAGES"),
    number_column("TOKENS"),
    text_column("LAST ACTIVE (UTC)"),
)


@pytest.mark.parametrize("width", [80, 120, 200])
def test_keys_are_never_cut_at_any_width(width: int) -> None:
    out, buffer = terminal(width)
    rows = [(key, "bot", "3", "3702", "2026-11-24 16:23:18") for key in KEYS]
    out.table(COLUMNS, rows, title="project acme")
    screen = buffer.getvalue()
    assert "…" not in screen
    joined = screen.replace("\n", "")  # a key longer than the line wraps, whole
    for key in KEYS:
        assert key in joined


def test_a_table_that_fits_shows_keys_on_one_line_and_numbers_right_aligned() -> None:
    out, buffer = terminal(200)
    out.table(COLUMNS, [(KEYS[0], "bot", "3", "3702", "x"), (KEYS[1], "bot", "12", "9", "y")])
    lines = buffer.getvalue().splitlines()
    assert any(KEYS[0] in line for line in lines)
    row = next(line for line in lines if KEYS[1] in line)
    cells = [c.strip() for c in row.split("│")]
    assert cells[3:5] == ["12", "9"]
    assert row.split("│")[3].endswith("12 ")  # flush right
    assert row.split("│")[4].endswith(" 9 ")


def test_markup_and_emoji_codes_in_data_print_as_they_are() -> None:
    out, buffer = terminal(200)
    out.table(COLUMNS, [("k", "[red]x[/red] :smile: ticket:T-1:", "1", "1", "-")])
    out.line("[bold]y[/bold] :thumbs_up:", style="green")
    screen = buffer.getvalue()
    assert "[red]x[/red] :smile: ticket:T-1:" in screen
    assert "[bold]y[/bold] :thumbs_up:" in screen


def test_hostile_cells_reach_the_screen_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    out, buffer = terminal(200)
    out.table(COLUMNS, [("k", HOSTILE[0], "1", "1", HOSTILE[3])])
    out.line("text " + HOSTILE[1])
    Out().table(COLUMNS, [("k", HOSTILE[2], "1", "1", HOSTILE[6])])  # piped: plain columns
    for screen in (buffer.getvalue(), capsys.readouterr().out):
        assert "\x1b]" not in screen
        assert "\x9b" not in screen
        assert "\u202e" not in screen
        assert "\x1b[2J" not in screen


def test_piped_tables_right_align_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    Out().table(COLUMNS, [(KEYS[0], "bot", "3", "3702", "x"), ("k", "bot", "12", "9", "y")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(KEYS[0] + "  ")
    end = lines[0].index("MESSAGES") + len("MESSAGES")
    assert lines[1][end - 1] == "3"
    assert lines[2][end - 2 : end] == "12"
