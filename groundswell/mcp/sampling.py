"""Answering a local MCP server's ``sampling/createMessage`` with a Groundswell agent.

Only servers whose config sets ``sampling`` are told the client can sample.
``"sampling": True`` answers with a tool-less agent on the calling prompt's
model and client, within its limits: its ``max_tokens``, ``token_budget``
and ``max_retry_wait``; ``"sampling": Agent(...)`` with that agent and its
own settings and budget. Either way the answer is an ordinary prompt of that
agent, so it is a ``prompt`` node (with its ``model_call``) under the
``mcp_call`` node of the call the server asked during. One call gets at most
`MAX_SAMPLING_PER_CALL` completions; past them the server gets an error.

The request maps onto the prompt: its messages become the conversation
(``message_history``, then the last user message as the prompt's text; turns
of one role in a row are joined), ``maxTokens`` caps ``max_tokens`` (never
above the agent's own), ``temperature`` and ``stopSequences`` are passed on,
and ``systemPrompt`` is the system prompt unless the agent has one of its own
(which wins). ``modelPreferences`` and ``includeContext`` are not used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CreateMessageRequestParams,
    CreateMessageResult,
    ErrorData,
    TextContent,
)

from ..scrubbing.serialize import scrub
from ..tree.tree import NodeType

if TYPE_CHECKING:
    from .capabilities import Call

__all__ = ["MAX_SAMPLING_PER_CALL", "answer_sampling", "conversation"]

#: Completions one tool call of a server may ask for: a server looping on sampling
#: must not spend without bound.
MAX_SAMPLING_PER_CALL = 10

# The API's stop reasons by MCP's names.
_STOP_REASONS = {"end_turn": "endTurn", "max_tokens": "maxTokens", "stop_sequence": "stopSequence"}


class Unsupported(ValueError):
    """A sampling request Groundswell cannot put to the Messages API."""


async def answer_sampling(
    server: str, choice: Any, params: CreateMessageRequestParams, call: Call | None
) -> CreateMessageResult | ErrorData:
    """Answer one ``sampling/createMessage`` of ``server`` (``choice``: its ``sampling``)."""
    from ..prompt.prompt import Prompt, PromptOverrides

    if call is not None:
        call.samplings += 1
        if call.samplings > MAX_SAMPLING_PER_CALL:
            message = (
                f"MCP server {server!r} asked for more than {MAX_SAMPLING_PER_CALL} completions "
                f"during one call of {call.tool!r}; Groundswell answers at most "
                f"{MAX_SAMPLING_PER_CALL} per call (groundswell.mcp.sampling.MAX_SAMPLING_PER_CALL)"
            )
            call.record("mcp_sampling", stream=False, error=message)
            return ErrorData(code=INTERNAL_ERROR, message=message)
    if choice is True:
        run = call.run if call is not None else None
        if run is None:
            return ErrorData(
                code=INTERNAL_ERROR,
                message=f"MCP server {server!r} asked for a completion while none of its tool "
                f"calls ran; 'sampling': True answers with the calling agent's model, so it "
                f"answers only inside a call (give 'sampling' an Agent to answer any time)",
            )
        # The calling agent's own class (this layer sits below the agent loop), within the
        # calling prompt's limits: the server's maxTokens never raises them.
        agent: Any = type(run.agent)(
            name=f"{server}_sampling",
            model=run.settings["model"],
            client=run.client,
            max_tokens=min(params.max_tokens, run.settings["max_tokens"]),
            token_budget=run.settings.get("token_budget"),
            max_retry_wait=run.settings.get("max_retry_wait", 60.0),
        )
    else:
        agent = choice
    try:
        history, user = conversation(params)
    except Unsupported as exc:
        return ErrorData(code=INVALID_PARAMS, message=str(exc))
    system = params.system_prompt if not agent.config.get("system") else None
    overrides = PromptOverrides(
        max_tokens=min(params.max_tokens, agent.config["max_tokens"]),
        temperature=params.temperature,
        stop_sequences=params.stop_sequences or None,
    )
    try:
        result = await agent.run(
            Prompt(user=user, system=system or None), overrides, message_history=history
        )
    except Exception as exc:  # the server gets why; the failed prompt node stays in the tree
        return ErrorData(
            code=INTERNAL_ERROR,
            message=scrub(f"agent {agent.name!r} could not answer: {type(exc).__name__}: {exc}"),
        )
    turns = [n for n in result.node.children if n.type == NodeType.MODEL_CALL]
    response = turns[-1].payload.get("response", {}) if turns else {}
    stop = _STOP_REASONS.get(str(response.get("stop_reason")), response.get("stop_reason"))
    model = str(response.get("model") or agent.config["model"])
    if call is not None:
        call.record(
            "mcp_sampling",
            stream=False,
            agent=agent.name,
            prompt_id=result.node.id,
            stop_reason=stop,
        )
    text = result.output if isinstance(result.output, str) else str(result.output)
    return CreateMessageResult(
        role="assistant",
        content=TextContent(type="text", text=text),
        model=model,
        stop_reason=stop,
    )


def conversation(params: CreateMessageRequestParams) -> tuple[list[dict[str, Any]], str]:
    """The request's messages as ``message_history`` and the last user message's text."""
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(params.messages):
        content = message.content if isinstance(message.content, list) else [message.content]
        blocks = [_block(item, i) for item in content]
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": message.role, "content": blocks})
    if not turns or turns[-1]["role"] != "user":
        raise Unsupported("a sampling request must end with a user message")
    if turns[0]["role"] != "user":
        raise Unsupported("a sampling request must start with a user message")
    last = turns.pop()["content"]
    if any(b["type"] != "text" for b in last):
        raise Unsupported(
            "Groundswell takes images in a sampling request's earlier messages, not in its "
            "last one: put the image in a user message before the question"
        )
    return turns, "\n\n".join(b["text"] for b in last)


def _block(item: Any, i: int) -> dict[str, Any]:
    kind = getattr(item, "type", None)
    if kind == "text":
        return {"type": "text", "text": item.text}
    if kind == "image":
        source = {"type": "base64", "media_type": item.mime_type, "data": item.data}
        return {"type": "image", "source": source}
    raise Unsupported(
        f"messages[{i}] holds {kind!r} content, which the Messages API does not take "
        f"(text and images only)"
    )
