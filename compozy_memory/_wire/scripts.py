"""The Lua scripts as checked units: loaded from ``lua/``, their contracts parsed from headers.

Each operation lives in ``lua/<name>.lua``, or in its feature's folder
(``lua/search/index_add.lua``), and opens with a header the loader reads::

    #!lua
    -- append.lua: store one or many messages ...
    -- KEYS: msgs meta archive summaries dedupe
    -- ARGV: ttl_ms max_tokens dedupe_key n messages...
    -- USES: batch dedupe meta

``KEYS`` names the memory's keys the script touches, always in one order (:data:`KEY_ORDER`);
``ARGV`` names its arguments, the last one variadic when it ends in ``...``; ``USES`` names
the helper files it calls (each of those names its own): the shared ones of ``lua/lib/``, or
its feature's of ``lua/<feature>/lib/`` (``lua/search/lib/segments.lua``); a helper's name is
unique across all of them, a shared helper uses only shared ones, and a feature's script or
helper uses no other feature's. Redis scripts cannot
include one another, so the loader builds each script's source as: its shebang, the limits of
:mod:`compozy_memory._model.limits` as ``local`` lines, the helper files it uses and theirs
(each once, dependencies first), locals naming the declared keys (``k_msgs``, and ``K``, a
table of them by name) and arguments (``a_ttl_ms``, and ``ARGS_FROM`` where the variadic part
starts), then the body. The Functions library holds every helper file once and every script
as a function.

A body that indexes ``KEYS``/``ARGV`` by number, a header that does not follow the one key
order, or a script or helper that calls a helper it does not declare (or declares one it does
not call) is refused when the script loads, so a header cannot drift from the code, and
:class:`Contract` checks every call the gateway makes against it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeAlias

from compozy_memory._model.limits import LUA_CONSTANTS
from compozy_memory._wire.contracts import KEY_ORDER, Contract, ScriptArg, parse_contract

__all__ = [
    "KEY_ORDER",
    "LUA_MAX_LOCALS",
    "SCRIPT_NAMES",
    "Args",
    "Contract",
    "Helper",
    "Keys",
    "Library",
    "Script",
    "ScriptArg",
    "helpers",
    "library",
    "lua_dir",
    "script",
    "script_path",
]

#: The keys and the arguments of one script call.
Keys: TypeAlias = "Sequence[str]"
Args: TypeAlias = "Sequence[ScriptArg]"

SCRIPT_NAMES = (
    "append",
    "read",
    "health",
    "trim",
    "replace",
    "clear",
    "purge",
    "expire",
    "snapshot",
    "flush_commit",
    "lock_acquire",
    "lock_refresh",
    "lock_release",
    "context",
    "promote",
    "clear_recalled",
    "facts_set",
    "facts_delete",
    "facts_items",
    "result_put",
    "result_release",
    "result_touch",
    "session_touch",
    "sessions_list",
    "sessions_forget",
    "transcript",
    "import",
    "index_pending",
    "index_add",
    "index_read",
    "index_merge",
    "index_put",
    "index_gc",
    "index_reset",
    "vec_pending",
    "vec_apply",
    "vec_reset",
    "search_candidates",
    "search_fetch",
)
_USES_LINE = re.compile(r"^-- USES:(.*)$", re.MULTILINE)
# A helper file's top-level definitions: 'local function name(' and 'local NAME ='.
_DEFINED = re.compile(r"^local (?:function )?([A-Za-z_]\w*)\b", re.MULTILINE)
_NUMBERED = re.compile(r"\b(KEYS|ARGV)\[\s*\d")


def lua_dir() -> Path:
    """The folder of the scripts: ``lua/`` beside the package, or inside an installed one."""
    package = Path(__file__).resolve().parent.parent
    # An installed wheel carries lua/ inside the package; a source checkout has it beside.
    for candidate in (package / "lua", package.parent / "lua"):
        if (candidate / "lib").is_dir():
            return candidate
    raise FileNotFoundError(f"compozy-memory's lua/ scripts are missing beside {package}")


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua operation with its contract, ready to send by SHA or source."""

    name: str
    contract: Contract
    #: The whole EVAL source: shebang, limits, the helpers it uses, named KEYS/ARGV locals,
    #: body.
    source: str
    sha: str
    #: Declared ``flags=no-writes``: may go as EVALSHA_RO/EVAL_RO (and FCALL_RO).
    read_only: bool
    #: The declared locals and the body, without the shared code: what a Functions library
    #: wraps in a function of its own.
    body: str
    #: The helper files the script declares it calls.
    uses: tuple[str, ...] = ()

    @property
    def function(self) -> str:
        """The name of this script's function in the current Functions library."""
        return f"{library().prefix}{self.name}"


def _prelude() -> str:
    return "\n".join(f"local {name} = {value}" for name, value in LUA_CONSTANTS.items())


