"""Every code block of README.md and docs/ is run or checked, or marked as not run, with a reason.

- ``python``: a whole program runs as a script (from the repository's root, with the
  Anthropic client pointed at ``examples/stub_messages_api.py`` through the environment); a
  block defining ``test_`` functions runs under pytest; a fragment marked
  ``<!-- runs-with: NAME ... -->`` runs with those names given (``client``, ``memory``,
  ``manager``, ``system_prompt``, ``text``) and top-level ``await`` allowed. A ``text`` block
  marked ``<!-- prints -->`` right after a program or fragment is what it prints, exactly.
- ``yaml``: a project (``project:``) or memory resource (``resource:``) is loaded by the
  project loader, the memory's other settings too, merged into a small memory resource (a
  block naming one setting several times shows alternatives: each is loaded alone); any
  other YAML is parsed.
- ``bash`` and ``console`` (the ``$`` lines): each command's program exists: scripts of the
  repository, make targets, pip extras, ``compozy-memory`` subcommands registered in the CLI,
  python files and modules, compose services. Nothing long-running is started;
  ``compozy-memory validate`` and ``acl`` are run and the output shown must be theirs.
- ``lua``: an extract of a file in lua/.
- ``text``: not code (the usage lines of the generated CLI reference, say: those are
  checked by ``tests/test_docs_generated.py``). A block with no language, or another one,
  fails unless marked ``<!-- not-run: REASON -->``, which skips it with that reason.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from compozy_memory import MemoryInstance, MemoryManager, MemoryRegistry, MemoryResource, connect
from compozy_memory._config.loader import load_project
from compozy_memory.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```\s*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*(not-run|runs-with|prints):?\s*(.*?)\s*-->\s*$")
GIVEN = {"client", "memory", "manager", "system_prompt", "text"}
# Programs from outside the repository that the README may name.
EXTERNAL = {"apt-get", "git", "curl", "docker"}
RUN_AND_COMPARE = {"validate", "acl", "render-key"}  # offline, quick, and their output is shown
SUPPORT_CLAUDE = """\
resource: memory
id: support-claude
type: token_based
max_tokens: 4000
tokenizer:
  model: claude-sonnet-4-5
  method: anthropic_api
  timeout: 2s
