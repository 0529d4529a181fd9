"""Each model turn's messages in the GenAI conventions' shape, rebuilt from the event tree.

With content capture on, every ``chat`` span carries ``gen_ai.input.messages``:
the conversation as the model was sent it on that turn. The run records nothing
extra for this: the tree already holds each prompt's user text and data (and,
on a reflection retry, the feedback it was sent), each ``model_call``'s whole
response, each tool call's input and output, the reason a Stop hook gave to go
on, and what each ``budget`` node removed or summarized. `Conversation` replays
those records, in the order the sink receives them, into the list of messages
the agent loop keeps:

- the instruction: a ``user`` message with the rendered user text and data;
- each response: an ``assistant`` message of ``text``, ``tool_call`` (with
  ``id``, ``name`` and ``arguments``) and ``reasoning`` parts;
- each tool result: a ``tool`` message with one ``tool_call_response`` part
  (``id``, ``response``), one message per result as viewers expect;
- a continuation (Stop hook) or feedback: a ``user`` message.

Shapes follow the OpenTelemetry GenAI semantic conventions
(``gen-ai-input-messages.json`` / ``gen-ai-output-messages.json``). Every
value is cleaned (secrets redacted, long strings clipped) once, when it joins
the conversation, and each message is serialized once; a turn's attribute
joins the serialized messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from groundswell import is_summary_text, render_user, summary_text

__all__ = ["Conversation", "first_messages", "output_messages", "response_parts"]

Prepare = Callable[[Any], Any]
NOT_CAPTURED = "[introspection result not captured]"


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, default=str)


def _block_part(block: Mapping[str, Any]) -> dict[str, Any]:
    """One content block of a message as a GenAI part."""
    kind = str(block.get("type"))
    if kind == "text":
        return {"type": "text", "content": _text(block.get("text", ""))}
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        part = {
            "type": "tool_call",
            "id": block.get("id"),
            "name": str(block.get("name")),
            "arguments": block.get("input") or {},
        }
        if kind != "tool_use":  # run by the API or a remote MCP server, not by the agent
            part["server"] = block.get("server_name") or "anthropic"
        return part
    if kind == "tool_result" or kind.endswith("_tool_result"):
        return {
            "type": "tool_call_response",
            "id": block.get("tool_use_id"),
            "response": block.get("content"),
        }
    if kind == "thinking":
        return {"type": "reasoning", "content": _text(block.get("thinking", ""))}
    return {"type": kind}  # images, documents, redacted thinking...: named, not copied


def response_parts(content: Sequence[Any]) -> list[dict[str, Any]]:
    """A ``model_call`` response's content blocks as GenAI parts."""
    return [_block_part(b) for b in content if isinstance(b, Mapping)]


def output_messages(parts: list[dict[str, Any]], finish_reason: str | None) -> list[Any]:
    """``gen_ai.output.messages`` for one response (``finish_reason`` is required there)."""
    return [{"role": "assistant", "parts": parts, "finish_reason": finish_reason or "stop"}]


