"""Both APIs come from one table (``compozy_memory._operations``): the generated methods are
current, and the async and the blocking surfaces agree with the table and with each other."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compozy_memory import MemoryInstance, MemoryManager, SyncMemoryInstance, SyncMemoryManager
from compozy_memory._operations import (
    ASYNC_ONLY,
    HANDLE_OPERATIONS,
    MANAGER_OPERATIONS,
    SYNC_NAMES,
    SYNC_ONLY,
)
from compozy_memory._store import instance as instance_module
from compozy_memory._store.core import MemorySteps

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def facadegen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("facadegen", ROOT / "scripts" / "facadegen.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["facadegen"] = module
    spec.loader.exec_module(module)
    return module


def test_the_generated_methods_are_what_the_table_gives(facadegen: ModuleType) -> None:
    stale = [t.path for t in facadegen.stale()]
    assert stale == [], f"run scripts/gen_facades: {stale}"


def test_the_check_sees_a_method_edited_by_hand(facadegen: ModuleType) -> None:
    target = facadegen.TARGETS[1]  # SyncMemoryInstance
    text = (ROOT / target.path).read_text()
    edited = text.replace(
        "return self.transport.drive(self.steps.len())",
        "return self.transport.drive(self.steps.token_count())",
    )
    assert edited != text
    assert facadegen.regenerate(target, edited) == text


def parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    """A method's parameters after ``self``: name, kind, default, annotation (as written)."""
    signature = inspect.signature(function)
    return [
        (p.name, p.kind, p.default, p.annotation) for p in list(signature.parameters.values())[1:]
    ]


def declared(text: str) -> list[tuple[str, Any, Any, Any]]:
    """The parameters ``text`` declares, its defaults evaluated where the handles' are."""
    namespace: dict[str, Any] = dict(vars(instance_module))
    source = f"from __future__ import annotations\ndef f(self, {text}): pass"
    exec(source, namespace)  # noqa: S102  (the table's own text, from this repository)
    return parameters(namespace["f"])


@pytest.mark.parametrize("op", HANDLE_OPERATIONS, ids=lambda op: op.name)
def test_both_handles_and_the_steps_take_the_tables_parameters(op: Any) -> None:
    async_method = getattr(MemoryInstance, op.name)
    sync_method = getattr(SyncMemoryInstance, op.name)
    steps_method = getattr(MemorySteps, op.name)
    expected = declared(op.parameters)
    assert parameters(async_method) == expected
    assert parameters(sync_method) == expected
    assert parameters(steps_method) == expected
    assert inspect.signature(async_method).return_annotation == op.returns
    assert inspect.signature(sync_method).return_annotation == op.returns
    assert inspect.signature(steps_method).return_annotation == f"Steps[{op.returns}]"
    assert inspect.iscoroutinefunction(async_method)
    assert not inspect.iscoroutinefunction(sync_method)
    assert inspect.getdoc(async_method) == inspect.cleandoc(op.doc)
    assert inspect.getdoc(sync_method) == inspect.cleandoc(op.sync_doc)


@pytest.mark.parametrize("op", MANAGER_OPERATIONS, ids=lambda op: op.name)
def test_both_managers_take_the_tables_parameters(op: Any) -> None:
    for manager, handle in (
        (MemoryManager, "MemoryInstance"),
        (SyncMemoryManager, "SyncMemoryInstance"),
    ):
        method = getattr(manager, op.name)
        assert parameters(method) == declared(op.parameters.replace("{handle}", handle))
        returns = inspect.signature(method).return_annotation
        assert returns == op.returns.replace("{handle}", handle)
        assert inspect.iscoroutinefunction(method) is (manager is MemoryManager)


def public(cls: type) -> set[str]:
    names = {n for n in dir(cls) if not n.startswith("_")}
    return names | {
        n for n in ("__aenter__", "__aexit__", "__enter__", "__exit__") if n in dir(cls)
    }


@pytest.mark.parametrize(
    ("async_cls", "sync_cls"),
    [(MemoryInstance, SyncMemoryInstance), (MemoryManager, SyncMemoryManager)],
    ids=["handles", "managers"],
)
def test_the_async_and_the_sync_surface_name_the_same_methods(
    async_cls: type, sync_cls: type
) -> None:
    """Every public name of the async class has its sync twin (renamed as unasync renames
    it), but those the table says only one side has."""
    async_names = public(async_cls) - set(ASYNC_ONLY[async_cls.__name__])
    twins = {SYNC_NAMES.get(n, n) for n in async_names}
    assert twins == public(sync_cls) - set(SYNC_ONLY[sync_cls.__name__])


def test_every_operation_of_the_steps_is_a_method_of_both_handles() -> None:
    """The steps surface is the table's: each public method of ``MemorySteps`` that is not a
    part of the memory is an operation of both handles."""
    parts = {"embedder", "fact_ops", "fusion", "gateway", "index_ops", "key", "memory"}
    parts |= {"policy", "read_only", "vector_ops", "check_writable"}
    steps = {n for n in dir(MemorySteps) if not n.startswith("_")} - parts
    assert steps == {op.name for op in HANDLE_OPERATIONS}
