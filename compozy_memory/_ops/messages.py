"""Error text an operator reads: what went wrong, without the library's or the server's
internals.

The server names where in a script an error was raised (``script: cm_154ae4366d6e_health, on
@user_function:759.``) and prefixes ACL refusals inside scripts with ``ACL failure in
script:``; the script names and line numbers mean nothing to whoever runs the command, so they
are dropped, and the digest-named function becomes the operation it runs. pydantic reports a
stored value that fits none of a union's members once per member (``content.str: ...``,
``content.list[dict[str,json-or-python[...]]]: ...``); the operator gets the field and what
was found there. Everything printed is made :func:`~compozy_memory._ops.output.visible`:
server replies can quote stored data.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from compozy_memory._ops.output import visible

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["describe_invalid", "operator_text"]

_LOCATION = re.compile(r"\s*script: \S+, on @\w+:\d+\.?")
_IN_SCRIPT = re.compile(r"(ACL failure in script|The user executing the script can't run this "
                        r"command or subcommand):?\s*")  # fmt: skip
_FUNCTION = re.compile(r"\bcm_[0-9a-f]{6,}_(\w+)")
_USER_SCRIPT = re.compile(r"\buser_(?:script|function):\d+:\s*")
# redis-py's words for a failed command inside a pipeline: the command (with its keys) and
# the server's reply as a tuple's repr.
_PIPELINE = re.compile(r"Command # \d+ \(.*?\) of pipeline caused error: \((['\"])(.*?)\1,?\)")


def operator_text(message: str) -> str:
    """``message`` without script locations, function digests or ACL-in-script prefixes,
    safe to print."""
    text = _PIPELINE.sub(r"\2", message)
    text = _LOCATION.sub("", text)
    text = _IN_SCRIPT.sub("", text)
    text = _USER_SCRIPT.sub("", text)
    text = _FUNCTION.sub(r"\1", text)
    return visible(text)


def describe_invalid(exc: ValidationError) -> str:
    """One line for data that failed validation: which field, and what was there."""
    fields: dict[str, list[str]] = {}
    found: dict[str, str] = {}
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        field = str(loc[0]) if loc else "value"
        fields.setdefault(field, []).append(str(error["msg"]))
        found.setdefault(field, type(error.get("input")).__name__)
    parts = []
    for field, problems in fields.items():
        if len(problems) > 1:  # a union: every member refused it
            parts.append(f"{field}: {found[field]} is none of its accepted types")
        else:
            parts.append(f"{field}: {problems[0].removeprefix('Value error, ')}")
    return visible(f"stored data this version cannot read ({exc.title}): {'; '.join(parts)}")