def _message(role: str, content: Any) -> list[dict[str, Any]]:
    """One API message (``role`` and ``content``) as GenAI messages: tool results split
    into one ``tool`` message each, the rest of it one ``role`` message."""
    if isinstance(content, str):
        return [{"role": role, "parts": [{"type": "text", "content": content}]}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content or ():
        if not isinstance(block, Mapping):
            continue
        part = _block_part(block)
        if block.get("type") == "tool_result":
            results.append({"role": "tool", "parts": [part]})
        else:
            parts.append(part)
    return results + ([{"role": role, "parts": parts}] if parts or not results else [])


def first_messages(
    payload: Mapping[str, Any], clean: Prepare, clip: Prepare
) -> list[dict[str, Any]]:
    """The API messages a prompt attempt starts with, cleaned and clipped: the
    instruction (user text and data rendered as the agent renders them), then, on a
    reflection retry, the feedback turns it was sent."""
    user = str(clean(payload.get("user") or ""))
    data = payload.get("data")
    text = render_user(user, clean(data)) if data is not None else user
    retry = payload.get("retry")
    retry = retry if isinstance(retry, Mapping) else {}
    if isinstance(retry.get("note"), str):
        text = f"{text}\n\n{clean(retry['note'])}"
    messages = [{"role": "user", "content": clip(text)}]
    for message in retry.get("messages") or ():
        if isinstance(message, Mapping) and message.get("role") in ("user", "assistant"):
            content = clip(clean(message.get("content")))
            messages.append({"role": message["role"], "content": content})
    return messages


class _Entry:
    """One message of the conversation the agent loop keeps, as GenAI messages."""

    __slots__ = ("json", "messages", "role")

    def __init__(self, role: str, messages: list[dict[str, Any]]) -> None:
        self.role = role
        self.messages = messages
        self.json = ",".join(json.dumps(m, default=str, ensure_ascii=False) for m in messages)


class Conversation:
    """One prompt attempt's conversation, as the model is sent it on each turn."""

    __slots__ = ("_calls", "_entries", "_prepare", "_results", "omitted", "summaries")

    def __init__(self, first: Iterable[Mapping[str, Any]], prepare: Prepare) -> None:
        self._prepare = prepare
        self._entries = [
            _Entry(str(m["role"]), _message(str(m["role"]), m["content"])) for m in first
        ]
        self._calls: list[str] = []  # tool_use ids the latest response asked to run
        self._results: dict[str, dict[str, Any]] = {}
        #: Summaries written by ``summarize`` budgets, by budget node id.
        self.summaries: dict[str, str] = {}
        #: Messages the latest request sent before those this conversation knows
        #: (an earlier conversation the call continued): budget ranges count them.
        self.omitted = 0

    def initial(self) -> list[dict[str, Any]]:
        """The messages the attempt started with (for the ``invoke_agent`` span)."""
        return [m for e in self._entries for m in e.messages]

    def input_json(self, sent: Any = None) -> str:
        """``gen_ai.input.messages`` for the turn starting now; ``sent`` is how many
        messages its request held, when known (the difference is `omitted`)."""
        self._settle()
        if isinstance(sent, int) and not isinstance(sent, bool):
            self.omitted = max(0, sent - len(self._entries))
        return "[" + ",".join(e.json for e in self._entries if e.json) + "]"

    def add_response(self, parts: list[dict[str, Any]], calls: list[str]) -> None:
        """The model's answer (prepared parts); ``calls`` are the tools the loop will run."""
        self._settle()
        if parts:  # the loop never sends an empty assistant turn
            self._entries.append(_Entry("assistant", [{"role": "assistant", "parts": parts}]))
        self._calls = calls
        self._results = {}

    def add_result(self, tool_use_id: str, response: Any) -> None:
        """A tool call's result (prepared), sent back on the next turn."""
        part = {"type": "tool_call_response", "id": tool_use_id, "response": response}
        self._results[tool_use_id] = {"role": "tool", "parts": [part]}

    def add_user(self, text: str) -> None:
        """A user turn a middleware added (a Stop hook's reason to go on)."""
        self._settle()
        self._entries.append(_Entry("user", _message("user", self._prepare(text))))

    def _settle(self) -> None:
        # The results of the latest tool calls make one user message, in call order.
        if self._calls:
            found = [self._results[c] for c in self._calls if c in self._results]
            self._entries.append(_Entry("user", found))
            self._calls, self._results = [], {}

    def shorten(self, removed: Iterable[Any], summary: str | None) -> None:
        """Apply what a ``budget`` node did: message ranges removed, a summary added."""
        self._settle()
        if summary is not None:
            self._summarize(summary)
        gone: set[int] = set()
        shift = self.omitted  # ranges index the request, omitted messages first
        for item in removed:
            span = item.get("messages") if isinstance(item, Mapping) else None
            if isinstance(span, list | tuple) and len(span) == 2:
                gone.update(range(max(0, int(span[0]) - shift), int(span[1]) - shift))
        if gone:
            self._entries = [e for i, e in enumerate(self._entries) if i not in gone]

    def _summarize(self, summary: str) -> None:
        # As the summarize budget strategy does: the last message of the instruction gets
        # the summary as its last text part, replacing an earlier one.
        head = next((i for i, e in enumerate(self._entries) if e.role == "assistant"), 0)
        if head < 1:
            return
        entry = self._entries[head - 1]
        message: dict[str, Any] = (
            entry.messages[-1] if entry.messages else {"role": "user", "parts": []}
        )
        parts = [
            p
            for p in message["parts"]
            if not (p.get("type") == "text" and is_summary_text(str(p.get("content", ""))))
        ]
        text = self._prepare(summary_text(summary))
        parts.append({"type": "text", "content": text})
        messages = [*entry.messages[:-1], {**message, "parts": parts}]
        self._entries[head - 1] = _Entry(entry.role, messages)
