from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from compozy_memory._config.templates import KeyTemplate, compile_template, render_key
from compozy_memory._model.keys import InstanceKeys
from compozy_memory.errors import TemplateError

CONTEXT = {
    "project": {"id": "acme"},
    "workflow": {"id": "wf-1", "input": {"user_id": "42", "tenant": "eu"}},
    "agent": {"id": "support-bot"},
}


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ("user:{{ .workflow.input.user_id }}", "user:42"),  # the spec's Go-template form
        ("user:{{.workflow.input.user_id}}", "user:42"),
        ("user:{{ workflow.input.user_id }}", "user:42"),  # plain Jinja2
        ("{{ .agent.id }}:{{ .workflow.input['tenant'] }}", "support-bot:eu"),
        ("t:{{ .workflow.input.tenant | upper }}", "t:EU"),
        ("static", "static"),
    ],
)
def test_renders(source: str, key: str) -> None:
    assert render_key(source, CONTEXT) == key


def test_missing_variables_are_named_with_what_exists() -> None:
    with pytest.raises(TemplateError) as info:
        render_key("user:{{ .workflow.input.user }}", CONTEXT)
    assert str(info.value) == (
        "key template 'user:{{ .workflow.input.user }}' needs workflow.input.user, which the "
        "context does not have; workflow.input has: tenant, user_id"
    )
    expected = "needs session.id, which the context does not have; the context has: agent, "
    with pytest.raises(TemplateError, match=re.escape(expected + "project, workflow")):
        render_key("{{ .session.id }}", CONTEXT)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{{ ''.__class__.__mro__ }}", "may not read private attributes ('__class__')"),
        ("{{ workflow.__class__ }}", "refused: templates may not read private attributes"),
        ("{{ cycler.__init__.__globals__ }}", "may not read private attributes ('__init__')"),
        ("{{ lipsum.__globals__['os'] }}", "may not read private attributes ('__globals__')"),
        ("{{ workflow._secret }}", "may not read private attributes ('_secret')"),
        ("{{ ().__class__.__bases__[0].__subclasses__() }}", "private attributes ('__class__')"),
        ("{{ x | attr('__class__') }}", "may not read private attributes ('__class__')"),
        ("{{ workflow['_id'] }}", "may not read private attributes ('_id')"),
        ("{{ range(10**9) | list }}", "failed: OverflowError"),
    ],
)
def test_sandbox_escapes_are_refused(source: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(fragment)):
        render_key(source, CONTEXT)


def test_private_names_refused_at_compile_time_not_only_at_render() -> None:
    with pytest.raises(TemplateError, match=re.escape("private attributes ('__class__')")):
        KeyTemplate("{{ ''.__class__ }}")  # no context needed: refused before any request
    # A name only known at render time is still refused by the sandbox.
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        render_key("{{ x[y] }}", {"x": "", "y": "__class__"})


@pytest.mark.parametrize(
    ("source", "fragment"),
    [("{{ x", "is not valid: unexpected end of template"), ("", "non-empty"),
     ("{{ '  ' }}", "rendered '  ', which is empty as a key")],
)  # fmt: skip
def test_broken_templates(source: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match=fragment):
        render_key(source, CONTEXT)


def test_compiled_templates_are_shared() -> None:
    assert compile_template("a:{{ .x }}") is compile_template("a:{{ .x }}")
    assert KeyTemplate("{{ .a.b }}-{{ .c }}").paths == (("a", "b"), ("c",))


def hash_tag(key: str) -> str:
    start = key.index("{")
    return key[start + 1 : key.index("}", start + 1)]


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300)
@given(
    user=json_values,
    tenant=st.text(),
    template=st.sampled_from(
        [
            "user:{{ .workflow.input.user }}",
            "{{ .workflow.input.tenant }}:{{ .workflow.input.user }}",
            "{{ .workflow.input.user }}}{{ '{' }}{{ .workflow.input.tenant }}",
            "x{{ .workflow.input.tenant }}" * 40,
        ]
    ),
)
def test_any_context_stays_in_its_namespace_and_slot(user: Any, tenant: str, template: str) -> None:
    context = {"workflow": {"input": {"user": user, "tenant": tenant}}}
    try:
        key = render_key(template, context)
    except TemplateError:
        return  # only "empty as a key" can happen here
    keys = InstanceKeys.build("acme", f"support:{key}")
    slots = set()
    for full in (*keys.data, keys.lock):
        assert full.startswith("compozy:acme:memory:{support:")
        assert full.count("{") == full.count("}") == 1
        assert hash_tag(full) == keys.key
        slots.add(key_slot(full.encode()))  # redis-py's own CRC16 slot computation
    assert len(slots) == 1