"""


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int
    lang: str
    code: str
    marker: str | None  # not-run, runs-with, prints
    argument: str
    prints: str | None = None  # the next block, when it is marked prints

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        if self.marker == "not-run":
            return "not-run"
        if self.marker == "prints":
            return "prints"
        if self.lang == "python":
            if self.marker == "runs-with":
                return "python fragment"
            return (
                "python pytest" if re.search(r"^(async )?def test_", self.code, re.M) else "python"
            )
        if self.lang in ("bash", "sh", "shell"):
            return "shell"
        if self.lang == "console" or (not self.lang and "\n$ " in f"\n{self.code}"):
            return "console"
        if self.lang in ("yaml", "lua", "text"):
            return self.lang
        return "unmarked"


def page_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found: list[Block] = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        block = Block(
            page=page.relative_to(ROOT).as_posix(),
            line=text.count("\n", 0, match.start()) + 1,
            lang=match.group(1),
            code=match.group(2),
            marker=marker.group(1) if marker else None,
            argument=marker.group(2) if marker else "",
        )
        if block.marker == "prints" and found and found[-1].lang == "python":
            found[-1] = replace(found[-1], prints=block.code)
        found.append(block)
    return found


def blocks() -> list[Block]:
    return [block for page in PAGES for block in page_blocks(page)]


BLOCKS = blocks()


def block_id(block: Block) -> str:
    return f"{block.page}:L{block.line}-{block.kind.replace(' ', '-')}"


def test_every_block_is_run_checked_or_marked() -> None:
    kinds = Counter(b.kind for b in BLOCKS)
    table = ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items()))
    ran = sum(n for k, n in kinds.items() if k.startswith("python"))
    checked = sum(n for k, n in kinds.items() if k in ("shell", "console", "yaml", "lua", "prints"))
    skipped = kinds["not-run"] + kinds["text"]
    print(
        f"\n{len(PAGES)} pages, {len(BLOCKS)} blocks; ran {ran}, checked {checked}, "
        f"not code {skipped} ({table})"
    )
    unmarked = [f"{b.where} ({b.lang or 'no language'})" for b in BLOCKS if b.kind == "unmarked"]
    assert not unmarked, f"label these text or console, or mark them not-run: {unmarked}"
    assert len(BLOCKS) >= 40, table  # the fences are found
    assert ran >= 9, table
    assert kinds["prints"] >= 3, table
    readme = [b for b in BLOCKS if b.page == "README.md"]
    assert any(b.kind == "python" and b.prints for b in readme), "the README's example"


def test_a_prints_block_follows_the_python_that_prints_it() -> None:
    for before, block in itertools.pairwise(BLOCKS):
        if block.kind == "prints":
            assert block.lang == "text", f"{block.where}: a prints block is text"
            assert before.page == block.page, f"{block.where}: <!-- prints --> after no block"
            assert before.kind.startswith("python"), f"{block.where}: after no python block"
            assert before.prints == block.code


# -- python ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    """The example's stub Messages API, served from a thread of this process."""
    spec = importlib.util.spec_from_file_location(
        "readme_stub", ROOT / "examples" / "stub_messages_api.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.serve("127.0.0.1", 0, 10)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def stub_env(stub: str) -> dict[str, str]:
    return {**os.environ, "ANTHROPIC_BASE_URL": stub, "ANTHROPIC_API_KEY": "stub"}


def run_python(args: list[str], cwd: Path, stub: str) -> subprocess.CompletedProcess[str]:
    """This Python on ``args``, its Anthropic client pointed at the stub."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=stub_env(stub),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.kind == "python"], ids=block_id
)  # fmt: skip
def test_python_programs_run(block: Block, stub: str, tmp_path: Path) -> None:
    script = tmp_path / f"docs_{block.line}.py"
    script.write_text(block.code)
    done = run_python([str(script)], ROOT, stub)
    assert done.returncode == 0, done.stdout + done.stderr
    if block.prints is not None:
        assert done.stdout == block.prints, f"{block.where} prints:\n{done.stdout}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "python pytest"], ids=block_id)
def test_python_tests_pass_under_pytest(block: Block, stub: str, tmp_path: Path) -> None:
    (tmp_path / "test_readme_block.py").write_text(block.code)
    # cwd: no project configuration, what a user with none gets
    done = run_python(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)], tmp_path, stub
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tests = len(re.findall(r"^(async )?def test_", block.code, re.M))
    assert f"{tests} passed" in done.stdout, done.stdout


@pytest.fixture
async def given(
    valkey_server: EmbeddedServer,
    stub: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[dict[str, Any]]:
    """The names a fragment may use; cwd is the repository (paths are as in the README)."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", stub)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "stub")
    monkeypatch.chdir(ROOT)
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "project", project)
    (project / "memory" / "support-claude.yaml").write_text(SUPPORT_CLAUDE)
    client = connect(valkey_server.url)
    manager = MemoryManager(MemoryRegistry.load(project), client)
    memory = MemoryInstance.open(client, project="readme", key=f"readme-{uuid.uuid4().hex}")
    try:
        yield {
            "client": client,
            "manager": manager,
            "memory": memory,
            "system_prompt": "You are a support agent.",
            "text": "My order #1042 arrived damaged.",
        }
    finally:
        await manager.aclose()
        await client.aclose()


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.kind == "python fragment"], ids=block_id
)  # fmt: skip
async def test_python_fragments_run_with_what_they_name(
    block: Block, given: dict[str, Any]
) -> None:
    names = set(block.argument.split())
    assert names <= GIVEN, f"{block.where}: runs-with names {names - GIVEN}"
    namespace = {"__name__": f"docs_{block.line}", **{n: given[n] for n in names}}
    code = compile(block.code, block.where, "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = eval(code, namespace)  # noqa: S307 (the documentation's own code)
        if result is not None:
            await result
    if block.prints is not None:
        assert printed.getvalue() == block.prints, f"{block.where} prints:\n{printed.getvalue()}"
    # A fragment names every outside value it uses: it was given nothing else.
    tree = ast.parse(block.code)
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.ctx != ast.Load()}
    unknown = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id in GIVEN - names - assigned
    }
    assert not unknown, f"{block.where}: add {unknown} to runs-with"


# -- yaml --------------------------------------------------------------------------------------

BASE_MEMORY = {"resource": "memory", "id": "readme", "type": "token_based", "max_tokens": 4000}


def alternatives(code: str) -> list[str]:
    """A block naming one top-level setting several times: one document per occurrence."""
    parts: list[list[str]] = []
    for line in code.splitlines():
        if re.match(r"[A-Za-z_]", line) or not parts:
            parts.append([])
        parts[-1].append(line)
    keys = [p[0].split(":", 1)[0] for p in parts if re.match(r"[A-Za-z_]", p[0])]
    if len(keys) == len(set(keys)):
        return [code]
    return ["\n".join(p) + "\n" for p in parts]


def load_in_project(tmp_path: Path, main: str, memories: dict[str, str]) -> None:
    (tmp_path / "memory").mkdir(parents=True, exist_ok=True)
    (tmp_path / "compozy.yaml").write_text(main)
    for name, text in memories.items():
        (tmp_path / "memory" / name).write_text(text)
    load_project(tmp_path)  # raises ConfigFileError naming every problem


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "yaml"], ids=block_id)
def test_yaml_blocks_load(block: Block, tmp_path: Path) -> None:
    data = yaml.safe_load(block.code)
    assert isinstance(data, dict), f"{block.where}: not a mapping"
    examples = ROOT / "examples" / "project" / "memory"
    if "project" in data:
        load_in_project(tmp_path, block.code, {p.name: p.read_text() for p in examples.iterdir()})
    elif "resource" in data:
        load_in_project(tmp_path, "project: readme\n", {"block.yaml": block.code})
    elif set(data) <= set(MemoryResource.model_fields):
        for n, alternative in enumerate(alternatives(block.code)):
            memory = {**BASE_MEMORY, **yaml.safe_load(alternative)}
            load_in_project(tmp_path / str(n), "project: readme\n", {"m.yaml": yaml.dump(memory)})


