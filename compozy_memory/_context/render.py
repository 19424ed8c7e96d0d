"""A context window as a request body: the Anthropic Messages API or OpenAI chat completions.

Messages are stored in whichever shape the agent wrote them (Anthropic ``tool_use`` /
``tool_result`` blocks, or OpenAI ``tool_calls`` and ``tool`` messages); these helpers write
either API's shape from either. A window cut from a longer conversation may start with the
result of a call it does not contain, or end with a call not yet answered: both APIs refuse
such a request, so the orphan parts are dropped (a call and its results are never split; they
go together or not at all).

* :func:`to_anthropic` returns ``(system, messages)``: system and developer messages and
  summaries joined apart (blank line) as the ``system`` string, the rest as user/assistant
  turns that alternate (consecutive messages of one role merge into one turn's block list),
  ``tool_use`` blocks on assistant turns, ``tool_result`` blocks first on the user turn
  right after.
* :func:`to_openai` returns chat messages: system/developer messages (and summaries, as
  system) first, then the conversation, assistant ``tool_calls`` each answered by a ``tool``
  message with its ``tool_call_id`` right after.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from compozy_memory._model.exchanges import partnered, result_text
from compozy_memory._model.messages import Message

__all__ = ["to_anthropic", "to_openai"]


def _is_instruction(message: Message) -> bool:
    return message.role in ("system", "developer") or message.content_type == "summary"


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"arguments": raw}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return raw if isinstance(raw, dict) else {}


# -- Anthropic ---------------------------------------------------------------------------------


def _anthropic_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if isinstance(message.content, str):
        if message.role == "tool":
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.content,
                }
            )
        elif message.content.strip():
            blocks.append({"type": "text", "text": message.content})
    else:
        for block in message.content:
            kind = block.get("type")
            if kind == "text" and not str(block.get("text", "")).strip():
                continue  # the API refuses empty text blocks
            if kind == "tool_result" and message.role == "assistant":
                continue  # results belong to the user turn
            if kind == "tool_use" and message.role != "assistant":
                continue  # calls belong to the assistant turn
            blocks.append(dict(block))
    for call in message.tool_calls or ():
        name, arguments = _function_of(call)
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call["id"]),
                "name": name,
                "input": _arguments(arguments),
            }
        )
    return blocks


def _merge(turns: list[tuple[str, list[dict[str, Any]]]]) -> list[tuple[str, list[dict[str, Any]]]]:
    merged: list[tuple[str, list[dict[str, Any]]]] = []
    for role, blocks in turns:
        if not blocks:
            continue
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, list(blocks)))
    return merged


def _pair_tools(
    turns: list[tuple[str, list[dict[str, Any]]]],
) -> tuple[list[tuple[str, list[dict[str, Any]]]], bool]:
    """Keep only calls answered in the next user turn and results answering the previous
    assistant turn; whether anything was dropped."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    dropped = False
    seen: set[str] = set()
    for i, (role, blocks) in enumerate(turns):
        if role == "assistant":
            after = turns[i + 1][1] if i + 1 < len(turns) else []
            answered = {str(b.get("tool_use_id")) for b in after if b.get("type") == "tool_result"}
            kept, lost = partnered(blocks, _id_of("tool_use", "id"), answered, seen)
        else:
            before = out[-1][1] if out and out[-1][0] == "assistant" else []
            calls = {str(b.get("id")) for b in before if b.get("type") == "tool_use"}
            kept, lost = partnered(blocks, _id_of("tool_result", "tool_use_id"), calls, set())
            # Results first, as the API requires.
            kept.sort(key=lambda b: b.get("type") != "tool_result")
        dropped = dropped or lost
        out.append((role, kept))
    return out, dropped


