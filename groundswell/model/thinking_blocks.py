"""Thinking blocks in a conversation: what may change around them, as the API states it.

A ``thinking`` block (its ``signature``) or a ``redacted_thinking`` block (its
``data``) is bound to what came before it when the model wrote it: the
``system`` prompt, the ``tools`` and every earlier message (Anthropic's
"preserved thinking" prefix check). The API answers 400
``invalid_request_error`` when

* the latest assistant turn of a tool loop comes back without its thinking
  blocks, or with them edited, reordered or partly left out ("`thinking` or
  `redacted_thinking` blocks in the latest assistant message cannot be
  modified"); the turn must go back exactly as it came;
* anything before a thinking block changed ("Invalid `signature` in
  `thinking` block. The block is bound to a different conversation"): that
  block and every later one are void. Models without the prefix check drop
  earlier turns' thinking anyway.

So whatever rewrites a conversation (a budget strategy dropping or
summarizing turns) keeps to two rules: while a request continues the model's
latest turn (its tool results follow it, or nothing does: a paused turn) and
that turn holds thinking blocks, nothing before them may change at all
(`pinned_thinking`); any other change removes the thinking blocks after it
from the turns kept, which is what the API's documentation advises for
trimmed or summarized history (`drop_stale_thinking`). Blocks before the
change stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["THINKING_TYPES", "drop_stale_thinking", "has_thinking", "pinned_thinking"]

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def has_thinking(message: Mapping[str, Any]) -> bool:
    """True when ``message`` holds a ``thinking`` or ``redacted_thinking`` block."""
    content = message.get("content")
    if isinstance(content, str):
        return False
    return any(isinstance(b, Mapping) and b.get("type") in THINKING_TYPES for b in content or ())


def _answers_tools(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return not isinstance(content, str) and any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content or ()
    )


def pinned_thinking(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the first message whose thinking blocks nothing before may change.

    That is the model's latest turn while the request continues it: the last
    message is the user turn with its tool results (a tool loop), or the turn
    itself (a paused turn, which may span several assistant messages), and it
    holds a thinking block. ``None`` when no such turn is pending: then earlier
    thinking may be dropped.
    """
    i = len(messages) - 1
    if i >= 0 and messages[i].get("role") == "user":
        if not _answers_tools(messages[i]):
            return None
        i -= 1
    found: int | None = None
    while i >= 0 and messages[i].get("role") == "assistant":
        if has_thinking(messages[i]):
            found = i
        i -= 1
    return found


def drop_stale_thinking(
    before: Sequence[Mapping[str, Any]], after: list[dict[str, Any]], split: int = 0
) -> tuple[list[dict[str, Any]], int]:
    """``after`` (what a rewrite made of ``before``) with the thinking voided by the rewrite gone.

    Messages are compared by identity: from the first one of ``after`` that is
    not ``before``'s at the same place, every thinking block is removed (a new
    dict for each message that held one; messages are never changed in place).
    An assistant message that held only thinking is left out; the user turns
    around it then merge, as the API merges consecutive turns of one role.
    ``split`` counts the messages of ``after`` that belong to a first part (the
    history before the prompt's own messages); returned with the list, less
    the messages left out of that part.
    """
    first = 0
    same = min(len(before), len(after))
    while first < same and after[first] is before[first]:
        first += 1
    if not any(has_thinking(m) for m in after[first:]):
        return after, split
    kept = after[:first]
    left = split
    for k in range(first, len(after)):
        message = after[k]
        if not has_thinking(message):
            kept.append(message)
            continue
        blocks = [
            b
            for b in message["content"]
            if not (isinstance(b, Mapping) and b.get("type") in THINKING_TYPES)
        ]
        if blocks:
            kept.append({**message, "content": blocks})
        elif k < split:
            left -= 1
    return kept, left
