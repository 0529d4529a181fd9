"""What the agent loop makes of a model's reply: every stop reason, and replies too broken to use.

Each stop reason the API sends has one outcome (docs/agents.md, "Stop reasons
and what Groundswell does"):

- ``end_turn``, ``stop_sequence``: the answer;
- ``tool_use``: the tools run, then another turn;
- ``pause_turn``, ``compaction``: the reply goes back as it is, for another turn;
- ``max_tokens``: the answer, with a ``truncated`` event; but when it cut off a
  tool call, `OutputTruncated`, or with ``continue_on_max_tokens=True``
  another turn without the cut-off call (`continue_after_cut`);
- ``refusal``: `ModelRefused`; ``model_context_window_exceeded``:
  `ContextWindowExceeded`;
- any other: a `ModelAPIError` naming it, never an answer taken at face value.

The SDK builds its ``Message`` without checking it, so `reply_blocks` does:
a reply without a list of content blocks, a string stop reason or whole token
counts is a `ModelAPIError`. A tool call whose input is not an object is
answered with an error result (`bad_tool_input`), and the tool does not run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import (
    ContextWindowExceeded,
    ModelAPIError,
    ModelRefused,
    OutputTruncated,
)
from ..model.thinking_blocks import THINKING_TYPES

if TYPE_CHECKING:
    from ..tree.tree import EventNode
    from .run import PromptRun

__all__ = [
    "PLAIN",
    "bad_tool_input",
    "block_dict",
    "continue_after_cut",
    "cut_call",
    "is_final",
    "malformed",
    "reply_blocks",
    "stopped",
]

#: The stop reasons the loop's own branches take as they are (the answer, tools, a pause);
#: `stopped` decides the others.
PLAIN = frozenset({"end_turn", "stop_sequence", "tool_use", "pause_turn", "compaction"})
# Blocks that ask for a call: cut off, they cannot run (nor go back to the API unanswered).
_CALLS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def is_final(message: Any) -> bool:
    """True when ``message`` ends the prompt (no tool call to run, no paused turn)."""
    stop = message.stop_reason
    if stop == "pause_turn" or stop == "compaction":
        return False
    if stop == "tool_use":
        return not any(b.type == "tool_use" for b in message.content)
    if stop == "max_tokens":  # cut off inside a call: another turn (or an error before this)
        content = message.content
        return not (content and getattr(content[-1], "type", None) in _CALLS)
    return True


def reply_blocks(message: Any) -> list[dict[str, Any]] | str:
    """An SDK ``Message``'s content blocks as the dicts sent back (`block_dict`), or what
    makes it unusable: the SDK does not check it."""
    # Every model turn passes here: checked and converted in one pass, with plain reads;
    # the wording only for a broken one.
    try:
        content = message.content
        usage = message.usage
        if (
            type(content) is list
            and type(message.stop_reason) is str
            and type(usage.input_tokens) is int
            and type(usage.output_tokens) is int
        ):
            blocks: list[dict[str, Any]] = []
            for block in content:
                kind = block.type
                if kind == "text":
                    text = block.text
                    if type(text) is not str:
                        break
                    if getattr(block, "citations", None):
                        blocks.append(block.model_dump(mode="json", exclude_none=True))
                    else:
                        blocks.append({"type": "text", "text": text})
                elif kind == "tool_use":
                    call_id, name = block.id, block.name
                    if type(call_id) is not str or type(name) is not str:
                        break
                    blocks.append(
                        {"type": "tool_use", "id": call_id, "name": name, "input": block.input}
                    )
                elif type(kind) is not str:
                    break
                else:
                    blocks.append(block.model_dump(mode="json", exclude_none=True))
            else:
                return blocks
    except AttributeError:
        pass
    return _problem(message)


def block_dict(block: Any) -> dict[str, Any]:
    """An SDK content block as the dict sent back in the next request."""
    # Plain attribute reads for the common blocks: model_dump costs more than the rest
    # of a turn's bookkeeping put together.
    kind = block.type
    if kind == "text" and not getattr(block, "citations", None):
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return dumped


def _problem(message: Any) -> str:
    content = getattr(message, "content", None)
    if type(content) is not list:
        return f"its content is {_kind(content)}, not a list of content blocks"
    stop = getattr(message, "stop_reason", None)
    if type(stop) is not str:
        return f"its stop_reason is {_kind(stop)}, not a string"
    usage = getattr(message, "usage", None)
    if (
        type(getattr(usage, "input_tokens", None)) is not int
        or type(getattr(usage, "output_tokens", None)) is not int
    ):
        return f"its usage is {_kind(usage)}, without whole input_tokens and output_tokens"
    for index, block in enumerate(content):
        kind = getattr(block, "type", None)
        if kind == "text":
            if type(getattr(block, "text", None)) is not str:
                return f"text block {index} has no string text"
        elif kind == "tool_use":
            if type(getattr(block, "id", None)) is not str or (
                type(getattr(block, "name", None)) is not str
            ):
                return f"tool_use block {index} has no string id and name"
        elif type(kind) is not str:
            return f"content block {index} is {_kind(block)}, without a type"
    return f"it is {_kind(message)}, not a Message"


def malformed(problem: str) -> ModelAPIError:
    """The error for a reply `reply_blocks` refused."""
    return ModelAPIError(
        f"the Anthropic API's answer is malformed: {problem}; it cannot be used (something "
        "between Groundswell and the API changed it, or the API had an incident): try again",
        status_code=200,
    )


def _kind(value: Any) -> str:
    return "missing" if value is None else f"{type(value).__name__} {value!r:.40}"


def cut_call(content: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The call block ``max_tokens`` cut off at the end of a reply's ``content``, if any."""
    if content and content[-1].get("type") in _CALLS:
        return content[-1]
    return None