def to_anthropic(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` for the Anthropic Messages API."""
    system = [m.text for m in messages if _is_instruction(m) and m.text.strip()]
    turns = [
        ("assistant" if m.role == "assistant" else "user", _anthropic_blocks(m))
        for m in messages
        if not _is_instruction(m)
    ]
    turns = _merge(turns)
    while True:  # dropping an orphan can empty a turn and join its neighbours: settle
        turns, dropped = _pair_tools(turns)
        turns = _merge(turns)
        if not dropped:
            break
    return ("\n\n".join(system) or None), [
        {"role": role, "content": blocks} for role, blocks in turns
    ]


# -- OpenAI ------------------------------------------------------------------------------------


def _openai_messages(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool" or (
        isinstance(message.content, list)
        and any(b.get("type") == "tool_result" for b in message.content)
    ):
        out: list[dict[str, Any]] = []
        if message.role == "tool" and message.tool_call_id:
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
            )
        rest: list[dict[str, Any]] = []
        if isinstance(message.content, list):
            for block in message.content:
                if block.get("type") == "tool_result":
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": str(block.get("tool_use_id")),
                            "content": result_text(block.get("content")),
                        }
                    )
                elif block.get("type") == "text" and str(block.get("text", "")).strip():
                    rest.append({"type": "text", "text": str(block["text"])})
        if rest and message.role != "tool":
            out.append(_named({"role": "user", "content": rest}, message))
        return out
    if message.role == "assistant":
        calls = []
        for call in message.tool_calls or ():
            name, arguments = _function_of(call)
            calls.append(
                {
                    "id": str(call["id"]),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(_arguments(arguments))},
                }
            )
        if isinstance(message.content, list):
            for block in message.content:
                if block.get("type") == "tool_use":
                    calls.append(
                        {
                            "id": str(block.get("id")),
                            "type": "function",
                            "function": {
                                "name": str(block.get("name") or "tool"),
                                "arguments": json.dumps(block.get("input") or {}),
                            },
                        }
                    )
        text = message.text
        reply: dict[str, Any] = {"role": "assistant", "content": text if text.strip() else None}
        if calls:
            reply["tool_calls"] = calls
        elif reply["content"] is None:
            return []
        return [_named(reply, message)]
    if isinstance(message.content, str):
        return [_named({"role": "user", "content": message.content}, message)]
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if block.get("type") == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image_url":
            parts.append(dict(block))
    return [_named({"role": "user", "content": parts}, message)] if parts else []


def _function_of(call: dict[str, Any]) -> tuple[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        return "tool", None
    return str(function.get("name") or "tool"), function.get("arguments")


def _named(entry: dict[str, Any], message: Message) -> dict[str, Any]:
    if message.name:
        entry["name"] = message.name
    return entry


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat-completions messages: instructions first, then the conversation, with every
    tool call answered right after it and every tool message answering such a call."""
    head: list[dict[str, Any]] = []
    for message in messages:
        if _is_instruction(message) and message.text.strip():
            role = "developer" if message.role == "developer" else "system"
            head.append(_named({"role": role, "content": message.text}, message))
    flat = [out for m in messages if not _is_instruction(m) for out in _openai_messages(m)]
    body: list[dict[str, Any]] = []
    seen: set[str] = set()
    i = 0
    while i < len(flat):
        entry = flat[i]
        if entry["role"] == "tool":
            i += 1  # not right after a call of its own: an orphan
            continue
        if entry["role"] != "assistant" or not entry.get("tool_calls"):
            body.append(entry)
            i += 1
            continue
        j = i + 1
        answers: dict[str, dict[str, Any]] = {}
        while j < len(flat) and flat[j]["role"] == "tool":
            answers.setdefault(flat[j]["tool_call_id"], flat[j])
            j += 1
        unique, _ = partnered(entry["tool_calls"], lambda call: str(call["id"]), set(answers), seen)
        reply = {k: v for k, v in entry.items() if k != "tool_calls"}
        if unique:
            reply["tool_calls"] = unique
        if unique or reply.get("content") is not None:
            body.append(reply)
            body.extend(answers[c["id"]] for c in unique)
        i = j
    return head + body


def _id_of(kind: str, id_key: str) -> Callable[[dict[str, Any]], str | None]:
    """The call id of a ``kind`` block (None for a block of another type)."""
    return lambda block: str(block.get(id_key)) if block.get("type") == kind else None
