"""The parts of ``docs/`` that describe code, written from the code: ``scripts/gen_docs``.

A page holds a generated part between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``; :func:`render` gives what belongs there, read from the code itself:

* ``cli-reference``: every command of ``compozy-memory`` with its arguments and options, from
  the typer application;
* ``lua-scripts`` and ``lua-lib``: the scripts of ``lua/`` and of its feature folders
  (``lua/search/``) and their helpers, from the header each opens with;
* ``wings`` and ``modules``: the package's wings and every module, from their docstrings.

``scripts/gen_docs`` (this file, run by the project's Python) rewrites the parts that changed;
``--check`` only lists them (exit 1), which is what ``tests/test_docs_generated.py`` and
``.ci/run`` run. It reads the repository (``lua/``, ``docs/``), so it is not in the wheel.
"""

from __future__ import annotations

import argparse
import ast
import enum
import re
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PART = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S
)
PACKAGE = ROOT / "compozy_memory"


def first_paragraph(text: str) -> str:
    """The first paragraph of a docstring or header, on one line, in Markdown."""
    lines: list[str] = []
    for line in text.strip().splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    joined = " ".join(lines)
    joined = re.sub(r":\w+:`~?(?:[\w.]+\.)?([\w]+)`", r"`\1`", joined)  # :class:`~a.B` -> `B`
    return joined.replace("``", "`")


def cell(text: str) -> str:
    """Text made safe for one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


# -- lua ---------------------------------------------------------------------------------------


def lua_header(path: Path) -> tuple[str, str, str]:
    """(what the file does, the helpers its USES line names, its flags) from its header."""
    lines = path.read_text().splitlines()
    flags = lines[0][len("#!lua") :].strip() if lines[0].startswith("#!lua") else ""
    comments = [line for line in lines if not line.startswith("#!")]
    described: list[str] = []
    uses = ""
    for line in comments:
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        if body.startswith("USES:"):
            uses = body[len("USES:") :].strip()
            break
        if not body:
            break
        described.append(body)
    text = " ".join(described)
    name = path.relative_to(ROOT / "lua").as_posix()
    # A header names its file from its feature's folder: 'lib/deltas.lua' in lua/, and
    # 'index_add.lua', 'lib/segments.lua' in lua/search/.
    parts = path.relative_to(ROOT / "lua").parts
    own = "/".join(parts[1:] if len(parts) > 1 and parts[0] != "lib" else parts)
    prefix = f"{own}:"
    if not text.startswith(prefix):
        raise ValueError(f"lua/{name} does not open with '-- {prefix} what it does'")
    return text[len(prefix) :].strip(), "" if uses == "(none)" else uses, flags


def lua_table(paths: list[Path], *, scripts: bool) -> str:
    rows = ["| file | what it does | uses |", "| --- | --- | --- |"]
    if scripts:
        rows = ["| script | what it does | uses | writes |", "| --- | --- | --- | --- |"]
    for path in paths:
        what, uses, flags = lua_header(path)
        name = path.relative_to(ROOT / "lua").as_posix()
        helpers = ", ".join(f"`{u}`" for u in uses.split())
        row = f"| `{name}` | {cell(what)} | {helpers} |"
        if scripts:
            row += " no |" if "no-writes" in flags else " yes |"
        rows.append(row)
    return "\n".join(rows) + "\n"


def lua_scripts() -> str:
    """The scripts: those of ``lua/`` and of each feature's folder (``lua/search/``)."""
    paths = [p for p in (ROOT / "lua").rglob("*.lua") if "lib" not in p.parent.parts]
    return lua_table(
        sorted(paths, key=lambda p: p.relative_to(ROOT / "lua").as_posix()), scripts=True
    )


def lua_lib() -> str:
    """The helpers: the shared ones of ``lua/lib/``, then each feature's (``lua/search/lib/``)."""
    paths = [p for p in (ROOT / "lua").rglob("*.lua") if p.parent.name == "lib"]
    return lua_table(
        sorted(paths, key=lambda p: p.relative_to(ROOT / "lua").as_posix()), scripts=False
    )


# -- modules -----------------------------------------------------------------------------------


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def wing_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return f"{relative.parts[0]}/" if len(relative.parts) > 1 else relative.name


def module_files() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" not in path.parts and path.name != "__main__.py":
            yield path


def wings() -> str:
    grouped: dict[str, list[Path]] = {}
    for path in module_files():
        grouped.setdefault(wing_of(path), []).append(path)
    rows = ["| wing | what it is | modules |", "| --- | --- | --- |"]
    order = sorted(
        grouped.items(), key=lambda item: (item[0] != "__init__.py", item[0].lstrip("_"))
    )
    for wing, paths in order:
        main = PACKAGE / wing / "__init__.py" if wing.endswith("/") else PACKAGE / wing
        # A sub-package's modules by their dotted path inside the wing (``runtime.indexer``).
        names = (
            [
                ".".join(p.relative_to(PACKAGE / wing).with_suffix("").parts)
                for p in paths
                if p.name != "__init__.py"
            ]
            if wing.endswith("/")
            else []
        )
        listed = ", ".join(f"`{n}`" for n in names)
        rows.append(f"| `{wing}` | {cell(first_paragraph(docstring(main)))} | {listed} |")
    return "\n".join(rows) + "\n"