def stopped(
    run: PromptRun,
    node: EventNode | None,
    message: Any,
    content: list[dict[str, Any]],
    text: str,
) -> ModelAPIError | None:
    """The error a reply's stop reason (not in `PLAIN`) makes of it, or ``None`` to go on.

    The outcome is an event on ``node`` (the reply's ``model_call`` node, when
    there is one).
    """
    stop = message.stop_reason
    tree = run.tree
    error: ModelAPIError
    if stop == "max_tokens":
        call = cut_call(content)
        limit = run.settings.get("max_tokens")
        if call is None:
            last = content[-1].get("type") if content else None
            if text.strip() or last not in THINKING_TYPES:
                return None  # text: the answer, with a `truncated` event on the prompt
            # Cut off while thinking: there is no answer at all, not an empty one.
            if node is not None:
                tree.add_event(node, "output_truncated", tool=None, max_tokens=limit)
            return OutputTruncated(
                f"the reply was cut off at max_tokens={limit} while the model was still "
                "thinking, before any answer; raise max_tokens (it must leave room for the "
                "answer beyond thinking.budget_tokens) or lower the thinking budget",
                max_tokens=limit,
            )
        name = str(call.get("name", call.get("type")))
        if run.settings.get("continue_on_max_tokens"):
            if node is not None:
                tree.add_event(node, "max_tokens_continue", tool=name, max_tokens=limit)
            return None
        event, data = "output_truncated", {"tool": name, "max_tokens": limit}
        error = OutputTruncated(
            f"the reply was cut off at max_tokens={limit} inside a call to {name!r}, which "
            "therefore did not run; raise max_tokens, or set continue_on_max_tokens=True to "
            "give the model another turn",
            raw=text,
            tool_name=name,
            max_tokens=limit,
        )
    elif stop == "refusal":
        details = getattr(message, "stop_details", None)
        category = getattr(details, "category", None)
        explanation = getattr(details, "explanation", None)
        event, data = "refusal", {"category": category, "explanation": explanation}
        why = f", category {category}" if category else ""
        error = ModelRefused(
            f"the model refused to answer (stop reason refusal{why})"
            + (f": {explanation}" if explanation else "")
            + "; rephrase the prompt or give it more context, try another model, or let "
            "reflection retry it with feedback (enable_reflection=True)",
            raw=text,
            category=category,
            explanation=explanation,
        )
    elif stop == "model_context_window_exceeded":
        event, data = "context_window_exceeded", {"characters": len(text)}
        error = ContextWindowExceeded(
            f"the reply filled the context window of {message.model!r} after {len(text)} "
            "characters (stop reason model_context_window_exceeded); shorten the input (a "
            "TokenBudget trims the conversation history) or ask for less at once",
            raw=text,
        )
    else:
        event, data = "unknown_stop_reason", {"stop_reason": stop}
        error = ModelAPIError(
            f"the API stopped the reply for a reason this version of Groundswell does not "
            f"know ({stop!r}), so it was not used as an answer; upgrade groundswell",
            status_code=200,
        )
    if node is not None:
        tree.add_event(node, event, **data)
    return error


def continue_after_cut(run: PromptRun, content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``content`` without its calls, and the note that asks the model to go on.

    A call cut off at ``max_tokens`` cannot run, and the API takes no call
    back without its result, so the reply's client tool calls and the cut-off
    call are dropped (none of them ran) and the rest (text, thinking, server
    tool calls with their results) is kept; the next user turn says so.
    The API's advice for a cut-off call is a larger ``max_tokens``; this is
    for when that is not possible. `MaxTurnsExceeded` ends a model that keeps
    running out.
    """
    call = cut_call(content)
    name = str(call.get("name", call.get("type"))) if call else "a tool"
    # Client tool calls never ran, and the cut-off call is incomplete: both go. A server
    # tool's call before the cut ran on the API's side and its result block follows
    # it: the pair stays (a result without its call would be refused).
    kept = [b for b in content if b is not call and b.get("type") != "tool_use"]
    calls = len(content) - len(kept)
    limit = run.settings.get("max_tokens")
    run.continue_with(
        f"Your reply was cut off by the output limit (max_tokens={limit}) while you were "
        f"writing a call to {name}, so "
        + ("no tool ran" if calls > 1 else "it did not run")
        + ". Go on from there: make the call again with a smaller input, or split the work "
        "into smaller steps.",
        reason=f"raise max_tokens (now {limit}): the replies keep being cut off inside a call",
    )
    return kept


def bad_tool_input(name: str, given: Any) -> str:
    """The error result for a call whose input is not a JSON object (the tool does not run)."""
    return (
        f"Error: the input of this call to {name} must be a JSON object of the tool's "
        f"parameters (its input_schema), but it was {type(given).__name__} {given!r:.80}; "
        "the tool did not run. Call it again with an object."
    )
