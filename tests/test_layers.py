"""The package's import graph: one-way layers, no cycles, no private names across modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "compozy_memory"

# Lower wings never import higher ones: data flows manager -> store -> io -> wire -> Lua.
RANK = {
    "errors": 0,
    # The table both APIs are generated from: data, importing nothing else of the package.
    "_operations": 0,
    "_model": 1,
    "embedded": 1,
    # Search is one feature in one package. Its pure core (analysis, documents, segments and
    # merges, scoring, ranking, fusion, dense vectors) does no I/O and sits low: it imports
    # only the model and the errors, never the wire or the store.
    "_search": 2,
    "_wire": 3,
    # Its runtime (the indexer, a query's ranking, the vector step, a fused search, and their
    # script calls) ranks with the wire: the gateway mixes its script calls in, and it needs
    # nothing of the store above, which uses it.
    "_search.runtime": 3,
    # Session facts are one feature in one flat wing ranked with the wire: how a fact is checked
    # and shown (pure), a memory's map of them as steps, and their script calls, the scripts in
    # lua/facts/. A fact lives in the memory's slot, so the gateway mixes its calls in, and the
    # replies show the facts a context holds; the map needs of a handle only what its own
    # Protocol names (FactsOwner), never the store. Three small modules: no sub-wing.
    "_facts": 3,
    # The flush's script calls (the fenced lock's and the commit's, the scripts in lua/flush/)
    # are a memory's, so the gateway mixes them in: that one module ranks with the wire. The
    # rest of the flush (planner, summarizers, the lock and the flusher that run those calls)
    # stays one wing above the store: it holds a client of Anthropic's API with its metrics and
    # the settings built from the configuration.
    "_flush.calls": 3,
    "_io": 4,
    "_metrics": 4,
    "_telemetry": 4,
    # Stored results are one feature in one flat wing (the store of payloads by reference and
    # its script calls, the scripts in lua/results/): small, and its calls are a payload's,
    # not a memory's, so the gateway does not mix them in. It ranks between the drivers (a
    # result store opens its own on a client) and the store, whose every handle keeps one for
    # what it offloads.
    "_results": 5,
    "_store": 6,
    "_flush": 7,
    "_config": 7,
    # Sessions are one feature in one flat wing: a project's session index and its script
    # calls, the scripts in lua/sessions/. Two modules, and their calls are a project's, not a
    # memory's, so the gateway does not mix them in and nothing below needs them: the wing
    # ranks above the store (the index reads a handle's totals) and below the managers, which
    # attach an index to the handles they open.
    "_sessions": 7,
    "_context": 8,
    "_manager": 9,
    "_manager_base": 9,
    "_sync_manager": 9,
    # The operator's tools sit beside the adapters: `import` reads the frameworks' histories
    # through the adapters' converters (from_item, from_langchain, from_llama_index).
    "_ops": 11,
    "adapters": 11,
    "testing": 11,
    "__init__": 12,
}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


# Parts of a wing that rank on their own rather than as the package holding them: search's
# runtime, and the flush's script calls (one module).
SUB_WINGS = ("_search.runtime", "_flush.calls")


def wing(module: str) -> str:
    for sub in SUB_WINGS:
        if module == sub or module.startswith(f"{sub}."):
            return sub
    return module.split(".")[0]


def test_a_feature_runtime_is_a_wing_of_its_own() -> None:
    assert wing("_search.runtime.indexer") == "_search.runtime"
    assert wing("_search.runtime") == "_search.runtime"
    assert wing("_search.segments") == "_search"
    assert wing("_store.core") == "_store"
    assert wing("_flush.calls") == "_flush.calls"
    assert wing("_flush.lock") == "_flush"


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


# Each feature slice's script calls: the modules of a slice that speak its scripts' contracts.
# Those whose scripts touch a memory's slot (search's, the facts', the flush's) are mixed into
# the gateway and build their calls with its builders; the session index's (a project's slot)
# and the stored results' (a payload's key) build their own.
SLICE_CALLS = {
    "_search.runtime.index_calls",
    "_search.runtime.vector_calls",
    "_sessions.calls",
    "_results.calls",
    "_facts.calls",
    "_flush.calls",
}
# The slices' wings ranked with the wire, whose script calls the gateway mixes in, and what else
# of them the wire may use: the pure lines of facts, with which the replies show a context's.
WIRE_RANKED_SLICES = {"_search.runtime", "_facts", "_flush.calls"}
WIRE_MAY_USE = SLICE_CALLS | {"_facts.lines"}


def test_the_wire_knows_of_a_slice_only_its_script_calls() -> None:
    """Search's runtime ranks with the wire, so the rank alone would let the wire import the
    indexer: the gateway takes a slice's script calls, and nothing else of it."""
    known = modules()
    problems = [
        f"{module} imports {named}"
        for module, path in known.items()
        if wing(module) == "_wire"
        for target, names in imports(path)
        # `from compozy_memory._search.runtime import index_calls` names the module it imports
        for named in ([f"{target}.{n}" for n in names if f"{target}.{n}" in known] or [target])
        if wing(named) in WIRE_RANKED_SLICES and named not in WIRE_MAY_USE
    ]
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