def modules() -> str:
    rows = ["| module | what it is |", "| --- | --- |"]
    for path in module_files():
        if path.name == "__init__.py" and path.parent != PACKAGE:
            continue
        name = path.relative_to(ROOT).as_posix()
        rows.append(f"| `{name}` | {cell(first_paragraph(docstring(path)))} |")
    return "\n".join(rows) + "\n"


# -- the command line --------------------------------------------------------------------------


def metavar(param: Any) -> str:
    annotation = param.type_descriptor.annotation
    if typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "|".join(str(member.value) for member in annotation)
    names = {str: "TEXT", int: "INTEGER", float: "NUMBER", bool: ""}
    return names.get(annotation, str(getattr(annotation, "__name__", annotation)).upper())


def option_row(param: Any) -> str:
    spelled = " / ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    shown = metavar(param)
    if shown and not param.is_flag:
        spelled += f" {shown}"
    notes: list[str] = []
    if param.required:
        notes.append("required")
    default = param.default
    if param.multiple:
        notes.append("repeatable")
    elif default not in (None, False, "", ()) and not callable(default):
        value = default.value if isinstance(default, enum.Enum) else default
        notes.append(f"default `{value}`")
    if param.envvar:
        notes.append(f"env `${param.envvar}`")
    help_text = cell(" ".join((param.help or "").split()))
    return f"| {spelled} | {help_text} | {', '.join(notes)} |"


def argument_name(param: Any) -> str:
    name: str = param.name.upper()
    name = f"{name}..." if param.nargs == -1 else name
    return name if param.required else f"[{name}]"


def command_section(prog: str, command: Any) -> list[str]:
    arguments = [p for p in command.params if type(p).__name__.endswith("Argument")]
    options = [p for p in command.params if p not in arguments and not p.hidden]
    usage = " ".join([prog, "[OPTIONS]", *(argument_name(p) for p in arguments)])
    lines = [f"```text\n{usage}\n```", ""]
    help_text = (command.help or "").strip()
    if help_text:
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", help_text)]
        lines += ["\n\n".join(paragraphs), ""]
    if arguments:
        lines += ["| argument | what it is |", "| --- | --- |"]
        lines += [f"| `{argument_name(p)}` | {cell(p.help or '')} |" for p in arguments]
        lines.append("")
    lines += ["| option | what it does | notes |", "| --- | --- | --- |"]
    lines += [option_row(p) for p in options]
    lines += ["| `-h` / `--help` | show the command's help and exit | |", ""]
    return lines


def cli_reference() -> str:
    import typer

    from compozy_memory._ops.cli import app

    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    lines = [
        "`compozy-memory [GLOBAL OPTIONS] COMMAND [OPTIONS] [ARGUMENTS]`: the global options go",
        "before the command.",
        "",
        "## Global options",
        "",
        "| option | what it does | notes |",
        "| --- | --- | --- |",
        *(option_row(p) for p in group.params if not getattr(p, "hidden", False)),
        "",
        "## Commands",
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    commands = {n: c for n, c in group.commands.items() if not c.hidden}
    for name, command in commands.items():
        summary = first_paragraph(command.help or "").split(". ")[0].rstrip(".")
        lines.append(f"| [`{name}`](#{name}) | {cell(summary)} |")
    lines.append("")
    for name, command in commands.items():
        lines += [f"### {name}", "", *command_section(f"compozy-memory {name}", command)]
    return "\n".join(lines).rstrip() + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "cli-reference": cli_reference,
    "lua-scripts": lua_scripts,
    "lua-lib": lua_lib,
    "wings": wings,
    "modules": modules,
}


def render(name: str) -> str:
    """What belongs in the generated part ``name``."""
    if name not in GENERATORS:
        raise KeyError(f"no generator for '<!-- generated: {name} -->' (known: {list(GENERATORS)})")
    return GENERATORS[name]()


def regenerate(text: str) -> str:
    return PART.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def stale() -> list[Path]:
    """The pages whose generated parts differ from what the code gives now."""
    return [page for page in pages() if regenerate(page.read_text()) != page.read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=first_paragraph(__doc__ or ""))
    parser.add_argument("--check", action="store_true", help="list stale pages, change nothing")
    args = parser.parse_args(argv)
    found = stale()
    for page in found:
        if args.check:
            print(f"stale: {page.relative_to(ROOT)} (run scripts/gen_docs)", file=sys.stderr)
        else:
            page.write_text(regenerate(page.read_text()))
            print(f"wrote {page.relative_to(ROOT)}")
    return 1 if args.check and found else 0


if __name__ == "__main__":
    raise SystemExit(main())
