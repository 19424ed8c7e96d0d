"""The error tree in errors.py's docstring is the class tree, so it cannot drift."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

import compozy_memory
import compozy_memory._config.agents  # AgentConfigError lives beside the agent settings
from compozy_memory import errors
from compozy_memory.errors import CompozyMemoryError

Tree = list[tuple[str, "Tree"]]


def class_tree(cls: type[CompozyMemoryError]) -> Tree:
    """The library's subclasses of ``cls``, each under its first base in the tree (a class
    with two error parents, like MessageTooLargeError, is drawn under the first)."""
    children = [
        sub
        for sub in cls.__subclasses__()
        if sub.__module__.startswith("compozy_memory")
        and next(b for b in sub.__bases__ if issubclass(b, CompozyMemoryError)) is cls
    ]
    return sorted((sub.__name__, class_tree(sub)) for sub in children)


def docstring_tree() -> tuple[str, Tree]:
    """Parse the ASCII tree: four characters of indentation a level, then the class name."""
    assert errors.__doc__ is not None
    lines = [line[4:] for line in errors.__doc__.splitlines() if line.startswith("    ")]
    root = lines[0].strip()
    stack: list[Tree] = [[]]
    for line in lines[1:]:
        match = re.match(r"((?:│   |    )*)[├└]── (\w+)", line)
        assert match, f"not a tree line: {line!r}"
        depth = len(match.group(1)) // 4
        del stack[depth + 1 :]
        node: Tree = []
        stack[depth].append((match.group(2), node))
        stack.append(node)
    return root, _sorted(stack[0])


def _sorted(tree: Tree) -> Tree:
    return sorted((name, _sorted(children)) for name, children in tree)


def test_the_docstring_tree_is_the_class_tree() -> None:
    root, tree = docstring_tree()
    assert root == "CompozyMemoryError"
    assert tree == class_tree(CompozyMemoryError)


def test_every_exported_error_is_in_the_tree() -> None:
    names = set(re.findall(r"\b(\w+Error)\b", errors.__doc__ or ""))
    exported = {n for n in compozy_memory.__all__ if n.endswith("Error")}
    assert exported <= names


def test_a_bad_setting_is_a_value_error_too() -> None:
    """Code written for other libraries catches ValueError for a bad argument (LangChain's
    own tests do); a ConfigurationError is one, and a missing memory stays a KeyError."""
    assert issubclass(errors.ConfigurationError, ValueError)
    with pytest.raises(ValueError, match="ttl must be positive") as raised:
        compozy_memory.MemoryPolicy(ttl=timedelta(0))
    assert isinstance(raised.value, errors.ConfigurationError)
    assert issubclass(errors.MemoryNotFoundError, KeyError)
    assert issubclass(errors.TemplateError, ValueError)
