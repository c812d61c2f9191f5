"""Responses-API items as stratamem chat messages, and stored messages as items again.

Pure (no I/O, no framework import). A batch of items becomes chat messages that stratamem can
store, window, summarise and turn into cards; each message keeps the items it was made from,
whole, in its metadata (``storage.agent_items.ITEMS_KEY``), so nothing is lost and the model
is sent the items themselves, never this rendering. The rendering is what stratamem counts:
text, calls with their arguments and tool results; encrypted reasoning is not counted.

How items group into messages:

- an item with role ``user`` (or ``system``/``developer``, labelled) is a user message;
- a run of the model's items (output messages, reasoning, calls, hosted tool items) is one
  assistant message, so a reasoning item always stays with the message or call it preceded;
  its calls whose results follow (``*_output`` items with the same ``call_id``) are its
  ``tool_calls``, and those results are tool messages: one unit, kept or dropped whole;
- a result whose call is not open (after a pop, say) is an assistant note.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from storage.agent_items import ITEMS_KEY, ItemMessage

__all__ = ["CLOSED", "message_items", "plan_messages"]

#: The content of a result that closes a call the conversation went on without.
CLOSED = "interrupted: no result (the conversation went on without it)"

_INPUT_ROLES = frozenset(("user", "system", "developer"))


def plan_messages(
    items: Sequence[Mapping[str, Any]], open_calls: Sequence[str]
) -> list[dict[str, Any]]:
    """The chat messages that store ``items`` (one ``record``), given the session's open calls.

    A batch that goes on past calls still open without their results first closes them with
    tool results that hold no item (``CLOSED``): the model is sent those results, as it would
    be told of any call that never returned, and the session's items do not list them.
    """
    batch = [dict(item) for item in items]
    messages: list[dict[str, Any]] = []
    still_open = set(open_calls)
    index = 0
    while index < len(batch) and _answers(batch[index], still_open):
        still_open.discard(batch[index]["call_id"])
        messages.append(_tool_message(batch[index]))
        index += 1
    if index < len(batch):
        messages.extend(_closing(call_id) for call_id in open_calls if call_id in still_open)
    while index < len(batch):
        item = batch[index]
        if _is_result(item):
            messages.append(_note([item]))
            index += 1
        elif item.get("role") in _INPUT_ROLES:
            messages.append(_user_message(item))
            index += 1
        else:
            index = _model_turn(batch, index, messages)
    return messages


def message_items(message: ItemMessage, cut_content: str | None = None) -> list[dict[str, Any]]:
    """The items to send for one stored message: the ones it holds (copies), or, for a
    message stored without items, the item its chat message stands for.

    ``cut_content`` is the message's content as the hard cap cut it (a tool result): the
    result items it holds carry the cut output instead of their own.
    """
    if not message.holds_items:
        return _items_of_chat_message(message.payload, cut_content)
    items = [copy.deepcopy(item) for _, item in message.items]
    if cut_content is not None:
        call_id = message.payload.get("tool_call_id")
        for item in items:
            if _is_result(item) and item.get("call_id") == call_id:
                item["output"] = cut_content
    return items


def _model_turn(batch: list[dict[str, Any]], start: int, messages: list[dict[str, Any]]) -> int:
    """Add the assistant message of the model's items from ``start`` (and the results of its
    calls that follow them); return the index after them."""
    stop = start
    while stop < len(batch) and not _is_result(batch[stop]):
        if batch[stop].get("role") in _INPUT_ROLES:
            break
        stop += 1
    group = batch[start:stop]
    calls: list[str] = []
    for item in group:
        call_id = item.get("call_id")
        if isinstance(call_id, str) and call_id not in calls:
            calls.append(call_id)
    results: list[dict[str, Any]] = []
    end = stop
    answered: set[str] = set()
    while end < len(batch) and _answers(batch[end], set(calls) - answered):
        answered.add(batch[end]["call_id"])
        results.append(batch[end])
        end += 1
    # At the end of the batch an unanswered call stays open (its result may come next);
    # before anything else it never got one: it is rendered, not made a call.
    made = calls if end == len(batch) else [call for call in calls if call in answered]
    messages.append(_assistant_message(group, made))
    messages.extend(_tool_message(result) for result in results)
    return end


def _assistant_message(group: list[dict[str, Any]], calls: list[str]) -> dict[str, Any]:
    lines: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for item in group:
        call_id = item.get("call_id")
        if call_id in calls and not any(made["id"] == call_id for made in tool_calls):
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": _call_name(item), "arguments": _arguments(item)},
                }
            )
        elif line := _describe(item):
            lines.append(line)
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(lines) or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    elif message["content"] is None:
        message["content"] = " ".join(f"[{_kind(item)}]" for item in group)
    message["metadata"] = {ITEMS_KEY: group}
    return message


def _describe(item: dict[str, Any]) -> str:
    """The model item as text for memory: its text, or what it did; reasoning as nothing."""
    kind = _kind(item)
    if kind == "reasoning":
        return ""
    if item.get("role") == "assistant":
        return _text_of(item.get("content"))
    if isinstance(item.get("call_id"), str):
        return f"[{kind} {_call_name(item)}({_arguments(item)})]"
    return f"[{kind}]"


def _user_message(item: dict[str, Any]) -> dict[str, Any]:
    text = _text_of(item.get("content"))
    role = item["role"]
    if role != "user":
        text = f"({role} message) {text}"
    return {"role": "user", "content": text, "metadata": {ITEMS_KEY: [item]}}


def _tool_message(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": item["call_id"],
        "content": _output_of(item),
        "metadata": {ITEMS_KEY: [item]},
    }


def _closing(call_id: str) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": CLOSED,
        "metadata": {"agent_closed_call": True},
    }


def _note(items: list[dict[str, Any]]) -> dict[str, Any]:
    text = "\n".join(f"[{_kind(item)} {item['call_id']}] {_output_of(item)}" for item in items)
    return {"role": "assistant", "content": text, "metadata": {ITEMS_KEY: items}}


def _items_of_chat_message(payload: Mapping[str, Any], cut: str | None) -> list[dict[str, Any]]:
    role = payload.get("role")
    content = cut if cut is not None else payload.get("content")
    if role == "tool":
        output = content if isinstance(content, str) else _text_of(content)
        return [
            {"type": "function_call_output", "call_id": payload["tool_call_id"], "output": output}
        ]
    items: list[dict[str, Any]] = []
    if content:
        items.append({"role": role, "content": copy.deepcopy(content)})
    for call in payload.get("tool_calls") or ():
        function = call.get("function", {})
        items.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": function.get("name", ""),
                "arguments": function.get("arguments", ""),
            }
        )
    return items


def _answers(item: dict[str, Any], calls: Collection[str]) -> bool:
    return _is_result(item) and item["call_id"] in calls


def _is_result(item: Mapping[str, Any]) -> bool:
    kind = item.get("type")
    return (
        isinstance(kind, str) and kind.endswith("_output") and isinstance(item.get("call_id"), str)
    )


def _kind(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    return kind if isinstance(kind, str) else "message"


def _call_name(item: Mapping[str, Any]) -> str:
    name = item.get("name")
    return name if isinstance(name, str) and name else _kind(item)


def _arguments(item: Mapping[str, Any]) -> str:
    for key in ("arguments", "input"):
        if isinstance(item.get(key), str):
            return str(item[key])
    for key in ("action", "operation", "arguments", "input"):
        if key in item:
            return json.dumps(item[key], ensure_ascii=False, sort_keys=True)
    return ""


def _output_of(item: Mapping[str, Any]) -> str:
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        text = _text_of(output)
        if text:
            return text
    if output is None:
        return f"[{_kind(item)}]"
    return json.dumps(output, ensure_ascii=False, sort_keys=True)


def _text_of(content: Any) -> str:
    """The text of a content string or list of parts (other parts named in brackets)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, ensure_ascii=False)
    lines: list[str] = []
    for part in content:
        if not isinstance(part, Mapping):
            lines.append(str(part))
        elif isinstance(part.get("text"), str):
            lines.append(part["text"])
        elif isinstance(part.get("refusal"), str):
            lines.append(part["refusal"])
        elif part.get("type") == "input_file" and part.get("filename"):
            lines.append(f"[file {part['filename']}]")
        else:
            lines.append(f"[{part.get('type', 'part')}]")
    return "\n".join(lines)
