"""How the CLI prints: JSON, tables and lines that show stored data as text, never as commands
to the terminal.

**Stored text is data.** Message text, agent names and keys come from whoever wrote the
memory, so they may carry terminal escapes (an OSC 52 clipboard write, a title change, a clear
screen, a C1 CSI), bidirectional overrides that make text read differently from what it is,
Rich markup (``[red]x[/red]``) or emoji codes (``:smile:``). :func:`visible` shows every
control character as an escape (``\\x1b``, ``\\u202e``) and every table cell and line is
printed as plain text (no markup, no emoji, no highlighting). JSON escapes C0 controls itself;
:meth:`Out.data` also escapes C1 controls, DEL and bidirectional controls (``\\u009b``), which
is the same JSON to a parser.

**Keys are whole.** A key is what an operator copies into the next command, so a table never
cuts one: key columns get the width of their longest key and never wrap; numbers are
right-aligned. A table whose keys cannot fit the terminal is printed as one record a row
instead: the key alone on its line (the terminal wraps it, whole), the other fields under it.
Piped output is plain aligned columns at any width.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "Column",
    "Out",
    "key_column",
    "number_column",
    "safe_json",
    "safe_json_lines",
    "text_column",
    "visible",
]

# C0 and C1 controls, DEL, the line and paragraph separators, and the bidirectional controls
# (embeddings, overrides, isolates, marks) that can make text display as something it is not.
_CONTROL = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_CONTROL}]")
# What a terminal may act on in JSON text: json.dumps escapes C0, but an export writes stored
# envelopes as they are, and one written raw may hold C0 inside a string (not a newline: the
# lines' separator; the export escapes one in an envelope, and json.dumps writes none).
_JSON_UNSAFE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_MULTILINE_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), so printing it
    can change nothing but the characters on screen. ``lines`` keeps newlines and tabs
    (a transcript's layout)."""
    pattern = _MULTILINE_UNSAFE if lines else _UNSAFE
    return pattern.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def safe_json(payload: Any) -> str:
    """``payload`` as one line of JSON (sorted keys, UTF-8) in which no character a terminal
    acts on appears raw."""
    return safe_json_lines(json.dumps(payload, ensure_ascii=False, sort_keys=True))


def safe_json_lines(text: str) -> str:
    """JSON (or JSON Lines) text with the characters JSON leaves raw but a terminal may act
    on written as ``\\uXXXX`` escapes: the same values to any parser (they can only occur
    inside strings)."""
    return _JSON_UNSAFE.sub(_json_escape, text)


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: ``key`` columns are never cut or wrapped, ``number`` columns are
    right-aligned, ``text`` columns wrap."""

    header: str
    kind: Literal["key", "number", "text"] = "text"


def key_column(header: str) -> Column:
    return Column(header, "key")


def number_column(header: str) -> Column:
    return Column(header, "number")


def text_column(header: str) -> Column:
    return Column(header, "text")


class Out:
    """Where a command prints: JSON (stable keys, one document or one object a line), a rich
    table with colour on a terminal, plain aligned columns otherwise."""

    #: Past this many rows a terminal gets plain columns too (a rich table is slow to lay out).
    RICH_ROWS = 2000

    def __init__(self, json_mode: bool = False) -> None:
        self.json = json_mode
        self.console = Console(file=sys.stdout, soft_wrap=True, emoji=False, markup=False)
        self.stderr = Console(file=sys.stderr, soft_wrap=True, emoji=False, markup=False)

    @property
    def tty(self) -> bool:
        return self.console.is_terminal

    def data(self, payload: Any) -> None:
        sys.stdout.write(safe_json(payload) + "\n")

    def line(self, text: str, style: str | None = None) -> None:
        """One line of text (made :func:`visible`), in ``style`` on a terminal."""
        text = visible(text)
        if self.tty and style:
            self.console.print(Text(text, style=style), soft_wrap=True)
        else:
            sys.stdout.write(text + "\n")

    def note(self, text: str) -> None:
        """A message for the operator (stderr), not data."""
        text = visible(text)
        if self.stderr.is_terminal:
            self.stderr.print(Text(text, style="dim"), soft_wrap=True)
        else:
            sys.stderr.write(text + "\n")

    def table(
        self,
        columns: Sequence[Column | str],
        rows: Sequence[Sequence[str]],
        title: str = "",
    ) -> None:
        """``rows`` under ``columns`` (a plain string is a text column); every cell made
        :func:`visible`."""
        cols = [c if isinstance(c, Column) else Column(c) for c in columns]
        cells = [[visible(str(v)) for v in row] for row in rows]
        if not self.tty or len(cells) > self.RICH_ROWS:
            self._plain(cols, cells)
            return
        if title:  # a line of its own: a table title would wrap a long key inside it
            self.console.print(Text(visible(title), style="italic"), soft_wrap=True)
        if _fits(cols, cells, self.console.width):
            self.console.print(_rich_table(cols, cells))
        else:
            self._records(cols, cells)

    def _plain(self, cols: list[Column], cells: list[list[str]]) -> None:
        widths = [max([len(c.header), *(len(r[i]) for r in cells)]) for i, c in enumerate(cols)]
        write = sys.stdout.write
        write("  ".join(c.header.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
        write("\n")
        for row in cells:
            parts = (
                v.rjust(w) if c.kind == "number" else v.ljust(w)
                for c, v, w in zip(cols, row, widths, strict=True)
            )
            write("  ".join(parts).rstrip() + "\n")

    def _records(self, cols: list[Column], cells: list[list[str]]) -> None:
        """One record a row: the first key alone on its line, other keys each on a line of
        their own, then the other fields; nothing is cut (the terminal wraps a long key)."""
        first = next(i for i, c in enumerate(cols) if c.kind == "key")
        print_ = self.console.print
        for row in cells:
            print_(Text(row[first], style="bold"), soft_wrap=True)
            for i, col in enumerate(cols):
                if col.kind == "key" and i != first:
                    print_(Text.assemble("  ", (col.header, "cyan"), " ", row[i]), soft_wrap=True)
            fields = [
                Text.assemble((col.header, "cyan"), " ", row[i])
                for i, col in enumerate(cols)
                if col.kind != "key"
            ]
            print_(Text("  ").append_text(Text("   ").join(fields)))


def _fits(cols: list[Column], cells: list[list[str]], width: int) -> bool:
    """Whether a boxed table can show every key whole and every number on one line."""
    need = 3 * len(cols) + 1  # a border and two spaces of padding a column, one border more
    for i, col in enumerate(cols):
        values = [row[i] for row in cells]
        if col.kind == "text":  # wraps at spaces: its longest word
            words = [w for v in [col.header, *values] for w in v.split()]
            need += max((len(w) for w in words), default=1)
        else:
            need += max(len(v) for v in [col.header, *values])
    return need <= width


def _rich_table(cols: list[Column], cells: list[list[str]]) -> Table:
    table = Table(header_style="bold cyan")
    for i, col in enumerate(cols):
        if col.kind == "key":
            widest = max([len(col.header), *(len(row[i]) for row in cells)])
            table.add_column(Text(col.header), no_wrap=True, min_width=widest)
        elif col.kind == "number":
            table.add_column(Text(col.header), justify="right", no_wrap=True)
        else:
            table.add_column(Text(col.header), overflow="fold")
    for row in cells:
        table.add_row(*(Text(v) for v in row))
    return table
