"""What a run gets from an AG-UI ``RunAgentInput``: an agent's prompt and history, a
workflow's arguments and starting state.

Agents: the conversation's messages become Messages API messages, the last one
(a user message) the prompt and the ones before it its ``message_history``;
``context`` entries become the prompt's ``data``. System and developer messages
are not sent: the agent's own system prompt is the server's to set.

Workflows: ``forwarded_props`` (a JSON object) gives keyword arguments by name;
the text of the last user message fills the first argument it leaves out;
``state`` (a JSON object) is where ``ctx.state`` starts. Pass ``arguments=`` to
`groundswell.agui.app` to decide otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agent.run import check_history
from ..errors import ConfigurationError
from ..prompt.prompt import Prompt
from ..workflow.workflow import Workflow

__all__ = ["AgentCall", "WorkflowCall", "agent_call", "workflow_call"]


@dataclass
class AgentCall:
    """An agent's prompt for one AG-UI run."""

    prompt: Prompt[Any] | str
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class WorkflowCall:
    """A workflow's keyword arguments and starting ``ctx.state`` for one AG-UI run."""

    kwargs: dict[str, Any]
    state: dict[str, Any]


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, or the text of its text parts."""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(content or ()):
        kind = getattr(part, "type", None)
        if kind != "text":
            raise ConfigurationError(
                f"{where}.content[{i}] is a {kind!r} part; only text parts are supported: "
                "send the message's content as text"
            )
        texts.append(part.text)
    return "\n".join(texts)


def _blocks(message: Any, where: str) -> tuple[str, list[dict[str, Any]]] | None:
    """One AG-UI message as a Messages API role and content blocks (None: not sent)."""
    role = message.role
    if role == "user":
        return "user", [{"type": "text", "text": _text(message.content, where)}]
    if role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for j, call in enumerate(message.tool_calls or ()):
            try:
                args = json.loads(call.function.arguments or "{}")
            except ValueError as exc:
                raise ConfigurationError(
                    f"{where}.toolCalls[{j}].function.arguments is not JSON ({exc}); send the "
                    "arguments as a JSON object string"
                ) from None
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.function.name, "input": args}
            )
        return ("assistant", blocks) if blocks else None
    if role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": _text(message.content, where),
        }
        if message.error:
            result["is_error"] = True
        return "user", [result]
    return None  # system, developer, reasoning, activity: not part of the model's conversation


def agent_call(run_input: Any) -> AgentCall:
    """The prompt and history of an agent's run; `ConfigurationError` names what does not fit."""
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(run_input.messages):
        converted = _blocks(message, f"messages[{i}]")
        if converted is None:
            continue
        role, blocks = converted
        if messages and messages[-1]["role"] == role:  # one turn, several AG-UI messages
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    last = messages.pop() if messages else None
    if last is None or last["role"] != "user" or last["content"][-1]["type"] != "text":
        raise ConfigurationError(
            "messages must end with a user message (the prompt the agent answers); "
            "tools the client runs itself (frontend tools) are not supported"
        )
    history = list(check_history(messages, "AG-UI messages")) if messages else []
    user = "\n\n".join(b["text"] for b in last["content"] if b["type"] == "text")
    # Tool results in the same turn as the new text would be lost as a plain prompt.
    if any(b["type"] != "text" for b in last["content"]):
        raise ConfigurationError(
            "the last user message follows tool results the conversation has no call for; "
            "send tool results right after the assistant message that made the calls"
        )
    context = {c.description: c.value for c in run_input.context or ()}
    prompt: Prompt[Any] | str = Prompt(user=user, data=context) if context else user
    return AgentCall(prompt, history)


def last_user_text(run_input: Any) -> str | None:
    """The text of the conversation's last user message, or None when there is none."""
    for i in range(len(run_input.messages) - 1, -1, -1):
        message = run_input.messages[i]
        if message.role == "user":
            return _text(message.content, f"messages[{i}]")
    return None


def workflow_call(
    wf: Workflow[..., Any],
    run_input: Any,
    arguments: Callable[[Any], Mapping[str, Any]] | None = None,
) -> WorkflowCall:
    """The keyword arguments and starting state of a workflow's run (see the module docstring)."""
    state = run_input.state
    if state is None:
        state = {}
    if not isinstance(state, dict):
        raise ConfigurationError(
            f"state must be a JSON object (it becomes ctx.state), got {type(state).__name__}"
        )
    if arguments is not None:
        data = dict(arguments(run_input))
    else:
        props = run_input.forwarded_props
        if props is None:
            props = {}
        if not isinstance(props, dict):
            raise ConfigurationError(
                "forwardedProps must be a JSON object of the workflow's arguments by name, "
                f"got {type(props).__name__}"
            )
        data = dict(props)
        names = list(wf.input_schema().get("properties", {}))
        text = last_user_text(run_input)
        missing = [n for n in names if n not in data]
        if text is not None and missing:
            data[missing[0]] = text
    return WorkflowCall(wf.validate_input(data), state)