def defined_names(tree: ast.Module) -> set[str]:
    """Every name ``tree`` defines: functions, classes, variables, attributes it sets on
    ``self`` or ``cls``, parameters, names it imports, and ``__slots__`` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names |= {
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
    return names


def private_uses(path: Path) -> list[str]:
    """``thing._name`` in ``path`` where ``_name`` is another module's: a private name that
    ``path`` does not define, reached through anything but ``self`` or ``cls`` (a class's
    own and inherited members)."""
    tree = ast.parse(path.read_text())
    own = defined_names(tree)
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and node.attr not in own
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


def test_no_module_uses_another_modules_private_names() -> None:
    """What a module needs of another is public there: an adapter runs a memory's operations
    through ``memory.steps`` (``MemorySteps``), never its underscored methods."""
    problems = [
        f"{module} {use}" for module, path in modules().items() for use in private_uses(path)
    ]
    assert problems == []


def test_the_private_use_check_sees_another_modules_names(tmp_path: Path) -> None:
    path = tmp_path / "planted.py"
    path.write_text(
        "class A:\n"
        "    __slots__ = ('_kept',)\n"
        "    def f(self, memory, other):\n"
        "        self._own = 1\n"
        "        yield from memory._append_many(())\n"  # another module's: found
        "        other.parts._flusher = None\n"  # found (a store of another's name)
        "        return self._inherited, memory._own, other._kept, self.__class__\n"
    )
    assert sorted(private_uses(path)) == [
        "line 5: memory._append_many",
        "line 6: other.parts._flusher",
    ]


def test_every_module_is_one_room() -> None:
    """No module past about 450 lines: one that grows further has taken a second job."""
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules().items()}
    assert {m: n for m, n in sizes.items() if n > 460} == {}


# The core: the library's logic, written as steps over the closed effect set of
# ``_wire/effects.py``. It imports no I/O package (``_io``: the drivers and their middleware),
# no metrics or telemetry, and no client library: the drivers perform its effects and record
# what they measure from what each effect says.
CORE_WINGS = {
    "_model",
    "_search",
    "_search.runtime",
    "_wire",
    "_store",
    "_flush",
    "_context",
    "_config",
    "_sessions",
    "_results",
    "_facts",
    "_flush.calls",
}
# Modules of those wings that open a handle, an index or a store on a client (each builds the
# driver it runs on), and a summarizer that is itself a client (of Anthropic's API, with its
# own metrics) with the settings that build it.
CORE_ROOTS = {
    "_store.instance",
    "_store.sync_instance",
    "_sessions.index",
    "_results.store",
    "_store.warmup",
    "_flush.anthropic_summary",
    "_flush.resource_settings",
}
_NOT_IN_CORE = ("_io", "_metrics", "_telemetry")
_CLIENT_LIBRARIES = {"redis", "hiredis", "prometheus_client", "opentelemetry"}


def io_imported(path: Path) -> list[str]:
    """What of the I/O, the metrics or a client library ``path`` imports."""
    found = [
        f"imports {target}"
        for target, _ in imports(path)
        if target.split(".")[0] in _NOT_IN_CORE or target in _NOT_IN_CORE
    ]
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [f"imports {n}" for n in names if n.split(".")[0] in _CLIENT_LIBRARIES]
    return found


def test_the_core_imports_no_io_and_no_metrics() -> None:
    problems = [
        f"{module} {how}"
        for module, path in modules().items()
        if wing(module) in CORE_WINGS and module not in CORE_ROOTS
        for how in io_imported(path)
    ]
    assert problems == []


def test_the_io_check_sees_each_way_of_importing_io(tmp_path: Path) -> None:
    planted = {
        "from compozy_memory._io.transport import Transport": "imports _io.transport",
        "from compozy_memory._io import retry": "imports _io",
        "from compozy_memory import _telemetry": "imports _telemetry",
        "from compozy_memory._metrics import MemoryMetrics": "imports _metrics",
        "import compozy_memory._io.client_calls": "imports _io.client_calls",
        "from redis import exceptions": "imports redis",
        "import redis.asyncio": "imports redis.asyncio",
        "from prometheus_client import Counter": "imports prometheus_client",
        "from compozy_memory._wire.effects import Call, Observe": None,
    }
    for line, expected in planted.items():
        path = tmp_path / "planted.py"
        path.write_text(f"def f() -> None:\n    {line}\n")
        assert io_imported(path) == ([expected] if expected else []), line


def test_every_effect_is_performed_by_both_drivers() -> None:
    """The effect set is closed: each member has a case in both drivers' ``match``."""
    effects = ast.parse((PACKAGE / "_wire" / "effects.py").read_text())
    (alias,) = [
        str(node.value.value)
        for node in effects.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "Effect"
        and isinstance(node.value, ast.Constant)
    ]
    members = {name.strip().split("[")[0] for name in alias.split("|")}
    for driver in ("transport.py", "sync_transport.py"):
        tree = ast.parse((PACKAGE / "_io" / driver).read_text())
        cases = {
            case.pattern.cls.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Match)
            for case in node.cases
            if isinstance(case.pattern, ast.MatchClass) and isinstance(case.pattern.cls, ast.Name)
        }
        assert members <= cases, (driver, members - cases)


# What makes a script call: a script or its contract, the effect that runs one, the arguments
# laid out by a contract, or a script command sent to a client. ``library`` (installing the
# Functions library) and ``ScriptArg`` (a value's type) build no call.
_CALL_NAMES = {
    "script",
    "Script",
    "RunScript",
    "script_call",
    "Contract",
    "parse_contract",
    "scripts",
}
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


def test_only_the_wire_and_the_slices_calls_build_script_calls() -> None:
    """KEYS and ARGV are built in ``_wire`` (its gateway) and in each feature slice's script
    calls (``SLICE_CALLS``) alone, and sent by the drivers of ``_io`` alone: no module
    elsewhere loads a script, makes the effect that runs one, fills a contract's arguments or
    sends a script command itself."""
    problems = [
        f"{module} {how}"
        for module, path in modules().items()
        if wing(module) not in ("_wire", "_io") and module not in SLICE_CALLS
        for how in script_calls_built(path)
    ]
    assert problems == []


def test_the_script_call_check_sees_each_way_of_building_one(tmp_path: Path) -> None:
    planted = {
        "from compozy_memory._wire.effects import RunScript": "imports RunScript",
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
