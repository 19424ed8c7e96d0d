"""Key templates: sandboxed Jinja2 that renders a memory key from the request's context.

``support:{{ workflow.input.user_id }}`` and the spec's Go-template form
``support:{{ .workflow.input.user_id }}`` both work. Templates render in Jinja2's
``SandboxedEnvironment`` with ``StrictUndefined``. Before rendering, every variable path a
template names is looked up in the context, so a missing one is reported in full
(``workflow.input.user_id``) together with what the context does have there. Paths through
private attributes (``__class__``, ``_x``) are refused outright, on any value, when the
template is compiled: the project loader compiles every template it reads, so a broken or
refused template is a configuration problem at load time, not at the first request.

The rendered text is then encoded by :func:`compozy_memory._model.keys.sanitize_key`, which is
injective: two different rendered texts never share a memory, and whatever the context holds,
the key stays inside its project's namespace (no ``{`` or ``}`` survives encoding). The text
does decide the key's Cluster slot, as any key text does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

from compozy_memory._model.keys import sanitize_key
from compozy_memory.errors import ConfigurationError, TemplateError

__all__ = ["KeyTemplate", "compile_template", "render_key"]

_GO_DOT = re.compile(r"(\{\{-?\s*)\.(?=[A-Za-z_])")
_ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
Path = tuple[str, ...]


class KeyTemplate:
    """A compiled key template and the variable paths it reads."""

    def __init__(self, source: str) -> None:
        if not isinstance(source, str) or not source.strip():
            raise TemplateError("a key template must be a non-empty string")
        self.source = source
        jinja_source = _GO_DOT.sub(r"\1", source)
        try:
            tree = _ENV.parse(jinja_source)
            self._template = _ENV.from_string(tree)
        except TemplateSyntaxError as exc:
            raise TemplateError(f"key template {source!r} is not valid: {exc.message}") from None
        self.paths: tuple[Path, ...] = tuple(dict.fromkeys(_paths(tree)))
        private = next(_private_names(tree), None)
        if private is not None:
            raise TemplateError(
                f"key template {source!r} refused: templates may not read private "
                f"attributes ({private!r})"
            )

    def render(self, context: Mapping[str, Any]) -> str:
        """The rendered text, not yet encoded."""
        for path in self.paths:
            _require(self.source, context, path)
        try:
            return self._template.render(**context)
        except SecurityError as exc:
            raise TemplateError(
                f"key template {self.source!r} refused by the sandbox: {exc}"
            ) from None
        except UndefinedError as exc:
            raise TemplateError(
                f"key template {self.source!r} needs a missing value: {exc}"
            ) from None
        except Exception as exc:  # filters and tests raise what they like
            raise TemplateError(
                f"key template {self.source!r} failed: {type(exc).__name__}: {exc}"
            ) from None

    def render_text(self, context: Mapping[str, Any]) -> str:
        """The rendered text, not yet encoded; TemplateError if it is blank."""
        text = self.render(context)
        if not text.strip():
            raise TemplateError(
                f"key template {self.source!r} rendered {text!r}, which is empty as a key"
            )
        return text

    def render_key(self, context: Mapping[str, Any]) -> str:
        """The rendered key, encoded (:func:`sanitize_key`). To build it into a longer key,
        join :meth:`render_text` instead and encode once."""
        text = self.render_text(context)
        try:
            return sanitize_key(text)
        except ConfigurationError as exc:
            raise TemplateError(f"key template {self.source!r}: {exc}") from None


@lru_cache(maxsize=1024)
def compile_template(source: str) -> KeyTemplate:
    """The compiled template for ``source``, shared by every lookup that uses it."""
    return KeyTemplate(source)


def render_key(source: str, context: Mapping[str, Any]) -> str:
    return compile_template(source).render_key(context)


def _paths(node: nodes.Node) -> list[Path]:
    """Every ``name.attr[...]`` chain with constant parts, outermost first."""
    if isinstance(node, nodes.Getattr | nodes.Getitem):
        parts: list[str] = []
        current: nodes.Node = node
        while isinstance(current, nodes.Getattr | nodes.Getitem):
            if isinstance(current, nodes.Getattr):
                parts.insert(0, current.attr)
            elif isinstance(current.arg, nodes.Const) and isinstance(current.arg.value, str):
                parts.insert(0, current.arg.value)
            else:  # a computed subscript: check the chain up to it, and what computes it
                return _paths(current.node) + _paths(current.arg)
            current = current.node
        if isinstance(current, nodes.Name):
            return [(current.name, *parts)]
        return _paths(current)
    if isinstance(node, nodes.Name) and node.ctx == "load":
        return [(node.name,)]
    found: list[Path] = []
    for child in node.iter_child_nodes():
        found += _paths(child)
    return found


def _private_names(node: nodes.Node) -> Iterator[str]:
    """Every attribute or constant item name starting with ``_`` the template reads, on any
    value (``''.__class__`` too) and through the ``attr`` filter, innermost first. The
    sandbox still refuses private attributes at render time, for names only known then."""
    for child in node.iter_child_nodes():
        yield from _private_names(child)
    name: object = None
    if isinstance(node, nodes.Getattr):
        name = node.attr
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        name = node.arg.value
    elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args:
        first = node.args[0]
        name = first.value if isinstance(first, nodes.Const) else None
    if isinstance(name, str) and name.startswith("_"):
        yield name


def _require(source: str, context: Mapping[str, Any], path: Path) -> None:
    current: Any = context
    for depth, part in enumerate(path):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
            continue
        if depth == 0 and part in _ENV.globals:
            return  # range, dict, lipsum...: Jinja's own names
        where = ".".join(path[:depth]) or "the context"
        have = sorted(map(str, current)) if isinstance(current, Mapping) else []
        available = f"; {where} has: {', '.join(have)}" if have else ""
        raise TemplateError(
            f"key template {source!r} needs {'.'.join(path)}, which the context does not have"
            f"{available}"
        )
