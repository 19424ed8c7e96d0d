"""The package's import graph: one-way layers, no cycles, no private names across modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "compozy_memory"

# Lower wings never import higher ones: data flows manager -> store -> wire -> Lua.
RANK = {
    "errors": 0,
    "_model": 1,
    "_metrics": 1,
    "_telemetry": 1,
    "embedded": 1,
    "_search": 2,
    "_wire": 3,
    "_store": 4,
    "_flush": 5,
    "_config": 5,
    "_context": 6,
    "_manager": 7,
    "_manager_base": 7,
    "_sync_manager": 7,
    # The operator's tools sit beside the adapters: `import` reads the frameworks' histories
    # through the adapters' converters (from_item, from_langchain, from_llama_index).
    "_ops": 9,
    "adapters": 9,
    "testing": 9,
    "__init__": 10,
}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def wing(module: str) -> str:
    return module.split(".")[0]


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported from the package, names imported) for every import in ``path``,
    those under ``if TYPE_CHECKING:`` and inside functions included."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "compozy_memory":
                out += [(alias.name, []) for alias in node.names]
            elif node.module.startswith("compozy_memory."):
                out.append(
                    (node.module.removeprefix("compozy_memory."), [a.name for a in node.names])
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("compozy_memory."):
                    out.append((alias.name.removeprefix("compozy_memory."), []))
    return out


def test_lower_wings_never_import_higher_ones() -> None:
    known = modules()
    problems = []
    for module, path in known.items():
        if module == "":
            continue
        for target, _ in imports(path):
            if target not in known and target.rsplit(".", 1)[0] in known:
                target = target.rsplit(".", 1)[0]  # `from compozy_memory._wire import scripts`
            if RANK[wing(target)] > RANK[wing(module)]:
                problems.append(f"{module} imports {target}")
    assert problems == []


def test_there_is_no_import_cycle() -> None:
    known = modules()
    graph = {
        module: {t for t, _ in imports(path) if t in known and t != module}
        for module, path in known.items()
    }
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(module: str, trail: list[str]) -> bool:
        state[module] = 1
        for target in graph[module]:
            if state.get(target) == 1:
                cycle.extend([*trail, module, target])
                return True
            if state.get(target) is None and visit(target, [*trail, module]):
                return True
        state[module] = 2
        return False

    for module in graph:
        if state.get(module) is None:
            assert not visit(module, []), " -> ".join(cycle)


def test_no_private_name_is_imported_from_another_module() -> None:
    problems = [
        f"{module} imports {name} from {target}"
        for module, path in modules().items()
        for target, names in imports(path)
        for name in names
        if name.startswith("_")
    ]
    assert problems == []


def test_every_module_is_one_room() -> None:
    """No module past about 450 lines: one that grows further has taken a second job."""
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules().items()}
    assert {m: n for m, n in sizes.items() if n > 460} == {}


# What makes a script call: a script or its contract, the effect that runs one, the arguments
# laid out by a contract, or a script command sent to a client. ``library`` (installing the
# Functions library) and ``ScriptArg`` (a value's type) build no call.
_CALL_NAMES = {"script", "Script", "ScriptCall", "Contract", "parse_contract", "scripts"}
_CALL_ATTRIBUTES = {"argv_for", "evalsha", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}
_CALL_COMMANDS = {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"}


def script_calls_built(path: Path) -> list[str]:
    """How ``path`` builds a script call itself, if it does (see ``_CALL_NAMES``)."""
    found = [
        f"imports {name}"
        for target, names in imports(path)
        if target.startswith("_wire")
        for name in names
        if name in _CALL_NAMES
    ]
    found += [f"imports {t}" for t, names in imports(path) if t == "_wire.scripts" and not names]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in _CALL_ATTRIBUTES | _CALL_NAMES:
            found.append(f"uses .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).upper() in _CALL_COMMANDS
        ):
            found.append(f"sends {str(node.args[0].value).upper()}")
    return found


def test_only_the_wire_builds_script_calls() -> None:
    """KEYS and ARGV are built in ``_wire`` alone (its gateways): no module elsewhere loads a
    script, makes the effect that runs one, fills a contract's arguments or sends a script
    command itself."""
    problems = [
        f"{module} {how}"
        for module, path in modules().items()
        if wing(module) != "_wire"
        for how in script_calls_built(path)
    ]
    assert problems == []


def test_the_script_call_check_sees_each_way_of_building_one(tmp_path: Path) -> None:
    planted = {
        "from compozy_memory._wire.steps import ScriptCall": "imports ScriptCall",
        "from compozy_memory._wire.scripts import script": "imports script",
        "from compozy_memory._wire import scripts": "imports scripts",
        "import compozy_memory._wire.scripts": "imports _wire.scripts",
        "args = contract.argv_for(values)": "uses .argv_for",
        "reply = await client.evalsha(sha, 1, key)": "uses .evalsha",
        "reply = client.execute_command('FCALL', 'append', 1, key)": "sends FCALL",
        "from compozy_memory._wire.scripts import ScriptArg, library": None,
    }
    for line, expected in planted.items():
        path = tmp_path / "planted.py"
        path.write_text(f"async def f(client, contract, values, sha, key):\n    {line}\n")
        if line.startswith(("from", "import")):
            path.write_text(line + "\n")
        found = script_calls_built(path)
        assert found == ([expected] if expected else []), line