def _locals(contract: Contract) -> str:
    lines = [f"local k_{key} = KEYS[{i}]" for i, key in enumerate(contract.keys, start=1)]
    lines.append("local K = {" + ", ".join(f"{key} = k_{key}" for key in contract.keys) + "}")
    lines += [f"local a_{arg} = ARGV[{i}]" for i, arg in enumerate(contract.argv, start=1)]
    if contract.variadic is not None:
        lines.append(f"local ARGS_FROM = {len(contract.argv) + 1}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Helper:
    """One helper file (``lua/lib/``, ``lua/<feature>/lib/``): helpers of one concern, and the
    files it calls into."""

    name: str
    uses: tuple[str, ...]
    #: The names it defines at its top level (functions and constants).
    defines: frozenset[str]
    text: str
    #: Its feature's folder ('search'), or '' for a shared helper of ``lua/lib/``.
    feature: str = ""
    #: Where it lives, for messages: ``lua/lib/args.lua``, ``lua/search/lib/segments.lua``.
    where: str = ""


def _features() -> list[Path]:
    """The feature folders of ``lua/`` (``lua/search/``): every folder but the shared lib."""
    return sorted(p for p in lua_dir().iterdir() if p.is_dir() and p.name != "lib")


def script_path(name: str) -> Path:
    """The file of script ``name``: ``lua/<name>.lua`` or ``lua/<feature>/<name>.lua``."""
    found = [
        path
        for path in [lua_dir() / f"{name}.lua"] + [f / f"{name}.lua" for f in _features()]
        if path.is_file()
    ]
    if len(found) != 1:
        where = "no file" if not found else f"{len(found)} files"
        raise FileNotFoundError(f"script {name!r}: {where} of lua/ or lua/<feature>/ has it")
    return found[0]


def _shown(path: Path) -> str:
    return f"lua/{path.relative_to(lua_dir()).as_posix()}"


def _uses(text: str, where: str) -> tuple[str, ...]:
    found = _USES_LINE.findall(text)
    if len(found) != 1:
        raise ValueError(f"{where} needs one '-- USES:' line naming the lua/lib files it calls")
    words = found[0].split()
    return () if words == ["(none)"] else tuple(words)


@cache
def helpers() -> dict[str, Helper]:
    """Every helper file by name (those of ``lua/lib/`` and of each ``lua/<feature>/lib/``),
    dependencies first, each checked: it calls only the helpers it and the files it declares
    define, and calls some of each it declares."""
    paths = [(path, "") for path in (lua_dir() / "lib").glob("*.lua")]
    paths += [(path, f.name) for f in _features() for path in (f / "lib").glob("*.lua")]
    found: dict[str, Helper] = {}
    for path, feature in sorted(paths, key=lambda each: each[0].stem):
        text = path.read_text(encoding="utf-8")
        where = _shown(path)
        if path.stem in found:
            raise ValueError(f"{found[path.stem].where} and {where} have one name")
        found[path.stem] = Helper(
            path.stem, _uses(text, where), frozenset(_DEFINED.findall(text)), text, feature, where
        )
    owner: dict[str, str] = {}
    for helper in found.values():
        for name in helper.defines:
            if name in owner:
                raise ValueError(
                    f"{found[owner[name]].where} and {helper.where} both define {name}"
                )
            owner[name] = helper.name
        unknown = [u for u in helper.uses if u not in found]
        if unknown:
            raise ValueError(f"{helper.where} uses unknown helper files {unknown}")
        _check_reach(helper.where, helper.feature, helper.uses, found)
    ordered: dict[str, Helper] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ValueError(f"lua/lib files use one another in a circle: {' -> '.join(path)}")
        if name in ordered:
            return
        for dependency in found[name].uses:
            visit(dependency, (*path, name))
        ordered[name] = found[name]

    for name in found:
        visit(name, ())
    for helper in ordered.values():
        _check_calls(helper.where, helper.text, helper.uses, ordered, helper.name)
    return ordered


def _check_reach(
    where: str, feature: str, uses: Sequence[str], every: Mapping[str, Helper]
) -> None:
    """A shared file uses only shared helpers; a feature's, those and its own feature's."""
    foreign = [u for u in uses if every[u].feature not in ("", feature)]
    if foreign:
        raise ValueError(f"{where} uses another feature's helpers {foreign}")


def _closure(uses: Sequence[str]) -> list[Helper]:
    """The helper files ``uses`` names and theirs, each once, dependencies first."""
    every = helpers()
    needed: set[str] = set()
    pending = list(uses)
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending += every[name].uses
    return [helper for name, helper in every.items() if name in needed]


# Comments and string literals, which may mention a helper without calling it.
_NOT_CODE = re.compile(r"--[^\n]*|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"")
_IDENTIFIER = re.compile(r"(?<![.:\w])[A-Za-z_]\w*")
_LOCAL_NAMES = re.compile(r"\blocal\s+(?:function\s+)?([\w\s,]+?)(?:=|\(|$)", re.MULTILINE)
_LOOP_NAMES = re.compile(r"\bfor\s+([\w\s,]+?)\s+(?:in\b|=)")
_PARAMETERS = re.compile(r"\bfunction\b[\w\s.:]*\(([^)]*)\)")


def _check_calls(
    where: str, text: str, uses: Sequence[str], every: Mapping[str, Helper], own: str = ""
) -> None:
    code = _NOT_CODE.sub(" ", text)
    shadowed: set[str] = set()
    for pattern in (_LOCAL_NAMES, _LOOP_NAMES, _PARAMETERS):
        for names in pattern.findall(code):
            shadowed |= {n.strip() for n in names.split(",") if n.strip()}
    declared = {name: every[name].defines for name in uses}
    own_names = every[own].defines if own else frozenset()
    reachable = set(own_names).union(*declared.values())
    offered = {n: h.name for h in every.values() for n in h.defines}
    called = {n for n in _IDENTIFIER.findall(code) if n in offered and n not in shadowed}
    called |= own_names & set(_IDENTIFIER.findall(code))
    missing = sorted(n for n in called if n not in reachable)
    if missing:
        files = sorted({offered[n] for n in missing})
        raise ValueError(f"{where} calls {missing} without declaring '-- USES: {' '.join(files)}'")
    idle = [name for name, names in declared.items() if not names & called]
    if idle:
        raise ValueError(f"{where} declares '-- USES: {' '.join(idle)}' but calls none of it")


@cache
def script(name: str) -> Script:
    """The script ``lua/<name>.lua`` (or ``lua/<feature>/<name>.lua``), its header checked
    and its helpers spliced in."""
    path = script_path(name)
    where = _shown(path)
    feature = path.parent.name if path.parent != lua_dir() else ""
    text = path.read_text(encoding="utf-8")
    shebang, newline, rest = text.partition("\n")
    if not shebang.startswith("#!lua"):
        raise ValueError(f"{where} must start with a '#!lua' line")
    contract = parse_contract(name, rest)
    numbered = _NUMBERED.search(rest)
    if numbered is not None:
        raise ValueError(
            f"{where} indexes {numbered.group(1)} by number; use the names its header "
            "declares (k_<key>, a_<arg>, ARGS_FROM)"
        )
    uses = _uses(rest, where)
    unknown = [u for u in uses if u not in helpers()]
    if unknown:
        raise ValueError(f"{where} uses unknown helper files {unknown}")
    _check_reach(where, feature, uses, helpers())
    _check_calls(where, rest, uses, helpers())
    body = f"{_locals(contract)}\n{rest}"
    shared = "".join(f"{helper.text}\n" for helper in _closure(uses))
    source = f"{shebang}{newline}{_prelude()}\n{shared}{body}"
    read_only = "no-writes" in shebang
    sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
    return Script(name, contract, source, sha, read_only, body, uses)


@dataclass(frozen=True, slots=True)
class Library:
    """Every script as one Redis Functions library (``FUNCTION LOAD``).

    The library's name and its functions' names carry a digest of its source, so two versions
    of compozy-memory can share a server while a fleet is upgraded: each calls its own."""

    name: str
    #: Prepended to a script's name to name its function: ``cm_<digest>_append``.
    prefix: str
    source: str


_VERSION_MARK = "@@VERSION@@"
#: The most locals one Lua 5.1 function (a chunk's top level too) may declare.
LUA_MAX_LOCALS = 200


@cache
def library() -> Library:
    """The Functions library holding every script, each wrapped in a function of its own.

    Its top level is one Lua chunk, which may declare at most 200 locals (Lua 5.1's limit,
    :data:`LUA_MAX_LOCALS`): the limits and the helpers' functions are locals, the scripts'
    callbacks are not; ``tests/test_contracts.py`` keeps the count under the limit with room."""
    parts = [f"#!lua name=compozy_memory_{_VERSION_MARK}", _prelude()]
    parts += [helper.text for helper in helpers().values()]
    for name in SCRIPT_NAMES:
        code = script(name)
        flags = ", flags = {'no-writes'}" if code.read_only else ""
        # KEYS and ARGV are the callback's parameters: the body reads them as an EVAL
        # script reads its globals. The callback is anonymous: Lua 5.1 allows a chunk 200
        # locals, and the limits and the helpers' functions already take most of them.
        parts.append(
            f"redis.register_function{{function_name = 'cm_{_VERSION_MARK}_{name}', "
            f"callback = function(KEYS, ARGV)\n{code.body}\nend{flags}}}"
        )
    draft = "\n".join(parts) + "\n"
    digest = hashlib.sha256(draft.encode()).hexdigest()[:12]
    return Library(
        f"compozy_memory_{digest}", f"cm_{digest}_", draft.replace(_VERSION_MARK, digest)
    )