# -- shell -------------------------------------------------------------------------------------


@cache
def cli_has(subcommand: str) -> bool:
    """``compozy-memory SUBCOMMAND --help`` succeeds: the subcommand is registered."""
    done = subprocess.run(
        [*cli(), subcommand, "--help"], capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


def cli() -> list[str]:
    script = Path(sys.executable).parent / "compozy-memory"
    found = str(script) if script.is_file() else shutil.which("compozy-memory")
    assert found is not None, "the compozy-memory console script is not installed"
    return [found]


@cache
def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def check_command(words: list[str]) -> None:
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words = words[1:]  # VAR=value before the program
    program, args = words[0], words[1:]
    if "/" in program:
        path = ROOT / program
        assert path.is_file(), f"{program}: no such file in the repository"
        assert os.access(path, os.X_OK), f"{program}: not executable"
    elif program == "compozy-memory":
        subcommand = next((a for a in args if not a.startswith("-")), "--help")
        assert cli_has(subcommand), f"compozy-memory {subcommand}: not a registered subcommand"
    elif program == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        assert set(args) <= targets, f"make: no targets {set(args) - targets}"
    elif program == "pip":
        assert args[0] == "install"
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]
        for requirement in (a for a in args[1:] if not a.startswith("-")):
            match = re.fullmatch(r"compozy-memory(?:\[([\w,-]+)\])?", requirement)
            assert match, f"pip install {requirement}: not this package"
            for extra in (match.group(1) or "").split(",") if match.group(1) else []:
                assert extra in extras, f"pip install: no extra {extra!r}"
    elif program in ("python", "python3"):
        if args[0] == "-m":
            assert importlib.util.find_spec(args[1]) is not None, f"python -m {args[1]}"
        else:
            assert (ROOT / args[0]).is_file(), f"python {args[0]}: no such file"
    elif program == "docker" and args[:1] == ["compose"]:
        services = compose_services()
        for option, value in itertools.pairwise(args):
            if option == "--scale":
                assert value.split("=")[0] in services, f"--scale {value}"
            if option == "--profile":
                assert any(value in s.get("profiles", []) for s in services.values()), value
        named = [a for a in args[args.index("up") + 1 :] if not a.startswith("-")]
        flagged = {v for o, v in itertools.pairwise(args) if o in ("--scale", "--profile")}
        assert set(named) - flagged <= set(services), f"docker compose: {named}"
    else:
        assert program in EXTERNAL, f"{program}: neither in the repository nor a known tool"


def commands(lines: list[str]) -> Iterator[list[str]]:
    joined = "\n".join(lines).replace("\\\n", " ")
    for line in joined.splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            words = shlex.split(part, comments=True)
            if words:
                yield words


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "shell"], ids=block_id)
def test_shell_blocks_name_programs_that_exist(block: Block) -> None:
    found = list(commands(block.code.splitlines()))
    assert found, f"{block.where}: no command"
    for words in found:
        check_command(words)


def transcript(code: str) -> list[tuple[str, list[str]]]:
    """``(command, output lines)`` of a console block."""
    runs: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            runs.append((line[2:], []))
        elif runs:
            runs[-1][1].append(line)
    return runs


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "console"], ids=block_id)
def test_console_blocks_show_real_commands(block: Block) -> None:
    runs = transcript(block.code)
    assert runs, f"{block.where}: no $ line"
    for command, shown in runs:
        (words,) = commands([command])
        check_command(words)
        paths = [a for a in words[2:] if not a.startswith("-") and "/" in a]
        if (
            words[0] == "compozy-memory"
            and words[1] in RUN_AND_COMPARE
            and all((ROOT / p).exists() for p in paths)
            and not any(a in ("broken-project",) for a in words)
        ):
            done = subprocess.run(
                [*cli(), *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
            )
            printed = {line.rstrip() for line in (done.stdout + done.stderr).splitlines()}
            missing = [
                s for s in shown if s.strip() not in ("", "...") and s.rstrip() not in printed
            ]
            assert not missing, f"{block.where}: `{command}` does not print {missing}"


# -- lua ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "lua"], ids=block_id)
def test_lua_blocks_are_extracts_of_the_scripts(block: Block) -> None:
    sources = [p.read_text() for p in (ROOT / "lua").rglob("*.lua")]
    assert any(block.code in source for source in sources), f"{block.where}: not in lua/"


def test_a_block_not_run_says_why() -> None:
    for block in (b for b in BLOCKS if b.kind == "not-run"):
        assert block.argument, f"{block.where}: not-run needs a reason"
        print(f"{block.where}: not run: {block.argument}")
